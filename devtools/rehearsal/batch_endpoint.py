"""Azure Batch's data plane at the wire: `BatchEndpoint`, a local HTTPS server answering the REST calls that
infra/backends/batch/service.py makes through the real azure-batch `BatchClient`, in front of a `BatchAccount`:
the tests' in-memory account (tests/infra/backends/batch/fake_batch.py) or the rehearsal's, whose nodes really
run the tasks (devtools/rehearsal/batch.py). Every value our code reads from Batch is then what the SDK's own
deserialization makes of a REST response, with the types the SDK really returns.

Responses are shaped as the REST spec's examples for api-version 2025-06-01, the version azure-batch 15.1.0
speaks (Azure/azure-rest-api-specs, specification/batch/data-plane/Azure.Batch/stable/2025-06-01/examples:
Jobs_GetJob, Tasks_ListTasks, Tasks_ListSubTasks, Tasks_GetTaskFileProperties, Tasks_GetTaskFile, Jobs_DeleteJob,
Pools_GetPool_Basic), errors as the service's BatchError JSON with its status and error codes
(https://learn.microsoft.com/rest/api/batchservice/batch-status-and-error-codes: JobNotFound, TaskNotFound,
FileNotFound, JobExists, JobCompleted...). Only what the project asks for is served; anything else answers 501,
so a new call shows up as a failing test rather than as a made-up answer.
"""
from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from email.utils import format_datetime
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlparse

from devtools.rehearsal.local_https import LocalHttps, QuietHandler


class BatchRefusal(Exception):
    """An answer of the service's: its HTTP status and Batch error code."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


# The error codes the verbs meet, with the service's status and message
# (https://learn.microsoft.com/rest/api/batchservice/batch-status-and-error-codes).
def job_not_found() -> BatchRefusal:
    return BatchRefusal(404, "JobNotFound", "The specified job does not exist.")


def task_not_found() -> BatchRefusal:
    return BatchRefusal(404, "TaskNotFound", "The specified task does not exist.")


def file_not_found() -> BatchRefusal:
    return BatchRefusal(404, "FileNotFound", "The specified file does not exist.")


def job_exists() -> BatchRefusal:
    return BatchRefusal(409, "JobExists", "The specified job already exists.")


def job_completed() -> BatchRefusal:
    return BatchRefusal(409, "JobCompleted", "The specified job is already in a completed state.")


def pool_not_found() -> BatchRefusal:
    return BatchRefusal(404, "PoolNotFound", "The specified pool does not exist.")


class BatchAccount(Protocol):
    """What the endpoint serves: jobs, tasks and pools as the REST API's JSON, by the service's rules. Every
    method raises BatchRefusal where the service refuses (job_not_found(), job_exists()...)."""

    def add_job(self, job: dict[str, Any]) -> None:
        """`job`: the JSON the service returns for it from now on (new_job)."""

    def job(self, job_id: str) -> dict[str, Any]: ...

    def list_jobs(self) -> list[dict[str, Any]]: ...

    def update_job(self, job_id: str, changes: dict[str, Any]) -> None: ...

    def terminate_job(self, job_id: str, reason: str) -> None: ...

    def delete_job(self, job_id: str) -> None: ...

    def add_task(self, job_id: str, task: dict[str, Any]) -> None:
        """`task`: the JSON the service returns for it from now on (new_task)."""

    def task(self, job_id: str, task_id: str) -> dict[str, Any]: ...

    def subtasks(self, job_id: str, task_id: str) -> list[dict[str, Any]]:
        """A multi-instance task's subtasks (the primary's is the task itself, not listed)."""

    def task_file(self, job_id: str, task_id: str, path: str) -> bytes:
        """The file's bytes as they are now (it may still grow); file_not_found() while it does not exist."""

    def pool(self, pool_id: str) -> dict[str, Any]: ...

    def pool_nodes(self, pool_id: str) -> list[dict[str, Any]]:
        """The pool's compute nodes (BatchNode JSON: id, state, isDedicated...); pool_not_found() without it."""

    def disable_node_scheduling(self, pool_id: str, node_id: str, option: str) -> None:
        """Compute Node - Disable Scheduling (option: requeue, terminate or taskcompletion); an account that does
        not take node operations need not have it (the endpoint then answers 500, as for any fault of its own)."""

    def remove_nodes(self, pool_id: str, node_ids: list[str], option: str) -> None:
        """Pool - Remove Nodes (nodeDeallocationOption: requeue, terminate, taskcompletion or retaineddata); 409
        when the pool's allocation state is not steady ("This operation can only run when the allocation state of
        the Pool is steady", Pools_RemoveNodes); optional as disable_node_scheduling is."""


class JobsInDicts:
    """The lookups every account answers the same way, over `jobs[id]` and `tasks[job id]` (one task per job, as
    the project submits): the 404s Batch gives for a missing job or task, and deleting a job with its task."""
    jobs: dict[str, dict[str, Any]]
    tasks: dict[str, dict[str, Any]]

    def job(self, job_id: str) -> dict[str, Any]:
        if job_id not in self.jobs:
            raise job_not_found()
        return self.jobs[job_id]

    def list_jobs(self) -> list[dict[str, Any]]:
        return list(self.jobs.values())

    def delete_job(self, job_id: str) -> None:
        self.job(job_id)
        del self.jobs[job_id]
        self.tasks.pop(job_id, None)

    def task(self, job_id: str, task_id: str) -> dict[str, Any]:
        self.job(job_id)
        task = self.tasks.get(job_id)
        if task is None or task["id"] != task_id:
            raise task_not_found()
        return task

    def subtasks(self, job_id: str, task_id: str) -> list[dict[str, Any]]:
        self.task(job_id, task_id)
        return []  # the project's multi-instance task is read as a whole; no subtask is listed


class ScarceCapacity:
    """`account` as it looks when Azure gives its pool fewer nodes than a job asks for: a pool whose last resize
    stopped at `have` nodes with `error` in its resizeErrors (ResizeError {code, message, values[{name, value}]},
    REST spec 2025-06-01; default AccountCoreQuotaReached, one of PoolResizeErrorCodes), answered by Pools - Get
    and Nodes - List, and a multi-instance task that asks for more nodes than that held back, active and never
    started, as Batch holds it until all its nodes are there. `arrive()` plays the missing nodes coming (late,
    but in time): the resize error goes and the held tasks reach `account`, which runs them. Ending a held job
    (Job - Terminate, Job - Delete: what `submit` does at its deadline, or `cancel`) drops its task; with no task
    left waiting the pool gives its nodes back (the autoscale formula's give-back, infra/backends/batch/
    allocation.py, evaluated at once here), so no node is left billing; its resizeErrors stay those of the last
    resize that stopped short. `came`: the allocationTime (BatchNode) of nodes whose account gives none (the
    rehearsal's local nodes), so that the node-hours billed waiting are counted from it. Everything else is
    `account`'s."""

    QUOTA = {"code": "AccountCoreQuotaReached", "message": "The specified account has reached core quota",
             "values": [{"name": "Reason", "value": "The Batch account's dedicated core quota for the VM family "
                                                     "is reached"}]}

    def __init__(self, account: BatchAccount, have: int, error: dict[str, Any] | None = None,
                 came: datetime | None = None):
        self.account, self.have, self.error, self.came = account, have, error or self.QUOTA, came
        self.held: dict[str, dict[str, Any]] = {}  # job id -> its task, waiting for nodes
        self.ended: dict[str, dict[str, Any]] = {}  # job id -> the task of a job ended while it waited (never ran)
        # job id -> Job - Update's changes while its task is held (onAllTasksComplete: the account would complete a
        # job of no task at once), applied once the task reaches the account
        self.updates: dict[str, dict[str, Any]] = {}
        self.arrived = False

    def __getattr__(self, name: str):  # the rest of the BatchAccount protocol: the account's own
        return getattr(self.account, name)

    def add_task(self, job_id: str, task: dict[str, Any]) -> None:
        wanted = int((task.get("multiInstanceSettings") or {}).get("numberOfInstances") or 1)
        self.account.job(job_id)  # 404 JobNotFound as the service answers
        if self.arrived or wanted <= self.have:
            self.account.add_task(job_id, task)
        else:
            self.held[job_id] = task

    def job(self, job_id: str) -> dict[str, Any]:
        return {**self.account.job(job_id), **self.updates.get(job_id, {})}

    def list_jobs(self) -> list[dict[str, Any]]:
        return [{**job, **self.updates.get(job["id"], {})} for job in self.account.list_jobs()]

    def update_job(self, job_id: str, changes: dict[str, Any]) -> None:
        if job_id in self.held:
            self.account.job(job_id)
            self.updates.setdefault(job_id, {}).update(changes)
        else:
            self.account.update_job(job_id, changes)

    def task(self, job_id: str, task_id: str) -> dict[str, Any]:
        held = self.held.get(job_id) or self.ended.get(job_id)
        if held is not None and held["id"] == task_id:
            self.account.job(job_id)
            return held
        return self.account.task(job_id, task_id)

    def subtasks(self, job_id: str, task_id: str) -> list[dict[str, Any]]:
        if job_id in self.held or job_id in self.ended:
            self.task(job_id, task_id)
            return []
        return self.account.subtasks(job_id, task_id)

    def task_file(self, job_id: str, task_id: str, path: str) -> bytes:
        if job_id in self.held or job_id in self.ended:  # a task that never ran on a node has no files
            raise file_not_found()
        return self.account.task_file(job_id, task_id, path)

    def _end_held(self, job_id: str, keep: bool) -> None:
        self.updates.pop(job_id, None)
        task = self.held.pop(job_id, None)
        if task is None:
            return
        if keep:  # a terminated job keeps its task, which never ran
            self.ended[job_id] = task
        if not self.held and not self.arrived:
            self.have = 0  # nothing waits: the nodes that came go back

    def terminate_job(self, job_id: str, reason: str) -> None:
        self.account.terminate_job(job_id, reason)
        self._end_held(job_id, keep=True)

    def delete_job(self, job_id: str) -> None:
        self.account.delete_job(job_id)
        self._end_held(job_id, keep=False)
        self.ended.pop(job_id, None)

    def pool(self, pool_id: str) -> dict[str, Any]:
        pool = dict(self.account.pool(pool_id))
        if self.arrived:
            return pool
        return {**pool, "allocationState": "steady", "currentDedicatedNodes": self.have, "currentLowPriorityNodes": 0,
                "resizeErrors": [self.error]}  # the last resize's, until one succeeds (arrive)

    def pool_nodes(self, pool_id: str) -> list[dict[str, Any]]:
        nodes = self.account.pool_nodes(pool_id)
        if self.came is not None:
            nodes = [{"allocationTime": iso(self.came), **node} for node in nodes]
        return nodes if self.arrived else nodes[:self.have]

    def arrive(self) -> None:
        """The nodes Azure could not give come: every held task reaches the account."""
        self.arrived = True
        held, self.held = self.held, {}
        for job_id, task in held.items():
            self.account.add_task(job_id, task)
            if job_id in self.updates:
                self.account.update_job(job_id, self.updates.pop(job_id))


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_job(body: dict[str, Any], url: str, now: datetime, etag: str) -> dict[str, Any]:
    """A job as the service returns it once created from `body` (Jobs_GetJob example)."""
    at = iso(now)
    return {**body, "url": f"{url}/jobs/{body['id']}", "eTag": etag, "lastModified": at, "creationTime": at,
            "state": "active", "stateTransitionTime": at,
            "executionInfo": {"startTime": at, "poolId": body["poolInfo"]["poolId"]}}


def new_task(job_url: str, body: dict[str, Any], now: datetime, etag: str) -> dict[str, Any]:
    """A task as the service returns it once added (Tasks_ListTasks example): active, not tried yet."""
    at = iso(now)
    return {**body, "url": f"{job_url}/tasks/{body['id']}", "eTag": etag, "creationTime": at, "lastModified": at,
            "state": "active", "stateTransitionTime": at, "executionInfo": {"retryCount": 0, "requeueCount": 0}}


class BatchEndpoint:
    """`account` behind a local HTTPS endpoint (`url`; its certificate `ca_file`). `requests` lists (method, path,
    range) as they arrived; `refuse` = (status, code, message) makes every request fail so (a firewall's 403, say),
    `refusals_left`, if not None, only that many requests (Batch busy for a while: 503 ServerBusy).
    `tls`: (certificate, key) files (default: a self-signed one for 127.0.0.1); `authorized(token)`: whether a
    bearer token is one Azure AD issued (default: any), else 401 as the service answers a bad token."""

    def __init__(self, account: BatchAccount, clock: Callable[[], datetime] | None = None,
                 tls: tuple[str, str] | None = None, authorized: Callable[[str], bool] | None = None):
        self.account = account
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self.requests: list[tuple[str, str, str]] = []
        # (method, path, status, body) of every answer, for the tests that check them against the REST spec
        # (tests/devtools/rehearsal/batch_rest_spec.py).
        self.responses: list[tuple[str, str, int, bytes]] = []
        self.refuse: tuple[int, str, str] | None = None
        self.refusals_left: int | None = None
        # The endpoint's own errors, answered as 500 InternalError, Batch's code for it
        # (https://learn.microsoft.com/rest/api/batchservice/batch-status-and-error-codes).
        self.faults: list[str] = []
        self.lock = threading.Lock()
        self._etags = 0
        endpoint = self

        class Handler(QuietHandler):
            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                url = urlparse(self.path)
                path, query = unquote(url.path), parse_qs(url.query)
                byte_range = self.headers.get("ocp-range") or ""
                endpoint.requests.append((self.command, path, byte_range))
                token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                try:
                    with endpoint.lock:
                        if endpoint.refuse and endpoint.refusals_left != 0:
                            if endpoint.refusals_left is not None:
                                endpoint.refusals_left -= 1
                            raise BatchRefusal(*endpoint.refuse)
                        if authorized is not None and not authorized(token):
                            raise BatchRefusal(401, "InvalidAuthenticationTokenAudience" if token else
                                               "AuthenticationFailed", "Server failed to authenticate the request.")
                        try:
                            status, headers, payload = endpoint.answer(self.command, path, query, body, byte_range)
                        except BatchRefusal:
                            raise
                        except Exception as err:  # noqa: BLE001 - a fault here is the service's 500, not a hang-up
                            endpoint.faults.append(f"{self.command} {path}: {err!r}")
                            raise BatchRefusal(500, "InternalError", "The server encountered an internal "
                                                                           "error. Please retry the request.") from err
                except BatchRefusal as refusal:
                    status, headers = refusal.status, {"Content-Type": "application/json;odata=minimalmetadata"}
                    payload = json.dumps({"odata.metadata": f"{endpoint.url}/$metadata#Microsoft.Azure.Batch."
                                                            "Protocol.Entities.Container.errors/@Element",
                                          "code": refusal.code,
                                          "message": {"lang": "en-US", "value": refusal.message}}).encode()
                if isinstance(payload, (dict, list)):
                    payload = json.dumps(payload).encode()
                    headers.setdefault("Content-Type", "application/json;odata=minimalmetadata")
                endpoint.responses.append((self.command, path, status, payload))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_POST = do_PATCH = do_DELETE = do_HEAD = _serve

        self._https = LocalHttps(Handler, tls)
        self.url, self.ca_file = self._https.url, self._https.ca_file

    def close(self) -> None:
        self._https.close()

    def __enter__(self) -> "BatchEndpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _etag(self) -> str:
        self._etags += 1
        return f"0x{self._etags:015X}"

    def answer(self, method: str, path: str, query: dict, body, byte_range: str):
        """(status, headers, payload) for one request, by the REST reference of each operation."""
        account, parts = self.account, [p for p in path.split("/") if p]
        if method == "POST" and parts == ["jobs"]:  # Job - Add: 201
            job = new_job(body, self.url, self.clock(), self._etag())
            account.add_job(job)
            return 201, {"DataServiceId": job["url"], "ETag": job["eTag"]}, b""
        if method == "GET" and parts == ["jobs"]:  # Job - List, with the one $filter the verbs send
            found = re.fullmatch(r"startswith\(id, '([^']*)'\)", query.get("$filter", [""])[0])
            if not found:
                raise BatchRefusal(400, "InvalidQueryParameterValue", "Value for one of the query parameters "
                                                                      "specified in the request URI is invalid.")
            return 200, {}, {"value": [job for job in account.list_jobs() if job["id"].startswith(found[1])]}
        if len(parts) == 2 and parts[0] == "pools" and method == "GET":
            return 200, {}, account.pool(parts[1])
        if len(parts) == 3 and parts[0] == "pools" and parts[2] == "nodes" and method == "GET":  # Nodes - List
            return 200, {}, {"value": account.pool_nodes(parts[1])}
        if method == "POST" and len(parts) == 5 and parts[0] == "pools" and parts[2] == "nodes" \
                and parts[4] == "disablescheduling":  # Compute Node - Disable Scheduling: 200, requeue by default
            account.disable_node_scheduling(parts[1], parts[3], (body or {}).get("nodeDisableSchedulingOption")
                                            or "requeue")
            return 200, {"DataServiceId": f"{self.url}/pools/{parts[1]}/nodes/{parts[3]}/disablescheduling"}, b""
        if method == "POST" and len(parts) == 3 and parts[0] == "pools" and parts[2] == "removenodes":
            # Pool - Remove Nodes: 202 (https://learn.microsoft.com/rest/api/batchservice/pools/remove-nodes);
            # requeue by default (BatchNodeRemoveOptions.nodeDeallocationOption: "The default value is requeue").
            body = body or {}
            account.remove_nodes(parts[1], list(body.get("nodeList") or []),
                                 body.get("nodeDeallocationOption") or "requeue")
            return 202, {"DataServiceId": f"{self.url}/pools/{parts[1]}/removenodes"}, b""
        if len(parts) == 2 and parts[0] == "jobs":
            if method == "GET":
                job = account.job(parts[1])
                return 200, {"ETag": job.get("eTag", "")}, job
            if method == "PATCH":
                account.update_job(parts[1], body)
                return 200, {"DataServiceId": f"{self.url}/jobs/{parts[1]}"}, b""
            if method == "DELETE":  # 202: the service passes through `deleting`, which the SDK's poller waits out
                account.delete_job(parts[1])
                return 202, {}, b""
        if method == "POST" and len(parts) == 3 and parts[0] == "jobs" and parts[2] == "terminate":
            account.terminate_job(parts[1], (body or {}).get("terminateReason") or "UserTerminate")
            return 202, {}, b""
        if method == "POST" and len(parts) == 3 and parts[0] == "jobs" and parts[2] == "tasks":
            task = new_task(f"{self.url}/jobs/{parts[1]}", body, self.clock(), self._etag())
            account.add_task(parts[1], task)
            return 201, {"DataServiceId": task["url"]}, b""
        if method == "GET" and len(parts) == 4 and parts[0] == "jobs" and parts[2] == "tasks":
            return 200, {}, account.task(parts[1], parts[3])
        if method == "GET" and len(parts) == 5 and parts[0] == "jobs" and parts[2] == "tasks" \
                and parts[4] == "subtasksinfo":
            return 200, {}, {"value": account.subtasks(parts[1], parts[3])}
        if len(parts) >= 6 and parts[0] == "jobs" and parts[2] == "tasks" and parts[4] == "files":
            data = account.task_file(parts[1], parts[3], "/".join(parts[5:]))
            start = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
            headers = {"ocp-creation-time": format_datetime(start, usegmt=True),
                       "Last-Modified": format_datetime(start, usegmt=True),
                       "ocp-batch-file-isdirectory": "false", "ocp-batch-file-url": f"{self.url}{path}",
                       "ocp-batch-file-mode": "0o100644", "Content-Type": "application/octet-stream"}
            if method == "HEAD":
                return 200, {**headers, "Content-Length": str(len(data))}, b""
            if method == "GET":
                # ocp-range: bytes=START- or bytes=START-END (https://learn.microsoft.com/rest/api/batchservice/
                # file/get-from-task: "The byte range to be retrieved").
                found = re.fullmatch(r"bytes=(\d+)-(\d*)", byte_range)
                if found:
                    data = data[int(found[1]):int(found[2]) + 1 if found[2] else None]
                return 200, headers, data
        raise BatchRefusal(501, "NotImplemented", f"{method} {path}: not served by devtools/rehearsal/batch_endpoint.py")
