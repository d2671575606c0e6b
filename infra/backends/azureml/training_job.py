"""AmlTrainingJob: the post-deploy training run of the azureml backend, as a Pulumi dynamic resource over
Azure ML's jobs (infra/backends/azureml/service.py).

create builds the job with azure-ai-ml's own classes (infra/backends/azureml/job.py, as `python -m infra submit`
does) and submits it, once the `data` container (the job's `data` input) holds the dataset: while it is empty
the resource holds no job (`job_name` ""), its `state` says so (a warning in `up`), and every later `up` tries
again in place (infra/backends/batch/training_job.py does the same for Batch).

A change of what the training depends on submits a new job, but never in place of a running one: while the
old job has not reached a terminal state, diff refuses with one line naming it and how to go on (`python -m
infra cancel`, then `up`); a finished one is replaced. An Azure ML job cannot be updated in place, and deleting
it would erase its history: delete (on replace or `pulumi destroy`) cancels a job that still runs and leaves
it, with its metrics and outputs, in the workspace's history.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pulumi

from infra.backends import job_resource
from infra.backends.azureml import job as aml_job
from infra.backends.azureml.service import TERMINAL, AmlJobs, AzureMlJobs
from infra.backends.job_resource import JobResourceProvider, stored_inputs, submitted_job, warn_unless_submitted
from infra.backends.shared import JobNotFound

INPUT_FIELDS = [f.name for f in fields(aml_job.AmlJobInputs)]
# A job asked to stop (https://learn.microsoft.com/rest/api/azureml/jobs/get#jobstatus): replacing it loses nothing.
CANCELLING = "CancelRequested"
WORKSPACE_FIELDS = ("subscription_id", "resource_group", "workspace")


def inputs_from(props: dict[str, Any]) -> aml_job.AmlJobInputs:
    return job_resource.inputs_from(aml_job.AmlJobInputs, props, ("nodes", "max_hours"))


class AmlTrainingJobProvider(JobResourceProvider):
    key = "job_name"
    compared = (*INPUT_FIELDS, *WORKSPACE_FIELDS)

    def _jobs(self, props: dict[str, Any]) -> AmlJobs:
        return self._service or AzureMlJobs(*(props[name] for name in WORKSPACE_FIELDS))

    def _submit(self, props: dict[str, Any]) -> str:  # no NFS server: the data gate is `data` itself
        inputs = inputs_from(props)
        name = aml_job.job_name(inputs)
        with tempfile.TemporaryDirectory(prefix="dltrain-code-") as tmp:
            self._jobs(props).submit(aml_job.build_job(inputs, name, aml_job.code_snapshot(Path(tmp) / "code")))
        return name

    def _state(self, props: dict[str, Any], job: str) -> str:
        return self._jobs(props).get(job)["status"]

    def _ended(self, state: str) -> bool:
        return state in (*TERMINAL, CANCELLING)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        name = submitted_job(props, "job_name", id_)
        if not name:  # nothing was submitted
            return
        jobs = self._jobs(props)
        try:
            if jobs.get(name)["status"] not in TERMINAL:
                jobs.cancel(name)
        except JobNotFound:
            pass  # gone with its workspace


@dataclass
class AmlTrainingJobArgs:
    subscription_id: pulumi.Input[str]
    resource_group: pulumi.Input[str]
    workspace: pulumi.Input[str]
    inputs: pulumi.Output[aml_job.AmlJobInputs]  # built by aml_job.aml_job_inputs, as for `infra submit`
    data_container_url: pulumi.Input[str] = ""  # the `data` container: no job while it is empty


class AmlTrainingJob(pulumi.dynamic.Resource):
    job_name: pulumi.Output[str]  # "" while `data` is empty
    state: pulumi.Output[str]  # "submitted NAME", or "waiting for data: why; what next"

    def __init__(self, name: str, args: AmlTrainingJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(AmlTrainingJobProvider(), name,
                         {"subscription_id": args.subscription_id, "resource_group": args.resource_group,
                          "workspace": args.workspace, "data_container_url": args.data_container_url,
                          **stored_inputs(args.inputs, INPUT_FIELDS), "job_name": None, "state": None}, opts)
        warn_unless_submitted(self, self.state)
