"""Azure Batch's part, played on local nodes: `RehearsalBatch`, the account behind the rehearsal's Batch endpoint
(devtools/rehearsal/batch_endpoint.py), runs the jobs and tasks `infra submit` and `pulumi up` send through the
real azure-batch client, by Batch's documented rules for a multi-instance task.

Rules played (each from the page cited where it is applied):
- the pool's start task runs on every node before any task, and must succeed (startTask.waitForSuccess);
- a task's command line runs without a shell (https://learn.microsoft.com/azure/batch/batch-compute-node-environment-variables:
  "command lines ... are not executed under a shell"): it is split into words, as our /bin/bash -c lines expect;
- the nodes' folders and variables are those documented (node_folders, task_folders; batch_env in batch_rules.py);
- multi-instance: common resource files are downloaded into the task-shared folder on every node (which is the
  task folder AZ_BATCH_TASK_DIR), the coordination command runs on every node, and only when all have finished
  does the application command run on the primary (https://learn.microsoft.com/azure/batch/batch-mpi);
- resource and output files reach storage with the identity their `identityReference` names
  (https://learn.microsoft.com/azure/batch/managed-identity-pools), so a missing role fails the task;
- the task fails when the application command exits non-zero and is retried up to
  constraints.maxTaskRetryCount times (https://learn.microsoft.com/azure/batch/batch-task-error-checking); a
  task over constraints.maxWallClockTime is terminated (the docs are silent on retrying it: here it is not);
- output files with uploadCondition taskcompletion are uploaded whatever the exit code; a pattern with
  wildcards uploads each match under `path` (the blob virtual directory prepended to each blob name,
  https://learn.microsoft.com/rest/api/batchservice/task/add#outputfileblobcontainerdestination). Whether the
  folders below the pattern's fixed part are kept in the blob name, the docs do not say; here they are kept;
- onAllTasksComplete terminatejob: the job completes once its task has (Batch's job/add reference).
- a failure's executionInfo.failureInfo.category is one of the REST spec's BatchErrorSourceCategory values,
  usererror or servererror (Azure/azure-rest-api-specs, Batch data plane 2025-06-01; checked by
  tests/devtools/rehearsal/batch_rest_spec.py).
The container is the one thing not played: the commands run in a local training environment with the image's
environment applied, on nodes that are network namespaces (devtools/rehearsal/nodes.py); with `rehearse --container`
they run in the image (devtools/rehearsal/containers.py: ContainerBatch).

The account's state (jobs, tasks, where the primary's task folder is) is written to STATE_FILE in the rehearsal's
folder on every change; once the rehearsal has ended, `python -m devtools rehearse --serve` serves it
(`RecordedAccount`) behind the same endpoint.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from devtools.rehearsal import batch_endpoint as rest
# Batch's rules as pure functions (tests and tools import batch_env and START_TASK_ENV from here too)
from devtools.rehearsal.batch_rules import START_TASK_ENV, batch_env, node_id, output_blob_names, wall_clock_seconds
from devtools.rehearsal.nodes import BATCH_ROOT, Node, Pool, node_folders, task_folders
from devtools.rehearsal.storage import Account

STATE_FILE = "batch-state.json"
POLL_S = 0.5


class ResourceFilesFailed(Exception):
    """A resource file could not be downloaded: Batch fails the task before its command runs, reporting it in
    executionInfo.failureInfo (https://learn.microsoft.com/azure/batch/batch-task-error-checking)."""


def _now() -> str:
    return rest.iso(datetime.now(timezone.utc))


class RehearsalBatch:
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

    # --- the node side -----------------------------------------------------------------------------------------
    def _task_dir(self, node: Node, job_id: str, task_id: str) -> Path:
        return node.host_path(self._task_dir_on_node(job_id, task_id))

    @staticmethod
    def _task_dir_on_node(job_id: str, task_id: str) -> Path:
        return task_folders(BATCH_ROOT, job_id, task_id)["AZ_BATCH_TASK_DIR"]

    def _batch_env(self, node: Node, job_id: str, task_id: str, nodes: list[Node] | None = None) -> dict[str, str]:
        """Batch's variables on `node` for a task on `nodes` (default: the whole pool), the primary first."""
        nodes = nodes or self.nodes.nodes
        env = batch_env(BATCH_ROOT, [n.address for n in nodes], nodes.index(node), job_id, task_id, node_id(node))
        return {**self.account_env, **env} if job_id else env

    def _run(self, job_id: str, node: Node, command_line: str, env: dict[str, str], cwd: Path, out: Path,
             timeout: float | None) -> int:
        """One command line on a node, without a shell, its output appended to out/stdout.txt, stderr.txt."""
        argv = shlex.split(command_line)
        out_host = node.host_path(out)
        out_host.mkdir(parents=True, exist_ok=True)
        node.host_path(cwd).mkdir(parents=True, exist_ok=True)
        with open(out_host / "stdout.txt", "ab") as stdout, open(out_host / "stderr.txt", "ab") as stderr:
            process = subprocess.Popen(self.nodes.command(node, argv, cwd), env=env, stdout=stdout, stderr=stderr)
            self.processes.setdefault(job_id, []).append(process)
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                try:
                    return process.wait(timeout=POLL_S)
                except subprocess.TimeoutExpired:
                    if job_id in self.terminated:  # terminated while this command started
                        process.kill()
                    elif deadline is not None and time.monotonic() > deadline:
                        process.kill()
                        process.wait()
                        raise

    def _storage_here(self, command: str) -> str:
        """A command line with each declared container URL as a node here reaches it (reach_from_nodes); the task
        keeps the command it was given."""
        for declared, here in getattr(self, "storage_here", {}).items():
            command = command.replace(declared, here)
        return command

    def _start_nodes(self) -> None:
        """The pool's start task on every node, once (startTask.waitForSuccess: a failure keeps the node unusable)."""
        if self.started_nodes:
            return
        start = self.pool_spec.get("startTask") or {}
        # The start task's folder is its working folder and holds what it downloads
        # (https://learn.microsoft.com/azure/batch/files-and-directories, "startup"); the page gives no value for its
        # AZ_BATCH_TASK_* variables, so it gets the node's only (our start task uses no other).
        startup = node_folders(BATCH_ROOT)["AZ_BATCH_NODE_STARTUP_DIR"]
        for node in self.nodes.nodes:
            env = {**self.node_env, **{k: v for k, v in self._batch_env(node, "", "").items() if k in START_TASK_ENV},
                   # The local-volume script (dataTier node-local) finds no drive to stripe here, whatever the host
                   # holds: the node's volume is a folder in its own Batch tree, standing in for its NVMe drives.
                   "LOCAL_VOLUME_TEST_DRIVES": ""}
            code = self._run("", node, start.get("commandLine", "true"), env, startup, startup, None)
            if code != 0:
                raise RuntimeError(f"the pool's start task failed on {node.hostname} with exit code {code}: "
                                   f"{node.host_path(startup / 'stderr.txt')}")
        self.started_nodes = True

    def _download(self, node: Node, resource: dict[str, Any], into: Path) -> int:
        """A resource file of the storageContainerUrl + blobPrefix kind, into `into` keeping the blob names."""
        from azure.storage.blob import ContainerClient

        principal = self.identities[resource["identityReference"]["resourceId"]]
        client = ContainerClient.from_container_url(self.account.as_identity(principal, resource["storageContainerUrl"]))
        count = 0
        for blob in client.list_blobs(name_starts_with=resource.get("blobPrefix") or None):
            target = node.host_path(into / resource.get("filePath", "") / blob.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(client.download_blob(blob.name).readall())
            count += 1
        return count

    def _upload_outputs(self, node: Node, task: dict[str, Any], working_dir: Path) -> list[str]:
        from azure.storage.blob import ContainerClient

        uploaded = []
        for output in task.get("outputFiles", []):
            if output["uploadOptions"]["uploadCondition"] not in ("taskcompletion", "tasksuccess", "taskfailure"):
                continue
            container = output["destination"]["container"]
            principal = self.identities[container["identityReference"]["resourceId"]]
            client = ContainerClient.from_container_url(self.account.as_identity(principal, container["containerUrl"]))
            for file, name in output_blob_names(output["filePattern"], node.host_path(working_dir),
                                                container.get("path", "")).items():
                with open(file, "rb") as f:
                    client.upload_blob(name, f, overwrite=True)
                uploaded.append(name)
        return uploaded

    def _attempt(self, job_id: str, task: dict[str, Any]) -> int:
        """One try of the multi-instance task on every node; the application command's exit code."""
        task_id = task["id"]
        multi = task["multiInstanceSettings"]
        if multi["numberOfInstances"] > len(self.nodes.nodes):
            raise RuntimeError(f"the task asks for {multi['numberOfInstances']} nodes; the rehearsal pool has "
                               f"{len(self.nodes.nodes)} (--nodes)")
        # Batch places the task on nodes that take tasks: not one whose scheduling is disabled or that is leaving.
        # A task waiting again has the pool's autoscale play Azure's arithmetic (_autoscale).
        schedulable = self._autoscale(multi["numberOfInstances"])
        nodes = schedulable[:multi["numberOfInstances"]]
        with self.lock:
            self.placed.setdefault(job_id, []).append([n.index for n in nodes])
        task_env = {e["name"]: e["value"] for e in task.get("environmentSettings", [])}
        limit = wall_clock_seconds(task.get("constraints", {}).get("maxWallClockTime"))
        task_dir = self._task_dir_on_node(job_id, task_id)
        shared = task_folders(BATCH_ROOT, job_id, task_id)["AZ_BATCH_TASK_SHARED_DIR"]  # = task_dir, as documented
        for node in nodes:
            for resource in multi.get("commonResourceFiles", []):
                try:
                    self._download(node, resource, shared)
                except Exception as err:  # noqa: BLE001 - any storage refusal fails the task, as on Batch
                    code = getattr(err, "error_code", None)
                    raise ResourceFilesFailed(f"{resource['storageContainerUrl']} on {node.hostname}: "
                                              f"{str(err).splitlines()[0]}" + (f" ({code})" if code else "")) from None
        # Coordination on every node, all at once; the application command waits for all of them.
        codes: dict[int, int] = {}

        def coordinate(node: Node) -> None:
            env = {**self.node_env, **task_env, **self._batch_env(node, job_id, task_id, nodes)}
            codes[node.index] = self._run(job_id, node, self._storage_here(multi["coordinationCommandLine"]), env,
                                          task_dir / "wd", task_dir, limit)

        threads = [threading.Thread(target=coordinate, args=(node,)) for node in nodes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        failed = {i: c for i, c in codes.items() if c != 0}
        if failed:
            return next(iter(failed.values()))
        primary = nodes[0]
        return self._run(job_id, primary, self._command_here(job_id, task["commandLine"]),
                         {**self.node_env, **task_env, **self._batch_env(primary, job_id, task_id, nodes)},
                         task_dir / "wd", task_dir, limit)

    def _autoscale(self, instances: int) -> list[Node]:
        """The nodes that take tasks, after the pool's autoscale has added what the stack's formula asks for: nodes
        that were leaving and run no task now have left; an offline node still counts in the pool
        ($CurrentDedicatedNodes), so only a node that left makes room (devtools/rehearsal/autoscale.py). Raises, with
        the arithmetic, when the task would wait: on Azure it would wait for nodes that never come."""
        from devtools.rehearsal.autoscale import nodes_added

        with self.lock:
            self.removed |= set(self.leaving)  # between attempts: their task has ended
            in_pool = self._in_pool()
            schedulable = [n for n in in_pool if n.index not in self.disabled and n.index not in self.leaving]
            if instances <= len(schedulable) or not self.reserve:
                added = []
            else:
                formula = ((self.pool_spec.get("scaleSettings") or {}).get("autoScale") or {}).get("formula") or ""
                spot = "$TargetLowPriorityNodes = $target" in formula
                count = nodes_added(formula, instances, len(in_pool), spot) if formula else 0
                added = sorted(self.reserve)[:count]
                self.reserve -= set(added)
                if added:
                    self.log(f"rehearsal: the pool's autoscale formula asks for {len(in_pool) + count} node(s) with "
                             f"{len(in_pool)} in the pool; Batch adds "
                             f"{', '.join(node_id(self.nodes.nodes[i]) for i in added)}")
            schedulable += [self.nodes.nodes[i] for i in added]
        if instances > len(schedulable):
            out = sorted(set(self.disabled) | set(self.leaving) | self.removed)
            raise RuntimeError(
                f"the task asks for {instances} nodes; {len(schedulable)} of the pool's {len(self._in_pool())} take "
                f"tasks (out of scheduling: {', '.join(node_id(self.nodes.nodes[i]) for i in out) or 'none'}), and "
                "the stack's autoscale formula adds none (an offline node still counts in $CurrentDedicatedNodes): "
                "on Azure the task would wait for nodes that never come")
        return schedulable

    def _command_here(self, job_id: str, command: str) -> str:
        """The application command as a node here runs it: `training launch --slots N` (one rank per GPU of the
        size) as --slots `self.slots`, said once per job; the task keeps the command it was given."""
        asked = re.search(r"(?<= -m training launch --slots )\d+", command)
        if not self.slots or not asked or int(asked.group()) == self.slots:
            return command
        if job_id not in self.reslotted:
            self.reslotted.add(job_id)
            self.log(f"rehearsal: {job_id}'s launch asks --slots {asked.group()} (one rank per GPU of the size); a node "
                     f"here is a CPU and runs {self.slots} (--processes-per-node)")
        return command[:asked.start()] + str(self.slots) + command[asked.end():]

    def _run_job(self, job_id: str) -> None:
        task = self.tasks[job_id]
        retries = task.get("constraints", {}).get("maxTaskRetryCount", 0)
        info = task["executionInfo"]
        try:
            self._start_nodes()
            task["state"], info["startTime"] = "running", _now()
            # BatchNodeInfo (REST spec): nodeUrl is the node's URL on the account's endpoint, not its address; the
            # account here does not know its endpoint's URL, so it is left out (optional in the spec).
            task["nodeInfo"] = {"nodeId": "tvm-0", "poolId": "gpu"}
            self.save()
            while True:
                try:
                    code = self._attempt(job_id, task)
                    task["nodeInfo"] = {"nodeId": node_id(self._task_nodes(job_id, 1)[0]), "poolId": "gpu"}
                except subprocess.TimeoutExpired:
                    code, info["failureInfo"] = -1, {"category": "usererror", "code": "MaxWallClockTimeExpiry",
                                                     "message": "The task ran longer than its maxWallClockTime"}
                    break
                finally:
                    for node in self.nodes.nodes:
                        self.nodes.kill(node)  # the task's containers end with it (its sshd included)
                evicted = self.preempted.pop(job_id, None)
                if evicted and job_id not in self.terminated:
                    # Requeued, not retried: Batch's task model says "Retries due to recovery operations are
                    # independent of and are not counted against the maxTaskRetryCount" (REST spec 2025-06-01,
                    # BatchTask). The task is active again, then runs anew (startTime is the newest start; the spec's
                    # lastRetryTime: "startTime is updated but the lastRetryTime is not"). requeueCount is left as
                    # it is: the spec counts there requeues "as the result of a user request" (pool shrink, job
                    # disable) and is silent on preemption. The node comes back as Batch seeks back to the target
                    # count (batch-spot-vms); here it is the same local node.
                    self.requeued_at.append(time.monotonic())
                    task["state"] = "active"
                    self.save()
                    self.log(f"rehearsal: Spot node {evicted} was preempted; Batch requeues the task (not a retry: "
                             f"retried {info['retryCount']} time(s)) and it runs again on the pool's nodes")
                    task["state"], info["startTime"] = "running", _now()
                    self.save()
                    continue
                if code == 0 or job_id in self.terminated or info["retryCount"] >= retries:
                    break
                info["retryCount"] += 1
                self.retried_at.append(time.monotonic())
                self.save()
                self.log(f"rehearsal: the task exited with {code}; Batch retries it "
                         f"({info['retryCount']} of {retries})")
            info["exitCode"] = code
            info["result"] = "success" if code == 0 else "failure"
        except ResourceFilesFailed as err:
            # Not retried here: the docs do not say whether Batch retries a task whose files failed to download.
            info.update(result="failure", failureInfo={"category": "usererror", "code": "ResourceFileDownloadFailed",
                                                       "message": str(err)})
        except Exception as err:  # noqa: BLE001 - a rehearsal fault becomes the task's failure, as on Batch
            info.update(exitCode=-1, result="failure", failureInfo={"category": "servererror", "code": "RehearsalError",
                                                                    "message": str(err)})
        primary = self._task_nodes(job_id, 1)[0]  # where the newest attempt's application command ran
        working_dir = self._task_dir_on_node(job_id, task["id"]) / "wd"
        try:
            self.uploaded[job_id] = self._upload_outputs(primary, task, working_dir)
        except Exception as err:  # noqa: BLE001 - Batch reports upload errors on the task, not as an exception
            info["result"] = "failure"
            info["failureInfo"] = {"category": "usererror", "code": "FileUploadError",
                                   "message": str(err).splitlines()[0]}
        with self.lock:
            task["state"], info["endTime"] = "completed", _now()
            if self.jobs[job_id]["state"] == "terminating":
                self.jobs[job_id]["state"] = "completed"
            self._end_with_tasks(job_id)
            self.save()


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
