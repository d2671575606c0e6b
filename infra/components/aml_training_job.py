"""AmlTrainingJob: the post-deploy training run of the azureml backend, as a Pulumi dynamic resource over
Azure ML's jobs (infra/dataplane/azureml.py).

create builds the job with azure-ai-ml's own classes (infra/dataplane/aml_job.py, as `python -m infra submit`
does) and submits it; a change of what the training depends on submits a new job, and the old one is cancelled
if it still runs. An Azure ML job cannot be updated in place, and deleting it would erase its history: delete
(on replace or `pulumi destroy`) cancels a job that still runs and leaves it, with its metrics and outputs, in
the workspace's history.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider

from infra.components.training_job import as_compared, as_stored
from infra.dataplane import aml_job
from infra.dataplane.azureml import TERMINAL, AmlJobs, AzureMlJobs
from infra.dataplane.batch import JobNotFound

INPUT_FIELDS = [f.name for f in fields(aml_job.AmlJobInputs)]
WORKSPACE_FIELDS = ("subscription_id", "resource_group", "workspace")


def inputs_from(props: dict[str, Any]) -> aml_job.AmlJobInputs:
    values = {name: props[name] for name in INPUT_FIELDS if name in props}
    values["train_args"] = tuple(values.get("train_args") or ())
    for name in ("nodes", "max_hours"):
        values[name] = int(values[name])  # the engine sends numbers as floats
    return aml_job.AmlJobInputs(**values)


class AmlTrainingJobProvider(ResourceProvider):
    def __init__(self, service: AmlJobs | None = None):
        self._service = service

    def _jobs(self, props: dict[str, Any]) -> AmlJobs:
        return self._service or AzureMlJobs(*(props[name] for name in WORKSPACE_FIELDS))

    def create(self, props: dict[str, Any]) -> CreateResult:
        inputs = inputs_from(props)
        name = aml_job.job_name(inputs)
        with tempfile.TemporaryDirectory(prefix="dltrain-code-") as tmp:
            self._jobs(props).submit(aml_job.build_job(inputs, name, aml_job.code_snapshot(Path(tmp) / "code")))
        return CreateResult(id_=name, outs={**props, "job_name": name})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [name for name in (*INPUT_FIELDS, *WORKSPACE_FIELDS) if as_compared(olds.get(name)) != as_compared(news.get(name))]
        return DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=False)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        jobs = self._jobs(props)
        try:
            if jobs.get(id_)["status"] not in TERMINAL:
                jobs.cancel(id_)
        except JobNotFound:
            pass  # gone with its workspace


@dataclass
class AmlTrainingJobArgs:
    subscription_id: pulumi.Input[str]
    resource_group: pulumi.Input[str]
    workspace: pulumi.Input[str]
    inputs: pulumi.Output[aml_job.AmlJobInputs]  # built by aml_job.aml_job_inputs, as for `infra submit`


class AmlTrainingJob(pulumi.dynamic.Resource):
    job_name: pulumi.Output[str]

    def __init__(self, name: str, args: AmlTrainingJobArgs, opts: pulumi.ResourceOptions | None = None):
        fields_ = {field: args.inputs.apply(lambda inputs, field=field: as_stored(getattr(inputs, field)))
                   for field in INPUT_FIELDS}
        super().__init__(AmlTrainingJobProvider(), name,
                         {"subscription_id": args.subscription_id, "resource_group": args.resource_group,
                          "workspace": args.workspace, **fields_, "job_name": None}, opts)
