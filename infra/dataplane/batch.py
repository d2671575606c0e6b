"""The one seam to the Azure Batch data plane: `BatchService` (what we need of it) and `AzureBatch` (the real
thing: azure-batch with DefaultAzureCredential, never a shared key). The TrainingJob dynamic resource and
the `python -m infra` job verbs take a `BatchService`, so the tests hand them a fake here and nowhere else.

Jobs and tasks travel as plain dicts in the Batch REST API's shape (see infra/core/batch_spec.py).
"""
from __future__ import annotations

from typing import Any, Protocol

from infra.core.batch_spec import END_WITH_TASKS

BATCH_SCOPE = "https://batch.core.windows.net/.default"


class JobNotFound(Exception):
    """The job does not exist (never submitted, or deleted)."""


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

    def terminate(self, job_id: str) -> None:
        """Stop the job's running tasks; the job and its files stay. Raises JobNotFound."""

    def delete(self, job_id: str) -> None:
        """Delete the job (terminating it first if it runs); a job already gone is not an error."""


class AzureBatch:
    def __init__(self, endpoint: str, credential=None, client=None):
        """`client`: an azure.batch.BatchClient (made here from `endpoint` unless given)."""
        if client is None:
            from azure.batch import BatchClient

            if credential is None:
                from azure.identity import DefaultAzureCredential

                credential = DefaultAzureCredential()
            client = BatchClient(endpoint if endpoint.startswith("https://") else f"https://{endpoint}", credential)
        self.client = client

    def _not_found(self, err: Exception, job_id: str) -> Exception:
        from azure.core.exceptions import ResourceNotFoundError

        return JobNotFound(f"job {job_id} not found") if isinstance(err, ResourceNotFoundError) else err

    def submit(self, job: dict[str, Any], task: dict[str, Any]) -> None:
        from azure.batch import models

        # A job created to terminate when all its tasks are done, with no task yet, is complete at once: create
        # it with noaction, add the task, then switch (https://learn.microsoft.com/rest/api/batchservice/job/add).
        self.client.create_job(models.BatchJobCreateOptions({**job, "onAllTasksComplete": "noaction"}))
        try:
            self.client.create_task(job["id"], models.BatchTaskCreateOptions(task))
            self.client.update_job(job["id"], models.BatchJobUpdateOptions(END_WITH_TASKS))
        except Exception:
            self.delete(job["id"])  # no job without its task: it would hold the pool's queue for nothing
            raise

    def get_job(self, job_id: str) -> dict[str, Any]:
        try:
            return self.client.get_job(job_id).as_dict()
        except Exception as err:
            raise self._not_found(err, job_id) from None

    def get_task(self, job_id: str, task_id: str) -> dict[str, Any]:
        try:
            return self.client.get_task(job_id, task_id).as_dict()
        except Exception as err:
            raise self._not_found(err, job_id) from None

    def list_jobs(self, prefix: str) -> list[dict[str, Any]]:
        jobs = [job.as_dict() for job in self.client.list_jobs(filter=f"startswith(id, '{prefix}')")]
        return sorted(jobs, key=lambda j: str(j.get("creationTime", "")), reverse=True)

    def read_task_file(self, job_id: str, task_id: str, path: str, offset: int) -> bytes:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            size = self.client.get_task_file_properties(job_id, task_id, path).content_length
            if size <= offset:
                return b""
            return b"".join(self.client.download_task_file(job_id, task_id, path, ocp_range=f"bytes={offset}-"))
        except ResourceNotFoundError:
            return b""  # the task has not started, or its node is gone

    def terminate(self, job_id: str) -> None:
        try:
            self.client.begin_terminate_job(job_id).result()
        except Exception as err:
            raise self._not_found(err, job_id) from None

    def delete(self, job_id: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            self.client.begin_delete_job(job_id, force=True).result()
        except ResourceNotFoundError:
            pass

