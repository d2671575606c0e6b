"""What both job resources (infra/backends/batch/training_job.py, azureml/training_job.py) do alike: read their
inputs back from the engine, launch once the data is ready, refuse to replace a running job, warn when nothing was
submitted. The engine calls the providers' diff(id, olds, news), update, create(news) and delete(id, outputs)
(pulumi/pulumi: sdk/python/lib/pulumi/dynamic/__main__.py, pkg/resource/deploy/step_generator.go)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

import pulumi

from infra.backends import staging
from training.errors import AccessRefused

I = TypeVar("I")


def inputs_from(cls: type[I], props: dict[str, Any], integers: tuple[str, ...]) -> I:
    """A job's inputs (the dataclass `cls`) from the resource's properties: lists back to tuples, and the
    `integers` back to int (the engine sends numbers as floats)."""
    values = {f.name: props[f.name] for f in fields(cls) if f.name in props}
    values["train_args"] = tuple(values.get("train_args") or ())
    for name in integers:
        values[name] = int(values[name])
    return cls(**values)


def launch_when_ready(props: dict[str, Any], key: str, staged: Callable[[str, str], staging.Readiness],
                      status_url: str, submit: Callable[[], str]) -> dict[str, Any]:
    """The job resources' outputs after an attempt to launch: `submit()` (which returns the job's name) once the
    data is ready, else `key` "" and the state saying why: the data (staging.py's gate) or access (a 403)."""
    try:
        if props.get("data_container_url"):
            ready = staged(props["data_container_url"], status_url)
            if not ready.ready:
                then = f"once it is, `pulumi up` submits the job (or `python -m infra submit --stack {props['stack']}`)"
                return {**props, key: "", "state": f"waiting for data: {staging.not_ready_message(ready, then)}"}
        job = submit()
    except AccessRefused as err:
        return {**props, key: "", "state": waiting_for_access(err)}
    return {**props, key: job, "state": f"submitted {job}"}


def waiting_for_access(err: AccessRefused) -> str:
    """The job resources' state when a data plane refused `up` (403). The same `up` has just granted the deployer
    its data-plane roles (environment.py), and "role assignment changes can take up to 30 minutes to take
    effect" (https://learn.microsoft.com/azure/role-based-access-control/troubleshooting): so nothing is
    submitted, `up` does not fail, and the next `up` tries again."""
    return (f"waiting for access: {err}. If this `pulumi up` has just granted your roles, they can take up to 30 "
            "minutes to take effect: run `pulumi up` again later")


def submitted_job(props: dict[str, Any], key: str, id_: str) -> str:
    """The job a resource's outputs hold: "" when none was submitted (the data was not ready); the resource ID
    for state written before the key existed."""
    return id_ if props.get(key) is None else props[key]


def running_job_refusal(job: str, state: str, stack: str, changed: list[str]) -> str:
    return (f"the training job {job} is {state}: this `pulumi up` would replace it ({', '.join(changed)} changed) "
            "and its training would start again from scratch in a new run folder; keep it running and run `up` "
            f"after it has completed, or stop it first: `python -m infra cancel --stack {stack} --job {job}`, "
            "then `pulumi up`")


def as_compared(value: Any) -> Any:
    """A value as the engine may hand it back (floats for integers, lists for tuples), for diffs."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return tuple(value)
    return value


def warn_unless_submitted(resource: pulumi.Resource, state: pulumi.Output[str]) -> None:
    """The provider runs in its own process and cannot write to `up`'s output: the program says it, once the
    resource's state is known (not in a preview)."""
    state.apply(lambda text: pulumi.log.warn(f"no training job submitted, {text}", resource=resource)
                if text and not text.startswith("submitted") else None)


def as_stored(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value  # the engine stores lists
