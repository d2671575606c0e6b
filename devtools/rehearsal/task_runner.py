"""How a task runs on the rehearsal's nodes: the node side of `RehearsalBatch` (devtools/rehearsal/batch.py), by
Batch's documented rules for a multi-instance task: the pool's start task, the task's resource files, coordination
and application commands, its retries and requeues, its output files, and the pool's autoscale.

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
"""
from __future__ import annotations

import re
import shlex
import subprocess
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from devtools.rehearsal import batch_endpoint as rest
from devtools.rehearsal.batch_rules import START_TASK_ENV, batch_env, node_id, output_blob_names, wall_clock_seconds
from devtools.rehearsal.nodes import BATCH_ROOT, Node, node_folders, task_folders

POLL_S = 0.5


class ResourceFilesFailed(Exception):
    """A resource file could not be downloaded: Batch fails the task before its command runs, reporting it in
    executionInfo.failureInfo (https://learn.microsoft.com/azure/batch/batch-task-error-checking)."""


def _now() -> str:
    return rest.iso(datetime.now(timezone.utc))


class TaskRunner:
    """The node side of the rehearsal's Batch account, a base of RehearsalBatch (devtools/rehearsal/batch.py): its
    __init__ holds the state these methods work on (the nodes, jobs, tasks and the lock), and its account side records
    each change (save) and ends a job with its task (_end_with_tasks)."""

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
