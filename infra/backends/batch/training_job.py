"""TrainingJob: the post-deploy training run, as a Pulumi dynamic resource over the Batch data plane.

create submits the job (infra/backends/batch/spec.py builds it, as for `python -m infra submit`) once the data is
ready (infra/backends/staging.py: `data` not empty and, with the NFS VM, staged as it is now). Until then it
submits nothing, does not wait and does not fail `up`: the resource holds no job (`job_id` ""), its `state`
says why (shown as a warning), and every later `up` updates it, submitting the job once the data is ready.

A change of what the training depends on (framework, arguments, nodes, retries, hours, the image digest after
any edit under training/...) replaces the job: a new one is submitted, then the old one deleted. Never a
running one: while the old job is active (queued or training), diff refuses with one line naming the job and
how to go on (`python -m infra cancel`, then `up`), in `pulumi preview` as in `up`; a job that has completed,
is terminating or is gone is replaced. (`pulumi up --target-replace URN` replaces it on purpose: the engine
then replaces without asking diff.) delete terminates and deletes the job (its outputs stay in the `outputs`
container and on NFS).

The engine calls diff(id, olds, news) with olds = the state's outputs and news = the checked inputs (unknown
values in a preview), update(id, olds, news) likewise, create(news) and delete(id, outputs)
(pulumi/pulumi: sdk/python/lib/pulumi/dynamic/__main__.py, pkg/resource/deploy/step_generator.go). The inputs
hold no secret (storage is reached with the nodes' identity). Batch is reached through
`infra.backends.batch.service.BatchService`, which the tests replace with a fake.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import pulumi

from infra.backends import job_resource
from infra.backends.batch import spec as batch_spec
from infra.backends.batch.service import AzureBatch, BatchService
from infra.backends.job_resource import JobResourceProvider, stored_inputs, submitted_job, warn_unless_submitted

INPUT_FIELDS = [f.name for f in fields(batch_spec.JobInputs)]


def inputs_from(props: dict[str, Any]) -> batch_spec.JobInputs:
    return job_resource.inputs_from(batch_spec.JobInputs, props, ("nodes", "retries", "max_hours", "data_wait_minutes"))


# Batch job states (https://learn.microsoft.com/rest/api/batchservice/job/get#jobstate) in which the job no
# longer trains or is about to stop: replacing it loses nothing.
ENDED_STATES = ("completed", "terminating", "deleting")


class TrainingJobProvider(JobResourceProvider):
    key = "job_id"
    compared = (*INPUT_FIELDS, "batch_endpoint")

    def _batch(self, props: dict[str, Any]) -> BatchService:
        return self._service or AzureBatch(props["batch_endpoint"])

    def _submit(self, props: dict[str, Any]) -> str:
        inputs = inputs_from(props)
        job = batch_spec.job_id(inputs)
        self._batch(props).submit(batch_spec.job_spec(inputs, job), batch_spec.task_spec(inputs, job))
        return job

    def _status_url(self, props: dict[str, Any]) -> str:
        return props.get("data_status_url") or ""

    def _state(self, props: dict[str, Any], job: str) -> str:
        return self._batch(props).get_job(job).get("state", "")

    def _ended(self, state: str) -> bool:
        return state in ENDED_STATES

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        job = submitted_job(props, "job_id", id_)
        if job:  # "" while the data was not ready: nothing was submitted
            self._batch(props).delete(job)


@dataclass
class TrainingJobArgs:
    batch_endpoint: pulumi.Input[str]
    # The `status` container, when the job must wait for the NFS server's staging report before it is
    # submitted ("" when the job stages the data itself).
    data_status_url: pulumi.Input[str]
    inputs: pulumi.Output[batch_spec.JobInputs]  # built by batch_spec.job_inputs, as for `infra submit`
    # The `data` container: no job is submitted while it is empty.
    data_container_url: pulumi.Input[str] = ""


class TrainingJob(pulumi.dynamic.Resource):
    job_id: pulumi.Output[str]  # "" while the data is not ready
    state: pulumi.Output[str]  # "submitted JOB", or "waiting for data: why; what next"

    def __init__(self, name: str, args: TrainingJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(TrainingJobProvider(), name,
                         {"batch_endpoint": args.batch_endpoint, "data_status_url": args.data_status_url,
                          "data_container_url": args.data_container_url, **stored_inputs(args.inputs, INPUT_FIELDS),
                          "job_id": None, "state": None},
                         opts)
        warn_unless_submitted(self, self.state)


