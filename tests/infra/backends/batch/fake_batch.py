"""`FakeBatch`: the real `AzureBatch` with the real azure-batch `BatchClient` pointed at the Batch endpoint
(devtools/rehearsal/batch_endpoint.py, the one the rehearsal serves) in front of `MemoryAccount`, an account held
in dicts that tests may change as the service would (a task's state, its executionInfo, a file's bytes).

Rules of the service played here: a job created with onAllTasksComplete terminatejob and no task is completed
at once and takes no task (409 JobCompleted; https://learn.microsoft.com/rest/api/batchservice/job/add);
terminate and delete act at once (the service passes through terminating/deleting, which the SDK's pollers
wait out).
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from devtools.rehearsal import batch_endpoint as rest
from infra.backends.batch.service import AzureBatch

_START = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)


class MemoryAccount(rest.JobsInDicts):
    """A rest.BatchAccount in dicts: `jobs[id]` and `tasks[job id]` (one task per job, as the project submits)
    are the REST JSON the service returns; `files[(job, path)]` the task's file contents; `pools[id]`; `nodes[pool id]`."""

    def __init__(self):
        self.jobs: dict[str, dict] = {}
        self.tasks: dict[str, dict] = {}
        self.files: dict[tuple[str, str], bytes] = {}
        self.pools: dict[str, dict] = {}
        self.nodes: dict[str, list[dict]] = {}  # pool id -> its nodes (BatchNode JSON)
        self._clock = 0

    def now(self) -> datetime:
        self._clock += 1  # every change a second later: creationTime orders jobs as the service's clock does
        return _START + timedelta(seconds=self._clock)

    def _end_with_tasks(self, job: dict) -> None:
        task = self.tasks.get(job["id"])
        if job.get("onAllTasksComplete") == "terminatejob" and (task is None or task["state"] == "completed"):
            job.update(state="completed", executionInfo={**job.get("executionInfo", {}),
                                                         "endTime": rest.iso(self.now())})

    def add_job(self, job):
        if job["id"] in self.jobs:
            raise rest.job_exists()
        self.jobs[job["id"]] = job
        self._end_with_tasks(job)

    def update_job(self, job_id, changes):
        job = self.job(job_id)
        job.update(changes)
        self._end_with_tasks(job)

    def terminate_job(self, job_id, reason):
        job = self.job(job_id)
        if job["state"] == "completed":
            raise rest.job_completed()
        job.update(state="completed", executionInfo={**job["executionInfo"], "endTime": rest.iso(self.now()),
                                                     "terminateReason": reason})

    def add_task(self, job_id, task):
        if self.job(job_id)["state"] == "completed":
            raise rest.job_completed()
        self.tasks[job_id] = task

    def task_file(self, job_id, task_id, path):
        self.task(job_id, task_id)
        if (job_id, path) not in self.files:
            raise rest.file_not_found()
        return self.files[(job_id, path)]

    def pool(self, pool_id):
        if pool_id not in self.pools:
            raise rest.pool_not_found()
        return self.pools[pool_id]

    def pool_nodes(self, pool_id):
        self.pool(pool_id)
        return self.nodes.get(pool_id, [])


class _Token:
    """A credential that always has a token: this endpoint does not check it."""

    def get_token(self, *scopes, **kwargs):
        from azure.core.credentials import AccessToken

        return AccessToken("test-token", 2**40)


class FakeBatch(AzureBatch):
    """The real AzureBatch over the real azure-batch client, talking to a fresh endpoint in front of a
    MemoryAccount. `jobs`, `tasks`, `files` are the account's, `requests` the endpoint's; close() stops it (the
    `batch` fixture does)."""

    def __init__(self):
        from azure.batch import BatchClient

        self.account = MemoryAccount()
        self.endpoint = rest.BatchEndpoint(self.account, clock=self.account.now)
        super().__init__(self.endpoint.url, client=BatchClient(self.endpoint.url, _Token(),
                                                               connection_verify=self.endpoint.ca_file))
        self.jobs, self.tasks, self.files = self.account.jobs, self.account.tasks, self.account.files
        self.requests = self.endpoint.requests

    def close(self) -> None:
        self.client.close()
        self.endpoint.close()
