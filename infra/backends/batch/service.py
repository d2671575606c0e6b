"""The one seam to the Azure Batch data plane: `BatchService` (what we need of it) and `AzureBatch` (the real
thing: azure-batch signed in with Azure AD, never a shared key). The TrainingJob dynamic resource and the
`python -m infra` job verbs take a `BatchService`; the tests and the rehearsal run `AzureBatch` itself, with the
real azure-batch client, against a local Batch REST endpoint (devtools/rehearsal/batch_endpoint.py; the tests'
account is tests/infra/backends/batch/fake_batch.py's).

Jobs and tasks travel as plain dicts in the Batch REST API's shape (see infra/backends/batch/spec.py): what the
SDK's models give with `as_dict()`.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from infra.backends.batch.spec import END_WITH_TASKS
from infra.backends.shared import JobError, JobNotFound, call_translated, refused_line

BATCH_SCOPE = "https://batch.core.windows.net/.default"
# Fail in about a minute, not the SDK's default of 300 s per attempt and 10 retries, when the account cannot be
# reached at all (azure-core's transport and RetryPolicy options, which every client accepts).
CLIENT_OPTIONS = {"connection_timeout": 20, "read_timeout": 60, "retry_total": 3}
T = TypeVar("T")


def batch_refused(err: Exception, what: str) -> JobError | None:
    # The Batch account admits only the addresses of the stack's allowedIpRanges
    # (https://learn.microsoft.com/azure/batch/public-network-access); that page does not say what a refused
    # address gets. A Batch account endpoint has answered 403 `AuthorizationFailure` "This request is not
    # authorized to perform this operation." (Azure/BatchExplorer#2203); an identity without a Batch role gets a
    # 403 as well, so the line names both.
    return refused_line(err, "the Batch account", what, "this machine's address is not in its firewall, or your "
                                                        "identity has no Batch role on it")


class BatchService(Protocol):
    def submit(self, job: dict[str, Any], task: dict[str, Any]) -> None:
        """Create the job and its task, then let the job end with its task; if the task cannot be added, the
        job is deleted again."""

    def get_job(self, job_id: str) -> dict[str, Any]:
        """The job (id, state, executionInfo...); raises JobNotFound."""

    def get_task(self, job_id: str, task_id: str) -> dict[str, Any]:
        """The task (state, executionInfo with exitCode and retryCount, nodeInfo); raises JobNotFound."""

    def list_jobs(self, prefix: str) -> list[dict[str, Any]]:
        """Jobs whose ID starts with `prefix`, newest first."""

    def read_task_file(self, job_id: str, task_id: str, path: str, offset: int) -> bytes:
        """Bytes of a file in the task's directory (stdout.txt, stderr.txt) from `offset` on; b'' if none yet."""

    def terminate(self, job_id: str, reason: str = "UserTerminate") -> None:
        """Stop the job's running tasks; the job and its files stay; `reason` becomes its executionInfo.terminateReason.
        Raises JobNotFound."""

    def delete(self, job_id: str) -> None:
        """Delete the job (terminating it first if it runs); a job already gone is not an error."""

    def pool_nodes(self, pool_id: str) -> tuple[int, int]:
        """The pool's nodes that bill now: (dedicated, low-priority/Spot not preempted); JobError when the pool
        does not exist."""

    def failed_start_tasks(self, pool_id: str) -> list[dict[str, Any]]:
        """The pool's nodes whose start task failed (state starttaskfailed: the node health checks among them), each
        as the REST BatchNode (id, state, startTaskInfo); [] when the pool does not exist."""

    def pool_scale(self, pool_id: str) -> dict[str, Any] | None:
        """The pool's scale settings now (enableAutoScale, targetDedicatedNodes, targetLowPriorityNodes, in the
        REST shape); None when the pool does not exist."""

    def pool_allocation(self, pool_id: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The pool's allocation now (allocationState, current and target nodes, resizeErrors, in the REST shape) and
        its nodes (id, state, isDedicated, allocationTime); (None, []) when the pool does not exist."""


class AzureBatch:
    def __init__(self, endpoint: str, credential=None, client=None):
        """`client`: an azure.batch.BatchClient (made here from `endpoint` unless given). Without a credential, one
        Azure AD sign-in is tried at once (training.data.transfer.AzureCredential): no sign-in ends here, in one
        line, before any request."""
        if client is None:
            from training.data.transfer import AzureCredential

            credential = credential or AzureCredential(probe_scope=BATCH_SCOPE)
            from azure.batch import BatchClient

            client = BatchClient(endpoint if endpoint.startswith("https://") else f"https://{endpoint}", credential,
                                 **CLIENT_OPTIONS)
        self.client = client
        # A 404 to the HEAD that reads a file's length has no body (HEAD never has one): azure-batch then logs a
        # WARNING with a traceback ("Ran into a deserialization error...") before raising ResourceNotFoundError,
        # which read_task_file expects while a task has not started. Its own errors still raise.
        logging.getLogger("azure.batch._utils.model_base").setLevel(logging.ERROR)

    def _call(self, what: str, call: Callable[[], T], job_id: str | None = None) -> T:
        return call_translated(call, what, job_id, batch_refused)

    def submit(self, job: dict[str, Any], task: dict[str, Any]) -> None:
        from azure.batch import models

        job_id = job["id"]
        # A job created to terminate when all its tasks are done, with no task yet, is complete at once: create
        # it with noaction, add the task, then switch (https://learn.microsoft.com/rest/api/batchservice/job/add).
        self._call(f"creating job {job_id}", lambda: self.client.create_job(
            models.BatchJobCreateOptions({**job, "onAllTasksComplete": "noaction"})))
        try:
            self._call(f"adding the task of job {job_id}",
                       lambda: self.client.create_task(job_id, models.BatchTaskCreateOptions(task)))
            self._call(f"updating job {job_id}",
                       lambda: self.client.update_job(job_id, models.BatchJobUpdateOptions(END_WITH_TASKS)))
        except Exception:
            self.delete(job_id)  # no job without its task: it would hold the pool's queue for nothing
            raise

    def get_job(self, job_id: str) -> dict[str, Any]:
        return self._call(f"reading job {job_id}", lambda: self.client.get_job(job_id).as_dict(), job_id)

    def get_task(self, job_id: str, task_id: str) -> dict[str, Any]:
        return self._call(f"reading job {job_id}", lambda: self.client.get_task(job_id, task_id).as_dict(), job_id)

    def list_jobs(self, prefix: str) -> list[dict[str, Any]]:
        jobs = self._call("listing jobs", lambda: [
            job.as_dict() for job in self.client.list_jobs(filter=f"startswith(id, '{prefix}')")])
        return sorted(jobs, key=lambda j: str(j.get("creationTime", "")), reverse=True)

    def read_task_file(self, job_id: str, task_id: str, path: str, offset: int) -> bytes:
        from azure.core.exceptions import ResourceNotFoundError

        def read() -> bytes:
            # The length is the HEAD response's Content-Length header, which azure-batch 15.1.0 deserializes to an
            # int (https://learn.microsoft.com/rest/api/batchservice/file/get-properties-from-task); the tests
            # read it through the SDK from a REST response (tests/infra/backends/batch/fake_batch.py).
            size = self.client.get_task_file_properties(job_id, task_id, path).content_length
            if size <= offset:
                return b""
            return b"".join(self.client.download_task_file(job_id, task_id, path, ocp_range=f"bytes={offset}-"))

        try:
            return self._call(f"reading {path} of job {job_id}", read)
        except ResourceNotFoundError:
            return b""  # the task has not started, or its node is gone

    def terminate(self, job_id: str, reason: str = "UserTerminate") -> None:
        # azure-batch 15.1.0 cannot send a terminate without a body (its request builder fails on the missing
        # content type: "No value for given attribute"), and its options model is private: the body goes as the
        # REST JSON, with the service's default reason (https://learn.microsoft.com/rest/api/batchservice/job/
        # terminate: terminateReason).
        body = {"terminateReason": reason}
        self._call(f"terminating job {job_id}",
                   lambda: self.client.begin_terminate_job(job_id, body).result(), job_id)

    def delete(self, job_id: str) -> None:
        try:
            self._call(f"deleting job {job_id}",
                       lambda: self.client.begin_delete_job(job_id, force=True).result(), job_id)
        except JobNotFound:
            pass  # already gone

    def pool_nodes(self, pool_id: str) -> tuple[int, int]:
        from azure.core.exceptions import ResourceNotFoundError

        # Pools - Get (https://learn.microsoft.com/rest/api/batchservice/pools/get-pool): currentDedicatedNodes and
        # currentLowPriorityNodes are "the number of ... Compute Nodes currently in the Pool" (BatchPool in the
        # REST spec of api-version 2025-06-01); a dedicated node bills whatever its state, but "Spot/Low-priority
        # Compute Nodes which have been preempted are included in this count" (the same spec), and an evicted
        # Spot VM no longer bills (https://learn.microsoft.com/azure/batch/batch-spot-vms). So with Spot nodes,
        # Nodes - List (https://learn.microsoft.com/rest/api/batchservice/nodes/list-nodes) says which are
        # `preempted` (BatchNodeState). $select asks for what is counted only.
        try:
            pool = self._call(f"reading pool {pool_id}", lambda: self.client.get_pool(
                pool_id, select=["id", "currentDedicatedNodes", "currentLowPriorityNodes"]))
            spot = int(pool.current_low_priority_nodes or 0)
            if spot:
                preempted = self._call(f"listing the nodes of pool {pool_id}", lambda: sum(
                    1 for node in self.client.list_nodes(pool_id, select=["id", "state", "isDedicated"])
                    if not node.is_dedicated and node.state == "preempted"))
                spot = max(0, spot - preempted)
        except ResourceNotFoundError:
            raise JobError(f"the Batch account has no pool {pool_id} (deleted outside Pulumi? `pulumi up` declares "
                           "it again)") from None
        return int(pool.current_dedicated_nodes or 0), spot

    def failed_start_tasks(self, pool_id: str) -> list[dict[str, Any]]:
        from azure.core.exceptions import ResourceNotFoundError

        # Nodes - List (https://learn.microsoft.com/rest/api/batchservice/nodes/list-nodes): a node whose start task
        # failed with waitForSuccess is `starttaskfailed` (BatchNodeState) and takes no task; its startTaskInfo
        # holds exitCode, retryCount, result and failureInfo (BatchStartTaskInfo, Batch REST spec 2025-06-01). The
        # state is picked here rather than by $filter, so the answer is the same whatever the service filters.
        try:
            return self._call(f"listing the nodes of pool {pool_id}", lambda: [
                node.as_dict() for node in self.client.list_nodes(pool_id, select=["id", "state", "startTaskInfo"])
                if node.state == "starttaskfailed"])
        except ResourceNotFoundError:
            return []

    def pool_scale(self, pool_id: str) -> dict[str, Any] | None:
        from azure.core.exceptions import ResourceNotFoundError

        # Pools - Get (https://learn.microsoft.com/rest/api/batchservice/pools/get-pool): enableAutoScale false with
        # targets of 0 is what the budget guard's Pool - Update (fixedScale 0) leaves behind.
        try:
            return self._call(f"reading pool {pool_id}", lambda: self.client.get_pool(pool_id, select=[
                "id", "enableAutoScale", "targetDedicatedNodes", "targetLowPriorityNodes"]).as_dict())
        except ResourceNotFoundError:
            return None

    def pool_allocation(self, pool_id: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        from azure.core.exceptions import ResourceNotFoundError

        # Pools - Get: resizeErrors ("A list of errors encountered while performing the last resize on the Pool",
        # each a ResizeError of code, message and values) with allocationState and the node counts; Nodes - List:
        # each node's allocationTime, from which the node-hours billed while a job waited are counted
        # (https://learn.microsoft.com/rest/api/batchservice/pools/get-pool, .../nodes/list-nodes; Batch REST spec
        # 2025-06-01: BatchPool, BatchNode).
        try:
            pool = self._call(f"reading pool {pool_id}", lambda: self.client.get_pool(pool_id, select=[
                "id", "allocationState", "resizeErrors", "currentDedicatedNodes", "currentLowPriorityNodes",
                "targetDedicatedNodes", "targetLowPriorityNodes"]).as_dict())
            nodes = self._call(f"listing the nodes of pool {pool_id}", lambda: [
                node.as_dict() for node in self.client.list_nodes(
                    pool_id, select=["id", "state", "isDedicated", "allocationTime"])])
        except ResourceNotFoundError:
            return None, []
        return pool, nodes
