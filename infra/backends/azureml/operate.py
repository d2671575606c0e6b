"""Job operations on a stack with `backend: azureml`: submit, status, logs, download, cancel, register-model,
through the `AmlJobs` seam (infra/backends/azureml/service.py). The job itself is built by infra/backends/azureml/job.py."""
from __future__ import annotations

import json
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import TextIO

from infra.backends.azureml import job as aml_job
from infra.backends.azureml.service import TERMINAL, AmlJobs
from infra.backends.shared import JobError, JobNotFound, submitted_lines

SUMMARY_TAGS = ("framework", "world_size", "steps", "img_per_sec", "top1", "final_loss")


def budget_stop_line(max_nodes: int | None, compute: str, stack: str) -> str | None:
    """Why a job would never start on the cluster: maxNodeCount 0 is the budget guard's stop (infra/components/
    budget.py) or a person's, and only an `up` that refreshes first (Pulumi.yaml options.refresh) puts the stack's
    maxNodes back."""
    if max_nodes != 0:
        return None
    return (f"compute cluster {compute} has maxNodeCount 0 (the budget guard's stop, or a change outside Pulumi), so "
            "a job would wait for nodes forever: once this month's spend is under monthlyBudgetUsd (raise it, or "
            f"wait for next month), run `pulumi up --stack {stack}`, which refreshes first (Pulumi.yaml "
            "options.refresh: always) and puts maxNodes back, then submit again")


def submit(service: AmlJobs, inputs: aml_job.AmlJobInputs, now: datetime, out: TextIO, stack_flags: str = "") -> str:
    """`stack_flags`: how the follow-up commands printed name the stack (default `--stack STACK`)."""
    stopped = budget_stop_line(service.max_nodes(inputs.compute), inputs.compute, inputs.stack)
    if stopped:
        raise JobError(f"--stack {inputs.stack}: {stopped}")
    name = aml_job.job_name(inputs, attempt=now.strftime("%Y%m%d%H%M%S"))
    with tempfile.TemporaryDirectory(prefix="dltrain-code-") as tmp:  # uploaded by the SDK as the job's code
        service.submit(aml_job.build_job(inputs, name, aml_job.code_snapshot(Path(tmp) / "code")))
    print(f"submitted {name}: {inputs.framework} ({inputs.distribution}) on {inputs.nodes} node(s) x {inputs.gpus} "
          "GPUs", file=out)
    print("\n".join(submitted_lines(name, inputs.stack, stack_flags=stack_flags)), file=out)
    return name


def _get(service: AmlJobs, name: str) -> dict:
    try:
        return service.get(name)
    except JobNotFound:
        raise JobError(f"job {name} not found (see `python -m infra status` for the newest)") from None


# Azure ML's JobStatus values for a cancel (https://learn.microsoft.com/javascript/api/@azure/arm-machinelearning/knownjobstatus:
# status; CancelRequested while it stops), said as the Batch backend says it (batch/operate.py Status).
CANCEL_WORDS = {"Canceled": "cancelled (`python -m infra cancel`; Azure ML: Canceled)",
                "CancelRequested": "cancelling (Azure ML: CancelRequested)"}


# A job waits in these for its cluster's nodes (JobStatus, https://learn.microsoft.com/javascript/api/@azure/arm-
# machinelearning/knownjobstatus: Queued "while waiting for all required nodes to be ready"; Preparing, the run
# environment): the cluster's allocation is what `status` shows beside it.
WAITING = ("NotStarted", "Starting", "Provisioning", "Preparing", "Queued")


def _moment(value: str | None) -> str:
    """An ARM date-time (allocationStateTransitionTime) as `status` writes times: minutes, UTC."""
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return str(value)


def cluster_line(compute: str, props: dict, job_status: str) -> str:
    """One line on the compute cluster's allocation (Compute - Get: an AmlCompute's properties, service.COMPUTE_API):
    allocationState (Steady | Resizing) since allocationStateTransitionTime, currentNodeCount of targetNodeCount,
    its nodeStateCounts that are not zero, and its first allocation error (errors: ARM ErrorResponse[], code and
    message; which codes Azure ML writes there is not documented). While the job waits for nodes, it says that
    Azure ML has no deadline for that wait (docs/deploying.md, "Capacity"): only a `cancel` ends it."""
    state = props.get("allocationState") or "unknown"
    since = props.get("allocationStateTransitionTime")
    line = (f"  cluster {compute}: {state}{f' since {_moment(since)}' if since else ''}, "
            f"{props.get('currentNodeCount', '?')} of {props.get('targetNodeCount', '?')} node(s)")
    counts = {k.removesuffix("NodeCount"): v for k, v in (props.get("nodeStateCounts") or {}).items() if v}
    if counts:
        line += f" ({', '.join(f'{k} {v}' for k, v in counts.items())})"
    errors = [(e or {}).get("error") or {} for e in props.get("errors") or []]
    if errors:
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        line += f"; allocation error {errors[0].get('code', '?')}: {errors[0].get('message', '')}{more}"
    if job_status in WAITING:
        line += ("; the job waits for its nodes with no deadline on Azure ML (its limits.timeout bounds the run): "
                 "`python -m infra cancel` ends the wait")
    return line


def status(service: AmlJobs, name: str, compute: str | None = None) -> list[str]:
    """The job's state; with `compute`, the cluster's allocation line (cluster_line)."""
    job = _get(service, name)
    lines = [f"job {name}: {CANCEL_WORDS.get(job['status'], job['status'])}", f"  created: {job['created'] or '-'}",
             f"  studio: {job['studio_url'] or '-'}"]
    if compute:
        lines.append(cluster_line(compute, service.cluster_state(compute), job["status"]))
    return lines


def logs(service: AmlJobs, name: str, follow: bool, out: TextIO) -> None:
    job = _get(service, name)
    if follow:
        if job["status"] not in TERMINAL:  # Azure ML's streaming says nothing until the job's nodes run it
            print(f"logs: job {name} is {job['status']}: Azure ML streams its output once its nodes run it (a "
                  "cluster at 0 nodes takes minutes to start them)", file=sys.stderr, flush=True)
        service.stream(name)  # Azure ML's own streaming prints until the job ends
        return
    print(f"job {name}: {job['status']}. Azure ML streams a job's output with --follow; a finished job's logs "
          "come with `python -m infra download` (its user_logs/)", file=out)


def download(service: AmlJobs, name: str, dest: Path) -> Path:
    job = _get(service, name)
    if job["status"] not in TERMINAL:
        raise JobError(f"job {name} is {job['status']}: its outputs are complete once it has ended (`python -m "
                       "infra status`)")
    service.download(name, dest / name)
    return dest / name


def run_summary(folder: Path) -> dict:
    found = sorted(folder.rglob("summary.json"))
    if not found:
        raise JobError(f"no summary.json under {folder}: the job wrote no run folder (did it fail? see its logs)")
    return json.loads(found[0].read_text())


def register_model(service: AmlJobs, name: str, dest: Path, model_name: str, out: TextIO) -> str:
    """The job's model.onnx as a new version of `model_name`, its summary's metrics as tags (as the source
    document's run.register_model does)."""
    folder = download(service, name, dest)
    summary = run_summary(folder)
    tags = {key: str(summary[key]) for key in SUMMARY_TAGS if key in summary} | {"job": name}
    version = service.register_model(model_name, name, tags)
    print(f"registered {model_name} version {version} from {name} ({', '.join(f'{k}={v}' for k, v in tags.items())})",
          file=out)
    return version


def cancel(service: AmlJobs, name: str) -> None:
    job = _get(service, name)
    if job["status"] in TERMINAL:
        raise JobError(f"job {name} has already ended ({job['status']}); nothing to cancel")
    try:
        service.cancel(name)
    except JobNotFound:
        raise JobError(f"job {name} not found") from None
