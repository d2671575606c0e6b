"""The one seam to Azure ML's jobs and models: `AmlJobs` (what the job verbs need of it) and `AzureMlJobs` (the
real thing: azure-ai-ml's MLClient signed in with Azure AD). The `python -m infra` verbs of an azureml stack
take an `AmlJobs`, so the tests hand them a fake here and nowhere else.

Jobs are reported as plain dicts: name, status (Azure ML's: Queued, Running, Completed, Failed, Canceled...),
created, studio_url.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from infra.backends.shared import JobError, call_translated, refused_line

T = TypeVar("T")

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

    def count_nodes(self, compute: str) -> int:
        """How many nodes the compute cluster `compute` has now, in any state (each one bills)."""

    def max_nodes(self, compute: str) -> int | None:
        """The compute cluster's maxNodeCount now (the budget guard sets it to 0); None when not known."""

    def cluster_state(self, compute: str) -> dict[str, Any]:
        """The cluster's AmlCompute properties as ARM answers them (COMPUTE_API): allocationState,
        allocationStateTransitionTime, errors, currentNodeCount, targetNodeCount, nodeStateCounts..."""


ARM_SCOPE = "https://management.azure.com/.default"  # what MLClient's job and model calls sign in for
# Compute - Get (https://learn.microsoft.com/rest/api/azureml/compute/get), REST spec Azure/azure-rest-api-specs
# specification/machinelearningservices/resource-manager/Microsoft.MachineLearningServices/stable/2025-12-01/
# machineLearningServices.json, example Compute/get/AmlCompute.json: an AmlCompute's properties.properties carries
# allocationState (Steady | Resizing), allocationStateTransitionTime, errors (ARM ErrorResponse[]: {error{code,
# message}}), currentNodeCount, targetNodeCount and nodeStateCounts. azure-ai-ml's AmlCompute entity (1.35.2:
# AmlCompute._load_from_rest) keeps none of them, so this one call goes through azure-mgmt-core's ARM pipeline (the
# one preflight uses) with the same sign-in. The version: the one the budget guard's Compute - Update uses.
COMPUTE_API = "2025-12-01"
# azure-ai-ml logs "Class X: This is an experimental class, and may change at any time..." at WARNING for each
# experimental schema class a job entity touches (azure/ai/ml/_utils/_experimental.py); none is ours to act on.
EXPERIMENTAL_LOGGER = "azure.ai.ml._utils._experimental"


def aml_refused(err: Exception, what: str) -> JobError | None:
    # The workspace admits only its network (and the addresses the stack allows, where it allows any); what Azure
    # ML answers a refused address is not documented (https://learn.microsoft.com/azure/machine-learning/
    # how-to-configure-private-link is silent), so every 403 gets the line, which also names a missing role.
    return refused_line(err, "Azure ML", what, "the workspace does not admit this machine's address, or your "
                                               "identity has no role on it")


class AzureMlJobs:
    def __init__(self, subscription_id: str, resource_group: str, workspace: str, credential=None, client=None,
                 arm=None):
        """Without a credential, one Azure AD sign-in is tried first (training.data.transfer.AzureCredential): no
        sign-in ends here in one line, before azure-ai-ml (seconds to import) is loaded. `arm`: the ARM client for
        Compute - Get (infra/backends/preflight.py: Arm), made from the same credential when not given."""
        logging.getLogger(EXPERIMENTAL_LOGGER).setLevel(logging.ERROR)
        if client is None:
            from training.data.transfer import AzureCredential

            credential = credential or AzureCredential(probe_scope=ARM_SCOPE)
            from azure.ai.ml import MLClient

            client = MLClient(credential, subscription_id, resource_group, workspace)
        self.client, self._credential, self._arm = client, credential, arm
        self._workspace_id = (f"/subscriptions/{subscription_id}/resourceGroups/{resource_group}/providers/"
                              f"Microsoft.MachineLearningServices/workspaces/{workspace}")

    def _call(self, what: str, call: Callable[[], T], name: str | None = None) -> T:
        return call_translated(call, what, name, aml_refused)

    @staticmethod
    def _as_dict(job) -> dict[str, Any]:
        created = getattr(getattr(job, "creation_context", None), "created_at", None)
        return {"name": job.name, "status": job.status, "created": str(created or ""),
                "studio_url": getattr(job, "studio_url", "") or ""}

    def submit(self, job) -> str:
        return self._call(f"submitting job {job.name}", lambda: self.client.jobs.create_or_update(job).name)

    def get(self, name: str) -> dict[str, Any]:
        return self._call(f"reading job {name}", lambda: self._as_dict(self.client.jobs.get(name)), name)

    def list_jobs(self, prefix: str) -> list[dict[str, Any]]:
        jobs = self._call("listing jobs", lambda: [
            self._as_dict(j) for j in self.client.jobs.list() if str(j.name).startswith(prefix)])
        return sorted(jobs, key=lambda j: j["created"], reverse=True)

    def stream(self, name: str) -> None:
        self._call(f"streaming job {name}", lambda: self.client.jobs.stream(name))

    def download(self, name: str, dest: Path) -> None:
        self._call(f"downloading job {name}",
                   lambda: self.client.jobs.download(name, download_path=str(dest), all=True))

    def cancel(self, name: str) -> None:
        self._call(f"cancelling job {name}", lambda: self.client.jobs.begin_cancel(name).result(), name)

    def register_model(self, name: str, job_name: str, tags: dict[str, str]) -> str:
        from azure.ai.ml.entities import Model

        model = Model(name=name, path=model_path(job_name), type="custom_model", tags=tags,
                      description=f"ResNet50 from Azure ML job {job_name} (ONNX)")
        return self._call(f"registering model {name}",
                          lambda: str(self.client.models.create_or_update(model).version))

    def count_nodes(self, compute: str) -> int:
        # azure-ai-ml's documented call, ComputeOperations.list_nodes ("Retrieve a list of a compute resource's
        # nodes", azure-ai-ml 1.35.2), is Compute - List Nodes (POST .../computes/{name}/listNodes,
        # https://learn.microsoft.com/rest/api/azureml/compute/list-nodes): every node the cluster holds now, with
        # its nodeState (idle, running, preparing, unusable, leaving, preempted). The AmlCompute entity carries no
        # current node count. AzureML Data Scientist may call it (its NotActions leave computes' */action but
        # listKeys).
        return self._call(f"listing the nodes of compute {compute}",
                          lambda: sum(1 for _ in self.client.compute.list_nodes(compute)))

    def max_nodes(self, compute: str) -> int | None:
        # Compute - Get (https://learn.microsoft.com/rest/api/azureml/compute/get): an AmlCompute's
        # scaleSettings.maxNodeCount, azure-ai-ml's AmlCompute.max_instances. AzureML Data Scientist reads computes.
        cluster = self._call(f"reading compute {compute}", lambda: self.client.compute.get(compute))
        value = getattr(cluster, "max_instances", None)
        return int(value) if value is not None else None

    def cluster_state(self, compute: str) -> dict[str, Any]:
        # AzureML Data Scientist reads computes (Microsoft.MachineLearningServices/workspaces/*/read).
        if self._arm is None:
            from infra.backends.preflight import Arm

            self._arm = Arm(self._credential)
        arm = self._arm
        body = self._call(f"reading compute {compute}", lambda: arm.get(
            f"{self._workspace_id}/computes/{compute}", COMPUTE_API))
        return ((body or {}).get("properties") or {}).get("properties") or {}
