"""Azure Batch's part, played on local nodes: `RehearsalBatch`, the account behind the rehearsal's Batch endpoint
(devtools/rehearsal/batch_endpoint.py), takes the jobs and tasks `infra submit` and `pulumi up` send through the
real azure-batch client and answers for them, their pool and its nodes as Batch's data plane does; how a task runs
on the nodes, by Batch's documented rules for a multi-instance task, is its node side
(devtools/rehearsal/task_runner.py: TaskRunner).

The account's state (jobs, tasks, where the primary's task folder is) is written to STATE_FILE in the rehearsal's
folder on every change; once the rehearsal has ended, `python -m devtools rehearse --serve` serves it
(`RecordedAccount`) behind the same endpoint.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from devtools.rehearsal import batch_endpoint as rest
# Batch's rules as pure functions; tests and tools import batch_env, START_TASK_ENV and task_folders from here too
from devtools.rehearsal.batch_rules import START_TASK_ENV, batch_env, node_id  # noqa: F401
from devtools.rehearsal.nodes import BATCH_ROOT, Node, Pool, task_folders  # noqa: F401
from devtools.rehearsal.storage import Account
from devtools.rehearsal.task_runner import TaskRunner

STATE_FILE = "batch-state.json"


class RehearsalBatch(TaskRunner):
    """A Batch account with one pool of local nodes. Jobs run in a background thread, one at a time."""

    def __init__(self, pool: Pool, account: Account, node_env: dict[str, str], pool_spec: dict[str, Any],
                 identities: dict[str, str], work: Path, log: Callable[[str], None] = print, slots: int = 0,
                 allocated: int | None = None):
        """`node_env`: the image's environment (PATH to the training environment...); `pool_spec`: the Pool
        resource's inputs (startTask, mountConfiguration); `identities`: identity resource ID -> principal ID;
        `work`: the rehearsal's folder, where its state is recorded for the verbs of other processes; `slots`: the
        training processes a node here runs (the rehearsal's --processes-per-node; 0: as the job asks), for jobs
        submitted from elsewhere (a member's `infra submit`), whose launch asks one per GPU of the size;
        `allocated`: the local nodes in the pool at first (default all); the others are Azure's reserve, which join
        only when the stack's autoscale formula asks for more nodes than the pool holds (devtools/rehearsal/
        autoscale.py): no spare node beyond what the formula asks for."""
        # the local nodes (not `pool`: that is Pools - Get, which the verbs call since the budget check)
        self.nodes, self.account, self.node_env, self.pool_spec = pool, account, node_env, pool_spec
        self.identities, self.log, self.work, self.slots = identities, log, work, slots
        self.jobs: dict[str, dict[str, Any]] = {}
        self.reslotted: set[str] = set()  # jobs whose --slots _command_here changed
        self.tasks: dict[str, dict[str, Any]] = {}
        self.threads: dict[str, threading.Thread] = {}
        self.processes: dict[str, list[subprocess.Popen]] = {}
        self.terminated: set[str] = set()
        self.started_nodes = False
        self.lock = threading.RLock()  # the endpoint's threads and the job's
        self.retried_at: list[float] = []
        self.preempted: dict[str, str] = {}  # job -> the node preempted under its running task, until requeued
        self.requeued_at: list[float] = []  # time.monotonic() of each requeue after a preemption
        self.uploaded: dict[str, list[str]] = {}  # job -> the blobs its output files uploaded  # time.monotonic() of each retry, for the fault tests
        # Node scheduling (Compute Node - Disable Scheduling, asked by a node's `launch` after a node fault:
        # training/cluster/keep_out.py): pool node index -> the option asked. A disabled node takes no new task.
        self.disabled: dict[int, str] = {}
        # Principals with a role that allows node operations on the pool. None by default, as the program grants
        # none (docs/architecture.md, "When a node fails mid-run"); a test adds the pool's identity as a team would
        # add the custom role. The Batch endpoint's token check reads it (devtools/rehearsal/run.py).
        self.node_operators: set[str] = set()
        # Pool - Remove Nodes (keep_out.py, taskcompletion): pool node index -> option; such a node takes no new task
        # and leaves the pool once its task has ended (then in `removed`). `reserve`: local nodes not in the pool yet.
        self.leaving: dict[int, str] = {}
        self.removed: set[int] = set()
        self.reserve: set[int] = set(range(allocated, len(pool.nodes))) if allocated is not None else set()
        # What every task's commands get besides Batch's variables once the nodes reach the account
        # (reach_from_nodes): AZ_BATCH_ACCOUNT_URL and the node's managed identity endpoint.
        self.account_env: dict[str, str] = {}
        self.placed: dict[str, list[list[int]]] = {}  # job -> each attempt's pool node indexes, the primary first

    # --- the account behind the Batch endpoint (devtools/rehearsal/batch_endpoint.BatchAccount) ----------------
    def add_job(self, job: dict[str, Any]) -> None:
        with self.lock:
            if job["id"] in self.jobs:
                raise rest.job_exists()
            self.jobs[job["id"]] = job
            self.save()

    def job(self, job_id: str) -> dict[str, Any]:
        if job_id not in self.jobs:
            raise rest.job_not_found()
        return self.jobs[job_id]

    def list_jobs(self) -> list[dict[str, Any]]:
        return list(self.jobs.values())

    def update_job(self, job_id: str, changes: dict[str, Any]) -> None:
        with self.lock:
            job = self.job(job_id)
            job.update(changes)
            self._end_with_tasks(job_id)
            self.save()

    def terminate_job(self, job_id: str, reason: str) -> None:
        """The job's running tasks are stopped; it is `terminating` until they have ended, then completed
        (https://learn.microsoft.com/rest/api/batchservice/job/terminate)."""
        with self.lock:
            job = self.job(job_id)
            if job["state"] == "completed":
                raise rest.job_completed()
            job["executionInfo"]["terminateReason"] = reason
            self.terminated.add(job_id)
            task = self.tasks.get(job_id)
            job["state"] = "terminating" if task and task["state"] == "running" else "completed"
            self.save()
        for process in self.processes.get(job_id, []):
            if process.poll() is None:
                process.kill()

    def delete_job(self, job_id: str) -> None:
        if job_id in self.jobs and self.jobs[job_id]["state"] != "completed":
            self.terminate_job(job_id, "UserTerminate")
        with self.lock:
            self.job(job_id)
            self.jobs.pop(job_id)
            self.tasks.pop(job_id, None)
            self.save()

    def add_task(self, job_id: str, task: dict[str, Any]) -> None:
        with self.lock:
            if self.job(job_id)["state"] == "completed":
                raise rest.job_completed()
            self.tasks[job_id] = task
            self.save()
        thread = threading.Thread(target=self._run_job, args=(job_id,), daemon=True)
        self.threads[job_id] = thread
        thread.start()

    def task(self, job_id: str, task_id: str) -> dict[str, Any]:
        self.job(job_id)
        task = self.tasks.get(job_id)
        if task is None or task["id"] != task_id:
            raise rest.task_not_found()
        return task

    def _task_nodes(self, job_id: str, count: int) -> list[Node]:
        """The nodes of the job's newest attempt (the primary first), else the first `count` of the pool."""
        placed = self.placed.get(job_id)
        return [self.nodes.nodes[i] for i in placed[-1]] if placed else self.nodes.nodes[:count]

    def subtasks(self, job_id: str, task_id: str) -> list[dict[str, Any]]:
        """The subtasks of a multi-instance task: one per node but the primary's (ids 1..n-1; Tasks_ListSubTasks)."""
        task = self.task(job_id, task_id)
        nodes = self._task_nodes(job_id, task["multiInstanceSettings"]["numberOfInstances"])
        return [{"id": index, "nodeInfo": {"nodeId": node_id(node), "poolId": "gpu"},
                 "state": "completed" if task["state"] == "completed" else "running"}
                for index, node in enumerate(nodes) if index > 0]

    def task_file(self, job_id: str, task_id: str, path: str) -> bytes:
        self.task(job_id, task_id)
        file = self._task_dir(self._task_nodes(job_id, 1)[0], job_id, task_id) / path
        if not file.is_file():
            raise rest.file_not_found()
        return file.read_bytes()

    def pool(self, pool_id: str) -> dict[str, Any]:
        if pool_id != "gpu":
            raise rest.pool_not_found()
        # An autoscale pool, as every stack declares it (infra/backends/batch/cluster.py): not the budget guard's stop
        return {"id": pool_id, "state": "active", "allocationState": "steady", "enableAutoScale": True,
                "currentDedicatedNodes": len(self._in_pool()), "currentLowPriorityNodes": 0}

    def _in_pool(self) -> list[Node]:
        """The local nodes in the pool: not Azure's reserve, not removed."""
        return [n for n in self.nodes.nodes if n.index not in self.reserve and n.index not in self.removed]

    def pool_nodes(self, pool_id: str) -> list[dict[str, Any]]:
        """Nodes - List: its local nodes are dedicated; a node runs the task of a running job's newest attempt, is
        offline once its scheduling is disabled and it runs none (taskcompletion: "Enter offline state when all
        Tasks have completed", BatchNodeDisableSchedulingOption in the REST spec 2025-06-01), else idle. Node IDs
        are tvm-<index>, the same as AZ_BATCH_NODE_ID; ipAddress is the node's address, as in AZ_BATCH_HOST_LIST
        (what keep_out maps a blamed host by)."""
        self.pool(pool_id)
        busy = {i for job_id, task in self.tasks.items() if task["state"] == "running"
                for i in (self.placed.get(job_id) or [[]])[-1]}
        return [{"id": node_id(node), "state": "running" if node.index in busy else
                 "offline" if node.index in self.disabled else "idle",
                 "schedulingState": "disabled" if node.index in self.disabled else "enabled",
                 "ipAddress": node.address, "isDedicated": True} for node in self._in_pool()]

    def disable_node_scheduling(self, pool_id: str, node: str, option: str) -> None:
        """Compute Node - Disable Scheduling (POST /pools/{poolId}/nodes/{nodeId}/disablescheduling): the node takes
        no new task from now on; with taskcompletion the task it runs goes on to its end (REST spec 2025-06-01,
        BatchNodeDisableSchedulingOption). 404 NodeNotFound for a node not in the pool."""
        self.pool(pool_id)
        found = [n for n in self.nodes.nodes if node_id(n) == node]
        if not found:
            raise rest.BatchRefusal(404, "NodeNotFound", "The specified node does not exist.")
        with self.lock:
            self.disabled[found[0].index] = option
        self.log(f"rehearsal: node {found[0].hostname} ({node}): scheduling disabled ({option}); Batch schedules no "
                 "new task on it")

    def remove_nodes(self, pool_id: str, node_ids: list[str], option: str) -> None:
        """Pool - Remove Nodes (POST /pools/{poolId}/removenodes): with taskcompletion the nodes take no new task and
        leave once their tasks have ended ("Remove Compute Nodes when all Tasks have completed",
        BatchNodeDeallocationOption, REST spec 2025-06-01); the pool here is always steady, so never refused."""
        self.pool(pool_id)
        by_id = {node_id(n): n for n in self._in_pool()}
        missing = [i for i in node_ids if i not in by_id]
        if missing:
            raise rest.BatchRefusal(404, "NodeNotFound", "The specified node does not exist.")
        with self.lock:
            for i in node_ids:
                self.leaving[by_id[i].index] = option
        self.log(f"rehearsal: node(s) {', '.join(node_ids)} asked to leave the pool ({option}): they go once their "
                 "task has ended")

    def reach_from_nodes(self, account_url: str, identity_env: dict[str, str], storage: dict[str, str] | None = None):
        """The account's endpoint and the managed identity endpoint, reachable from every node at the host's URLs
        (devtools/rehearsal/node_ports.py), and named in every task's environment: AZ_BATCH_ACCOUNT_URL, which
        Batch sets for all tasks (https://learn.microsoft.com/azure/batch/batch-compute-node-environment-variables),
        and the token endpoint's variables (the node's IMDS here: devtools/rehearsal/azure_ad.py). `storage`: declared
        container URL -> the storage front's URL for it (AzureAd.container_url), reachable from the nodes too; a
        task's coordination command names the declared URL (node-stage's `data`), which a node here cannot resolve,
        so it runs with the front's (_storage_here). Returns the relay, to close (a context manager) before the
        nodes go."""
        import contextlib

        from devtools.rehearsal.node_ports import NodePorts

        self.storage_here = dict(storage or {})
        try:
            ports = NodePorts([self.nodes.holders[n.index].pid for n in self.nodes.nodes],
                              [account_url, identity_env.get("IDENTITY_ENDPOINT", ""), *self.storage_here.values()])
        except OSError as err:  # the job still runs; only a node fault's keep_out cannot ask the account
            self.log(f"rehearsal: the nodes cannot reach the account's endpoint ({err}); AZ_BATCH_ACCOUNT_URL not set")
            return contextlib.nullcontext()
        self.account_env = {"AZ_BATCH_ACCOUNT_URL": account_url, **identity_env}
        return ports

    def _end_with_tasks(self, job_id: str) -> None:
        # onAllTasksComplete terminatejob: the job completes once its task has (Batch's job/add reference).
        task = self.tasks.get(job_id)
        job = self.jobs[job_id]
        if job.get("onAllTasksComplete") == "terminatejob" and task and task["state"] == "completed":
            job["state"] = "completed"
            job["executionInfo"]["endTime"] = rest.iso(datetime.now(timezone.utc))

    def preempt(self, job_id: str, node: Node) -> int:
        """A Spot node preempted while the job's task runs on it (https://learn.microsoft.com/azure/batch/batch-spot-vms:
        "If a preemption occurs, the spot compute node will be evicted and all work that wasn't appropriately
        checkpointed will be lost ... The running Batch task that was interrupted due to preemption will be
        automatically requeued for execution by a different compute node"). The node's processes go with its VM;
        the task's processes on its other nodes are stopped with the task (the docs do not say how Batch stops the
        other subtasks of a requeued multi-instance task; here at once). _run_job then requeues the task. Returns
        how many processes the evicted node had."""
        with self.lock:
            self.preempted[job_id] = node.hostname
        killed = self.nodes.kill(node)
        for other in self.nodes.nodes:
            self.nodes.kill(other)
        return killed

    def wait(self, job_id: str, timeout: float | None = None) -> None:
        self.threads[job_id].join(timeout)

    def save(self) -> None:
        """The state `python -m devtools rehearse --serve` serves once the rehearsal has ended (RecordedAccount),
        replaced in one rename so it is never half written."""
        state = {"pid": os.getpid(), "azurite_port": self.account.azurite.port,
                 "primary_batch_root": str(self.nodes.nodes[0].batch_root), "jobs": self.jobs, "tasks": self.tasks}
        partial = self.work / f".{STATE_FILE}.partial"
        partial.write_text(json.dumps(state, indent=1, default=str))
        partial.replace(self.work / STATE_FILE)


def running(work: Path) -> bool:
    """Whether the rehearsal that recorded its state in `work` still runs."""
    try:
        os.kill(int(json.loads((work / STATE_FILE).read_text())["pid"]), 0)
    except (OSError, ValueError, KeyError, json.JSONDecodeError):
        return False
    return True


class RecordedAccount(rest.JobsInDicts):
    """A rehearsal's Batch account as it left it (STATE_FILE and the primary's task folders), for
    `python -m devtools rehearse --serve`: the jobs and files read as they are; nothing runs any more, so a job
    still active is terminated at once."""

    def __init__(self, work: Path):
        try:
            state = json.loads((work / STATE_FILE).read_text())
        except (OSError, json.JSONDecodeError):
            raise FileNotFoundError(f"no rehearsal state in {work}") from None
        self.jobs, self.tasks = state["jobs"], state["tasks"]
        self.primary_batch_root = Path(state["primary_batch_root"])

    def add_job(self, job):
        raise rest.BatchRefusal(403, "OperationNotPermittedOnRecordedRehearsal",
                                "a rehearsal's recorded account takes no new job: run `python -m devtools rehearse`")

    def update_job(self, job_id, changes):
        self.job(job_id).update(changes)

    def terminate_job(self, job_id, reason):
        job = self.job(job_id)
        if job["state"] == "completed":
            raise rest.job_completed()
        job["state"] = "completed"
        job.setdefault("executionInfo", {})["terminateReason"] = reason

    add_task = add_job

    def task_file(self, job_id, task_id, path):
        self.task(job_id, task_id)
        task_dir = RehearsalBatch._task_dir_on_node(job_id, task_id).relative_to(BATCH_ROOT)
        file = self.primary_batch_root / task_dir / path
        if not file.is_file():
            raise rest.file_not_found()
        return file.read_bytes()

    def pool(self, pool_id):
        raise rest.pool_not_found()

    def pool_nodes(self, pool_id):
        raise rest.pool_not_found()
