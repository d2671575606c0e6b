"""The one seam to Azure ML's jobs and models: `AmlJobs` (what the job verbs need of it) and `AzureMlJobs` (the
real thing: azure-ai-ml's MLClient with DefaultAzureCredential). The `python -m infra` verbs of an azureml stack
take an `AmlJobs`, so the tests hand them a fake here and nowhere else.

Jobs are reported as plain dicts: name, status (Azure ML's: Queued, Running, Completed, Failed, Canceled...),
created, studio_url.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from infra.dataplane.batch import JobNotFound

TERMINAL = ("Completed", "Failed", "Canceled", "NotResponding", "Paused")
MODEL_FILE = "model.onnx"


def model_path(job_name: str) -> str:
    """The model in a job's `run` output, as Azure ML names a job output's file
    (https://learn.microsoft.com/azure/machine-learning/how-to-manage-models: azureml://jobs/<job>/outputs/<output>/paths/<path>)."""
    return f"azureml://jobs/{job_name}/outputs/run/paths/{MODEL_FILE}"


class AmlJobs(Protocol):
    def submit(self, job: Any) -> str:
        """Create the job (an azure-ai-ml job entity); its name."""

    def get(self, name: str) -> dict[str, Any]:
        """The job as a dict (see the module docstring); raises JobNotFound."""

    def list_jobs(self, prefix: str) -> list[dict[str, Any]]:
        """Jobs whose name starts with `prefix`, newest first."""

    def stream(self, name: str) -> None:
        """Print the job's output until it ends (Azure ML's own streaming)."""

    def download(self, name: str, dest: Path) -> None:
        """The job's logs and outputs into `dest`."""

    def cancel(self, name: str) -> None:
        """Cancel the job; raises JobNotFound."""

    def register_model(self, name: str, job_name: str, tags: dict[str, str]) -> str:
        """Register the job's model as a new version of model `name`; the version."""


class AzureMlJobs:
    def __init__(self, subscription_id: str, resource_group: str, workspace: str, credential=None, client=None):
        if client is None:
            from azure.ai.ml import MLClient

            if credential is None:
                from azure.identity import DefaultAzureCredential

                credential = DefaultAzureCredential()
            client = MLClient(credential, subscription_id, resource_group, workspace)
        self.client = client

    @staticmethod
    def _as_dict(job) -> dict[str, Any]:
        created = getattr(getattr(job, "creation_context", None), "created_at", None)
        return {"name": job.name, "status": job.status, "created": str(created or ""),
                "studio_url": getattr(job, "studio_url", "") or ""}

    def submit(self, job) -> str:
        return self.client.jobs.create_or_update(job).name

    def get(self, name: str) -> dict[str, Any]:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return self._as_dict(self.client.jobs.get(name))
        except ResourceNotFoundError:
            raise JobNotFound(f"job {name} not found") from None

    def list_jobs(self, prefix: str) -> list[dict[str, Any]]:
        jobs = [self._as_dict(j) for j in self.client.jobs.list() if str(j.name).startswith(prefix)]
        return sorted(jobs, key=lambda j: j["created"], reverse=True)

    def stream(self, name: str) -> None:
        self.client.jobs.stream(name)

    def download(self, name: str, dest: Path) -> None:
        self.client.jobs.download(name, download_path=str(dest), all=True)

    def cancel(self, name: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            self.client.jobs.begin_cancel(name).result()
        except ResourceNotFoundError:
            raise JobNotFound(f"job {name} not found") from None

    def register_model(self, name: str, job_name: str, tags: dict[str, str]) -> str:
        from azure.ai.ml.entities import Model

        model = Model(name=name, path=model_path(job_name), type="custom_model", tags=tags,
                      description=f"ResNet50 from Azure ML job {job_name} (ONNX)")
        return str(self.client.models.create_or_update(model).version)
