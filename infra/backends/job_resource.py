"""What both job resources (infra/backends/batch/training_job.py, azureml/training_job.py) do alike: read their
inputs back from the engine, launch once the data is ready, refuse to replace a running job, warn when nothing was
submitted. The engine calls the providers' diff(id, olds, news), update, create(news) and delete(id, outputs)
(pulumi/pulumi: sdk/python/lib/pulumi/dynamic/__main__.py, pkg/resource/deploy/step_generator.go)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider, UpdateResult

from infra.backends import staging
from infra.backends.shared import JobNotFound
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
            if ready.ready and not props.get("dataset") and not ready.default:  # the job trains on `default`
                ready = staging.Readiness(False, staging.no_default_line(ready, props["stack"]))
            if not ready.ready:
                then = f"once it is, `pulumi up` submits the job (or `python -m infra submit --stack {props['stack']}`)"
                return {**props, key: "", "state": f"waiting for data: {staging.not_ready_message(ready, then)}"}
        job = submit()
    except AccessRefused as err:
        return {**props, key: "", "state": waiting_for_access(err)}
    return {**props, key: job, "state": f"submitted {job}"}


def waiting_for_access(err: AccessRefused) -> str:
    """The job resources' state when a data plane refused `up` (403). The same `up` has just granted the deployer
    its data-plane roles (infra/stack.py), and "role assignment changes can take up to 30 minutes to take
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


def stored_inputs(inputs: pulumi.Output, names: list[str]) -> dict[str, pulumi.Output]:
    """A job's inputs (an Output of its dataclass) as the resource's properties, one per field, as stored."""
    return {name: inputs.apply(lambda value, name=name: as_stored(getattr(value, name))) for name in names}


def as_stored(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value  # the engine stores lists


class JobResourceProvider(ResourceProvider):
    """The life both job resources share: create submits once the data is ready (else holds no job and says
    why), update tries again while nothing was submitted, diff replaces a submitted job whose inputs changed but
    refuses while it still runs. A backend says how it submits, how it reads a job's state, which states have
    ended, and how delete ends a job."""

    key: str  # the output naming the submitted job ("" while none)
    compared: tuple[str, ...]  # the properties whose change replaces the job

    def __init__(self, service: Any = None,
                 staged: Callable[[str, str], staging.Readiness] = staging.data_ready):
        self._service = service
        self._staged = staged

    def _submit(self, props: dict[str, Any]) -> str:
        """Submit the job; its name."""
        raise NotImplementedError

    def _state(self, props: dict[str, Any], job: str) -> str:
        """The job's state; raises JobNotFound."""
        raise NotImplementedError

    def _ended(self, state: str) -> bool:
        """Whether a job in `state` no longer trains (replacing it loses nothing)."""
        raise NotImplementedError

    def _status_url(self, props: dict[str, Any]) -> str:
        """The `status` container to read the NFS server's staging report from ("" for `data` itself)."""
        return ""

    def _launch(self, props: dict[str, Any]) -> dict[str, Any]:
        """Submit the job if the data is ready; the outputs either way (`key` "" and why, when not)."""
        return launch_when_ready(props, self.key, self._staged, self._status_url(props), lambda: self._submit(props))

    def create(self, props: dict[str, Any]) -> CreateResult:
        outs = self._launch(props)
        return CreateResult(id_=outs[self.key] or f"train-{props['stack']}-not-submitted", outs=outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        job = submitted_job(olds, self.key, _id)
        if not job:
            # Nothing submitted yet (the data was not ready): every `up` tries again, in place.
            return DiffResult(changes=True, replaces=[], delete_before_replace=False)
        # A field the old state predates (a job launched before the key existed) was not asked for: its arrival alone
        # replaces nothing, nor refuses `up` while that job runs.
        changed = [name for name in self.compared
                   if name in olds and as_compared(olds[name]) != as_compared(news.get(name))]
        if changed:
            self._refuse_if_running(job, olds, changed)
        # Create the new job first: the old one keeps its nodes until the new one is queued.
        return DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=False)

    def _refuse_if_running(self, job: str, olds: dict[str, Any], changed: list[str]) -> None:
        try:
            state = self._state(olds, job)
        except JobNotFound:
            return  # gone: nothing to lose
        if not self._ended(state):
            raise RuntimeError(running_job_refusal(job, str(state), olds.get("stack", "STACK"), changed))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        """Reached only while no job was submitted (diff replaces a submitted one): submit it now if the data
        is ready."""
        return UpdateResult(outs=self._launch(news))
