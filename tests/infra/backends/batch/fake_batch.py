"""Azure Batch's data plane at the wire, for the tests: `BatchEndpoint`, a local HTTPS server answering the REST
calls that infra/backends/batch/service.py makes, and `FakeBatch`, the real `AzureBatch` with the real azure-batch
`BatchClient` pointed at it. Every value our code reads from Batch is then what the SDK's own deserialization
makes of a REST response, with the types the SDK really returns (a fake at our own seam once answered an int
where the SDK's model was assumed to differ, and nothing could tell).

Responses are shaped as the REST spec's examples for api-version 2025-06-01, the version azure-batch 15.1.0
speaks (Azure/azure-rest-api-specs, specification/batch/data-plane/Azure.Batch/stable/2025-06-01/examples:
Jobs_GetJob, Tasks_ListTasks, Tasks_GetTaskFileProperties, Tasks_GetTaskFile, Jobs_DeleteJob), errors as the
service's BatchError JSON (https://learn.microsoft.com/rest/api/batchservice/batch-status-and-error-codes).
Only what the code under test asks for is served; anything else answers 501, so a new call shows up as a
failing test rather than as a made-up answer. A fuller emulator may replace this one (issue 23).

Rules of the service played here: a job created with onAllTasksComplete terminatejob and no task is completed
at once and takes no task (409 JobCompleted; https://learn.microsoft.com/rest/api/batchservice/job/add);
terminate and delete act at once (the service passes through terminating/deleting, which the SDK's pollers
wait out).
"""
from __future__ import annotations

import json
import re
import ssl
import tempfile
import threading
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from infra.backends.batch.service import AzureBatch

_CERT: tuple[str, str] | None = None
_START = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)


def _certificate() -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (azure-core sends a bearer token over https only)."""
    global _CERT
    if _CERT is None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
        import ipaddress

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
        now = datetime.now(timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(hours=1))
                .not_valid_after(now + timedelta(days=2))
                .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                               critical=False)
                .sign(key, hashes.SHA256()))
        folder = Path(tempfile.mkdtemp(prefix="fake-batch-tls-"))
        (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                           serialization.PrivateFormat.PKCS8,
                                                           serialization.NoEncryption()))
        _CERT = (str(folder / "cert.pem"), str(folder / "key.pem"))
    return _CERT


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Refusal(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class BatchEndpoint:
    """The state of one Batch account (jobs, their task, the task's files) behind a local HTTPS endpoint.

    `jobs[id]` and `tasks[id]` are the REST JSON the service would return, and tests may change them (a task's
    state, its executionInfo) as the service would; `files[(job, path)]` are the task's file contents;
    `requests` lists (method, path, range) as they arrived; `refuse` = (status, code, message) makes every
    request fail so (a firewall's 403, say)."""

    def __init__(self):
        self.jobs: dict[str, dict] = {}
        self.tasks: dict[str, dict] = {}
        self.files: dict[tuple[str, str], bytes] = {}
        self.requests: list[tuple[str, str, str]] = []
        self.refuse: tuple[int, str, str] | None = None
        self.lock = threading.Lock()
        self._clock = 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                url = urlparse(self.path)
                path, query = unquote(url.path), parse_qs(url.query)
                endpoint.requests.append((self.command, path, self.headers.get("ocp-range") or ""))
                try:
                    with endpoint.lock:
                        if endpoint.refuse:
                            raise _Refusal(*endpoint.refuse)
                        status, headers, payload = endpoint.answer(self.command, path, query, body,
                                                                   self.headers.get("ocp-range") or "")
                except _Refusal as refusal:
                    status, headers = refusal.status, {"Content-Type": "application/json;odata=minimalmetadata"}
                    payload = json.dumps({"odata.metadata": f"{endpoint.url}/$metadata#Microsoft.Azure.Batch."
                                                            "Protocol.Entities.Container.errors/@Element",
                                          "code": refusal.code,
                                          "message": {"lang": "en-US", "value": refusal.message}}).encode()
                if isinstance(payload, (dict, list)):
                    payload = json.dumps(payload).encode()
                    headers.setdefault("Content-Type", "application/json;odata=minimalmetadata")
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_POST = do_PATCH = do_DELETE = do_HEAD = _serve

        cert, key = _certificate()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        self.ca_file = cert
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- the service ------------------------------------------------------------------------------------------

    def _now(self) -> datetime:
        self._clock += 1  # every change a second later: creationTime orders jobs as the service's clock does
        return _START + timedelta(seconds=self._clock)

    def _job(self, job_id: str) -> dict:
        if job_id not in self.jobs:
            raise _Refusal(404, "JobNotFound", "The specified job does not exist.")
        return self.jobs[job_id]

    def _task(self, job_id: str, task_id: str) -> dict:
        self._job(job_id)
        task = self.tasks.get(job_id)
        if task is None or task["id"] != task_id:
            raise _Refusal(404, "TaskNotFound", "The specified task does not exist.")
        return task

    def _end_with_tasks(self, job: dict) -> None:
        task = self.tasks.get(job["id"])
        if job.get("onAllTasksComplete") == "terminatejob" and (task is None or task["state"] == "completed"):
            job.update(state="completed", executionInfo={**job.get("executionInfo", {}), "endTime": _iso(self._now())})

    def answer(self, method: str, path: str, query: dict, body, byte_range: str):
        parts = [p for p in path.split("/") if p]
        if method == "POST" and parts == ["jobs"]:
            if body["id"] in self.jobs:
                raise _Refusal(409, "JobExists", "The specified job already exists.")
            now = _iso(self._now())
            job = {**body, "url": f"{self.url}/jobs/{body['id']}", "eTag": f"0x{self._clock:015X}",
                   "lastModified": now, "creationTime": now, "state": "active", "stateTransitionTime": now,
                   "executionInfo": {"startTime": now, "poolId": body["poolInfo"]["poolId"]}}
            self.jobs[body["id"]] = job
            self._end_with_tasks(job)
            return 201, {"DataServiceId": job["url"], "ETag": job["eTag"]}, b""
        if method == "GET" and parts == ["jobs"]:
            found = re.fullmatch(r"startswith\(id, '([^']*)'\)", query.get("$filter", [""])[0])
            if not found:
                raise _Refusal(400, "InvalidQueryParameterValue", "Value for one of the query parameters specified "
                                                                  "in the request URI is invalid.")
            return 200, {}, {"value": [job for job_id, job in self.jobs.items() if job_id.startswith(found[1])]}
        if len(parts) == 2 and parts[0] == "jobs":
            job = self._job(parts[1])
            if method == "GET":
                return 200, {"ETag": job["eTag"]}, job
            if method == "PATCH":
                job.update(body)
                self._end_with_tasks(job)
                return 200, {"DataServiceId": job["url"]}, b""
            if method == "DELETE":
                del self.jobs[parts[1]]
                self.tasks.pop(parts[1], None)
                return 202, {}, b""
        if method == "POST" and len(parts) == 3 and parts[0] == "jobs" and parts[2] == "terminate":
            job = self._job(parts[1])
            if job["state"] == "completed":
                raise _Refusal(409, "JobCompleted", "The specified job is already in a completed state.")
            job.update(state="completed", executionInfo={**job["executionInfo"], "endTime": _iso(self._now()),
                                                         "terminateReason": "UserTerminate"})
            return 202, {}, b""
        if method == "POST" and len(parts) == 3 and parts[0] == "jobs" and parts[2] == "tasks":
            job = self._job(parts[1])
            if job["state"] == "completed":
                raise _Refusal(409, "JobCompleted", "The specified job is already in a completed state.")
            now = _iso(self._now())
            self.tasks[parts[1]] = {**body, "url": f"{job['url']}/tasks/{body['id']}", "eTag": f"0x{self._clock:015X}",
                                    "creationTime": now, "lastModified": now, "state": "active",
                                    "stateTransitionTime": now, "executionInfo": {"retryCount": 0, "requeueCount": 0}}
            return 201, {"DataServiceId": self.tasks[parts[1]]["url"]}, b""
        if method == "GET" and len(parts) == 4 and parts[0] == "jobs" and parts[2] == "tasks":
            return 200, {}, self._task(parts[1], parts[3])
        if len(parts) >= 6 and parts[0] == "jobs" and parts[2] == "tasks" and parts[4] == "files":
            self._task(parts[1], parts[3])
            file_path = "/".join(parts[5:])
            if (parts[1], file_path) not in self.files:
                raise _Refusal(404, "FileNotFound", "The specified file does not exist.")
            data = self.files[(parts[1], file_path)]
            headers = {"ocp-creation-time": format_datetime(_START, usegmt=True),
                       "Last-Modified": format_datetime(_START, usegmt=True),
                       "ocp-batch-file-isdirectory": "false", "ocp-batch-file-url": f"{self.url}{path}",
                       "ocp-batch-file-mode": "0o100644", "Content-Type": "application/octet-stream"}
            if method == "HEAD":
                return 200, {**headers, "Content-Length": str(len(data))}, b""
            if method == "GET":
                found = re.fullmatch(r"bytes=(\d+)-", byte_range)
                return 200, headers, data[int(found[1]):] if found else data
        raise _Refusal(501, "NotImplemented", f"{method} {path}: not served by tests/infra/backends/batch/fake_batch.py")


class _Token:
    """A credential that always has a token: the endpoint does not check it."""

    def get_token(self, *scopes, **kwargs):
        from azure.core.credentials import AccessToken

        return AccessToken("test-token", 2**40)


class FakeBatch(AzureBatch):
    """The real AzureBatch over the real azure-batch client, talking to a fresh BatchEndpoint. `jobs`, `tasks`,
    `files` and `requests` are the endpoint's; close() stops it (the `batch` fixture does)."""

    def __init__(self):
        from azure.batch import BatchClient

        self.endpoint = BatchEndpoint()
        super().__init__(self.endpoint.url, client=BatchClient(self.endpoint.url, _Token(),
                                                               connection_verify=self.endpoint.ca_file))
        self.jobs, self.tasks, self.files = self.endpoint.jobs, self.endpoint.tasks, self.endpoint.files
        self.requests = self.endpoint.requests

    def close(self) -> None:
        self.client.close()
        self.endpoint.close()
