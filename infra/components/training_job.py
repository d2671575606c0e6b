"""TrainingJob: the post-deploy training run, as a Pulumi dynamic resource over the Batch data plane.

create submits the job (infra/core/batch_spec.py builds it, as for `python -m infra submit`); a change of what
the training depends on (framework, arguments, nodes, image...) submits a new job and then deletes the
old one; delete terminates and deletes the job (its outputs stay in the `outputs` container and on NFS).
The inputs hold no secret (storage is reached with the nodes' identity). Batch is reached through
`infra.dataplane.batch.BatchService`, which the tests replace with a fake.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider

from infra.core import batch_spec
from infra.dataplane import staging
from infra.dataplane.batch import AzureBatch, BatchService

INPUT_FIELDS = [f.name for f in fields(batch_spec.JobInputs)]


def inputs_from(props: dict[str, Any]) -> batch_spec.JobInputs:
    values = {name: props[name] for name in INPUT_FIELDS if name in props}
    values["train_args"] = tuple(values.get("train_args") or ())
    for name in ("nodes", "retries", "max_hours", "data_wait_minutes"):
        values[name] = int(values[name])  # the engine sends numbers as floats
    return batch_spec.JobInputs(**values)


class TrainingJobProvider(ResourceProvider):
    def __init__(self, service: BatchService | None = None, staged: Callable[[str], bool] = staging.staged):
        self._service = service
        self._staged = staged

    def _batch(self, props: dict[str, Any]) -> BatchService:
        return self._service or AzureBatch(props["batch_endpoint"])

    def create(self, props: dict[str, Any]) -> CreateResult:
        inputs = inputs_from(props)
        status_url = props.get("data_status_url") or ""
        if status_url and not self._staged(status_url):
            raise RuntimeError(staging.not_staged_message("run `pulumi up` again to submit the training job"))
        job = batch_spec.job_id(inputs)
        self._batch(props).submit(batch_spec.job_spec(inputs, job), batch_spec.task_spec(inputs, job))
        return CreateResult(id_=job, outs={**props, "job_id": job})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [name for name in INPUT_FIELDS if as_compared(olds.get(name)) != as_compared(news.get(name))]
        if olds.get("batch_endpoint") != news.get("batch_endpoint"):
            changed.append("batch_endpoint")
        # Create the new job first: the old one keeps its nodes until the new one is queued.
        return DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=False)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        self._batch(props).delete(id_)


def as_compared(value: Any) -> Any:
    """A value as the engine may hand it back (floats for integers, lists for tuples), for diffs."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return tuple(value)
    return value


@dataclass
class TrainingJobArgs:
    batch_endpoint: pulumi.Input[str]
    # The `status` container, when the job must wait for the NFS server's staging report before it is
    # submitted ("" when the job stages the data itself).
    data_status_url: pulumi.Input[str]
    inputs: pulumi.Output[batch_spec.JobInputs]  # built by batch_spec.job_inputs, as for `infra submit`


class TrainingJob(pulumi.dynamic.Resource):
    job_id: pulumi.Output[str]

    def __init__(self, name: str, args: TrainingJobArgs, opts: pulumi.ResourceOptions | None = None):
        fields_ = {field: args.inputs.apply(lambda inputs, field=field: as_stored(getattr(inputs, field)))
                   for field in INPUT_FIELDS}
        super().__init__(TrainingJobProvider(), name,
                         {"batch_endpoint": args.batch_endpoint, "data_status_url": args.data_status_url,
                          **fields_, "job_id": None}, opts)


def as_stored(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value  # the engine stores lists
