"""Job operations from a deployed stack: submit, status, logs (--follow), download, cancel.

What a verb needs comes from the stack's outputs (`pulumi stack output --json --show-secrets`, or a file
holding that JSON) and its config (Pulumi.<stack>.yaml). Batch is reached as the signed-in Azure AD user
(DefaultAzureCredential) through `infra.backends.batch.service.BatchService`; results are downloaded from the `outputs`
container with Azure AD as well (its SAS may only write). No verb touches an account key, and no job carries a
SAS: the nodes reach storage with the pool's identity.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from infra.backends.batch import allocation
from infra.backends.batch import spec as batch_spec
from infra.backends.batch.service import BatchService
from infra.backends.shared import JobError, JobNotFound, submitted_lines

FOLLOW_INTERVAL_S = 5.0
pause: Callable[[float], None] = time.sleep  # end_overdue's wait (tests replace it)
DONE = "completed"
# What `logs` waits for while the task has written nothing yet, by its state (BatchTaskState:
# https://learn.microsoft.com/rest/api/batchservice/task/get: active = queued or being retried, not yet on a node;
# preparing = assigned to a node, waiting for a job preparation task there; running; completed).
WAITING_FOR = {
    "active": "queued: waiting for the pool's nodes (from 0 nodes, Batch takes minutes to start them)",
    "preparing": "assigned to a node, waiting for the job's preparation there",
    "running": "running: waiting for its first output (the data check, the ranks' start)",
    DONE: "ended without writing any",
}
# Terminate Job's default reason (https://learn.microsoft.com/rest/api/batchservice/job/terminate:
# terminateReason, "The default is 'UserTerminate'"; BatchService.terminate sends it): the job ended by `cancel`,
# not by its task (Batch sets AllTasksComplete then: BatchJobExecutionInfo.terminationReason).
CANCELLED_REASON = "UserTerminate"


def budget_stop_line(pool: dict[str, Any] | None, stack: str) -> str | None:
    """Why a job would wait forever on this pool (`pool`: BatchService.pool_scale's answer), or None. The stack
    always declares an autoscale formula (infra/backends/batch/cluster.py); a pool at fixed scale with no node is the
    budget guard's stop (infra/components/budget.py PATCHes fixedScale 0, which Pools - Get shows as enableAutoScale
    false and targets of 0: https://learn.microsoft.com/rest/api/batchservice/pools/get-pool) or a person's: no job
    gets a node until the formula is back. Pulumi diffs against its state, not the live pool, so only an `up` that
    refreshes first sees it (https://www.pulumi.com/docs/iac/concepts/projects/project-file/: `options.refresh:
    always`, which Pulumi.yaml sets)."""
    if not pool or pool.get("enableAutoScale", True):
        return None
    if int(pool.get("targetDedicatedNodes") or 0) or int(pool.get("targetLowPriorityNodes") or 0):
        return None
    return (f"pool {pool.get('id', '?')} is at fixed scale 0 (the budget guard's stop, or a resize outside Pulumi), so "
            "a job would wait for nodes forever: once this month's spend is under monthlyBudgetUsd (raise it, or "
            f"wait for next month), run `pulumi up --stack {stack}`, which refreshes first (Pulumi.yaml "
            "options.refresh: always) and puts the autoscale formula back, then submit again")


def submit(service: BatchService, inputs: batch_spec.JobInputs, now: datetime, out: TextIO, verb_flags: str = "",
           stack_flags: str = "") -> str:
    """`verb_flags`: added to the follow-up commands printed (the rehearsal's `--rehearsal`); `stack_flags`: how they
    name the stack (a member's `--outputs FILE`; default `--stack STACK`). Refused while the pool cannot get a node
    (budget_stop_line)."""
    stopped = budget_stop_line(service.pool_scale(inputs.pool_id), inputs.stack)
    if stopped:
        raise JobError(f"--stack {inputs.stack}: {stopped}")
    end_overdue(service, inputs.stack, now, out)
    warning = allocation.capacity_warning(service.pool_allocation(inputs.pool_id)[0], inputs.nodes)
    if warning:
        print(warning, file=out)
    # A manual submit gets its own ID (the fingerprint alone is the ID of the job `pulumi up` launched).
    job = batch_spec.job_id(inputs, attempt=now.strftime("%Y%m%d%H%M%S"))
    service.submit(batch_spec.job_spec(inputs, job), batch_spec.task_spec(inputs, job))
    per_node = f"{inputs.slots} process(es)" if inputs.processes_per_node else f"{inputs.sku.gpus} GPUs"
    print(f"submitted {job}: {inputs.framework} on {inputs.nodes} node(s) x {per_node}", file=out)
    print("\n".join(submitted_lines(job, inputs.stack, verb_flags, stack_flags)), file=out)
    return job


@dataclass(frozen=True)
class Status:
    job: str
    job_state: str
    task_state: str
    exit_code: int | None
    retries: int
    node: str
    started: str
    ended: str
    efficiency: str = ""  # the run's last img/s per GPU, its bound and the shortfall's cost (training/efficiency.py)
    unhealthy: tuple[str, ...] = ()  # one line per pool node whose start task (node health checks) failed
    cancelled: bool = False  # ended by `cancel` (CANCELLED_REASON), not by its task
    attempts: tuple[str, ...] = ()  # each attempt: its fault, the node blamed, its node-hours (cluster/attempts.py)
    allocation: str = ""  # while the task waits for its nodes, or why it ended without them (allocation.py)

    def lines(self) -> list[str]:
        exit_text = "" if self.exit_code is None else f", exit code {self.exit_code}"
        if self.cancelled:  # the exit code is the kill's (-9), not the training's
            return [f"job {self.job}: cancelled (`python -m infra cancel`; outputs written before it stay)",
                    f"  task: stopped by the cancel{exit_text}, retried {self.retries} time(s)",
                    f"  primary node: {self.node or '-'}",
                    f"  started: {self.started or '-'}   ended: {self.ended or '-'}"]
        return [f"job {self.job}: {self.job_state}",
                f"  task: {self.task_state}{exit_text}, retried {self.retries} time(s)",
                f"  primary node: {self.node or '-'}",
                f"  started: {self.started or '-'}   ended: {self.ended or '-'}",
                *([f"  efficiency: {self.efficiency}"] if self.efficiency else []),
                *(f"  {line}" for line in self.attempts),
                *(f"  {line}" for line in self.unhealthy),
                *([f"  {self.allocation}"] if self.allocation else [])]


def failed_node_line(node: dict[str, Any], pool_id: str) -> str:
    """What `status` says of a node in state starttaskfailed (Nodes - List's BatchNode): the start task, which runs
    the node health checks (infra/core/node_health.py), failed after its retries, so the node takes no task
    (startTask.waitForSuccess) but stays in the pool and bills."""
    info = node.get("startTaskInfo") or {}
    failure = info.get("failureInfo") or {}
    code = info.get("exitCode")
    why = ": ".join(str(part) for part in (failure.get("code"), failure.get("message")) if part)
    return (f"node {node.get('id', '?')}: failed its start task (the node health checks)"
            f"{'' if code is None else f', exit code {code}'}, retried {int(info.get('retryCount') or 0)} time(s)"
            f"{f' ({why})' if why else ''}; it takes no task but bills until it leaves pool {pool_id}; the failed "
            "check is in its startup/stderr.txt and startup/wd/health.log (the portal: the pool's Nodes, Files)")


def _not_found(job: str) -> JobError:
    return JobError(f"job {job} not found (see `python -m infra status` for the newest)")


def status(service: BatchService, job: str, node_price_per_hour: float | None = None,
           now: datetime | None = None) -> Status:
    """The job's state, with the allocation line while its task waits for nodes (or ended without them); the job
    and its task read once for both."""
    job_info, task = _job_and_task(service, job)
    found = _status(service, job, job_info, task, node_price_per_hour)
    return replace(found, allocation=_allocation_line(service, job_info, task, now or datetime.now(timezone.utc)))


def _job_and_task(service: BatchService, job: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return _job(service, job), _task(service, job)


def _job(service: BatchService, job: str) -> dict[str, Any]:
    try:
        return service.get_job(job)
    except JobNotFound:
        raise _not_found(job) from None


def _task(service: BatchService, job: str) -> dict[str, Any]:
    try:
        return service.get_task(job, batch_spec.TASK_ID)
    except JobNotFound:
        raise _not_found(job) from None


def _allocation_line(service: BatchService, job_info: dict[str, Any], task: dict[str, Any], now: datetime) -> str:
    """allocation.allocation_line for the job and its task as read: "" while its task runs or once it has run to
    completion (a task waiting again after a requeue or a retry gets its `resuming` line)."""
    if not allocation.never_started(task) and task.get("state") != "active":
        return ""
    pool, nodes = service.pool_allocation((job_info.get("poolInfo") or {}).get("poolId") or "")
    return allocation.allocation_line(job_info, task, pool, nodes, now)


def end_overdue(service: BatchService, stack: str, now: datetime, out: TextIO) -> list[str]:
    """End the stack's jobs whose task still waits for its nodes past their deadline on a pool whose last resize
    failed for quota or capacity (allocation.py, (3)), one line each; after any, wait SAMPLE_GAP_S so the pool's
    autoscale sees the queue empty before a new job joins it. A job queued behind others, or resuming, is left."""
    ended, wait = [], 0.0
    pools: dict[str, dict[str, Any] | None] = {}  # each pool read once
    for job in service.list_jobs(batch_spec.job_prefix(stack)):
        if job.get("state") not in ("active", DONE) or (job.get("state") == DONE and not job_ended_within_gap(job, now)):
            continue
        try:
            task = service.get_task(job["id"], batch_spec.TASK_ID)
        except JobNotFound:
            continue  # created, its task not added yet (or gone meanwhile)
        pool_id = (job.get("poolInfo") or {}).get("poolId") or ""
        if job.get("state") == "active" and allocation.never_started(task) and pool_id not in pools:
            pools[pool_id] = service.pool_allocation(pool_id)[0] if pool_id else None
        if allocation.overdue(job, task, now, pools.get(pool_id)):
            service.terminate(job["id"], allocation.TIMEOUT_REASON)
            error = allocation.capacity_error(pools.get(pool_id)) or {}
            print(f"ended {job['id']}: it waited past its allocation deadline ({allocation.deadline_minutes(job)} "
                  f"minutes) for nodes the pool did not get ({error.get('code')})", file=out)
            ended.append(job["id"])
            wait = float(allocation.SAMPLE_GAP_S)
        else:  # one that a `cancel` (or Batch) ended moments ago after a whole deadline's wait
            wait = max(wait, allocation.gap_left(job, task, now))
    if wait:
        print(f"waiting {wait:.0f} s, so the pool's autoscale sees its queue empty before the new job", file=out,
              flush=True)
        pause(wait)
    return ended


def job_ended_within_gap(job: dict[str, Any], now: datetime) -> bool:
    """Whether a completed job ended less than SAMPLE_GAP_S ago (only those can still hold the formula's window)."""
    end = (job.get("executionInfo") or {}).get("endTime")
    if not end:
        return False
    moment = datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    return (now - moment).total_seconds() < allocation.SAMPLE_GAP_S


def _status(service: BatchService, job: str, job_info: dict[str, Any], task: dict[str, Any],
            node_price_per_hour: float | None = None) -> Status:
    """`node_price_per_hour`: the stack's, to price the shortfall from the size's expected rate. The task's stdout,
    which the efficiency and the attempts are read from, is read once, once the task has run."""
    stdout = (service.read_task_file(job, batch_spec.TASK_ID, "stdout.txt", 0).decode("utf-8", errors="replace")
              if task.get("state") in ("running", DONE) else None)
    execution = task.get("executionInfo") or {}
    pool_id = (job_info.get("poolInfo") or {}).get("poolId")
    unhealthy = tuple(failed_node_line(node, pool_id) for node in service.failed_start_tasks(pool_id)) if pool_id else ()
    return Status(job, job_info.get("state", "?"), task.get("state", "?"), execution.get("exitCode"),
                  int(execution.get("retryCount") or 0), (task.get("nodeInfo") or {}).get("nodeId", ""),
                  str(execution.get("startTime") or ""), str(execution.get("endTime") or ""),
                  _efficiency(stdout, task, node_price_per_hour), unhealthy,
                  cancelled=(job_info.get("executionInfo") or {}).get("terminateReason") == CANCELLED_REASON,
                  attempts=_attempts(stdout))


def _efficiency(stdout: str | None, task: dict[str, Any], node_price_per_hour: float | None) -> str:
    """From rank 0's progress lines in the task's stdout (the run's whole-run line once it is done); "" before the
    task has run (stdout None) or written any."""
    from training import efficiency

    if stdout is None:
        return ""
    nodes = int((task.get("multiInstanceSettings") or {}).get("numberOfInstances") or 1)
    return efficiency.status_text(efficiency.parse_progress(stdout), nodes, node_price_per_hour)


def logs(service: BatchService, job: str, stream: str, follow: bool, out: TextIO,
         sleep: Callable[[float], None] = time.sleep) -> None:
    """Print the task's stdout or stderr; with follow, keep printing what it appends until the task ends. Until the
    task has written anything, what it waits for goes to stderr, once per state (WAITING_FOR)."""
    path, offset, said = f"{stream}.txt", 0, None
    told = False  # the allocation line, said once
    while True:
        task = _task(service, job)  # the state first: text written before completion is then all there
        state = task.get("state")
        data = service.read_task_file(job, batch_spec.TASK_ID, path, offset)
        if not data and not offset and not told and state in ("active", DONE):
            told = True  # why it has written nothing: waiting for nodes, or ended without them
            line = _allocation_line(service, _job(service, job), task, datetime.now(timezone.utc))  # task as read
            if line:
                print(f"logs: job {job}: {line}", file=sys.stderr, flush=True)
        if not data and not offset and state != said:
            print(f"logs: job {job}: no {path} yet; its task is {WAITING_FOR.get(state, state)}"
                  + (" (following: its output appears here)" if follow and state != DONE else ""), file=sys.stderr,
                  flush=True)
            said = state
        if data:
            out.write(data.decode("utf-8", errors="replace"))
            out.flush()
            offset += len(data)
        if not follow or state == DONE:
            return
        sleep(FOLLOW_INTERVAL_S)


def download(outputs_container_url: str, job: str, dest: Path, workers: int = 16) -> str:
    """The job's logs and run folder from the `outputs` container into DEST/JOB (verified, resumable)."""
    from training.data import stage, transfer

    target = transfer.ContainerTarget.parse(outputs_container_url, "outputs container", verb="download")
    with transfer.stopping_cleanly("download", target):
        stats = stage.stage(target, dest / job, f"{job}/", workers, extract=False)
    if stats.files + stats.skipped == 0:
        raise JobError(f"no outputs for {job} yet: Batch uploads them when the task ends (see `python -m infra "
                       "status`)")
    return stats.line("download")


def cancel(service: BatchService, job: str) -> None:
    try:
        # Batch refuses to terminate a completed job (409 JobCompleted): say so rather than relay the refusal.
        if service.get_job(job).get("state") == DONE:
            raise JobError(f"job {job} has already completed; nothing to cancel (`python -m infra status` shows "
                           "how it ended)")
        service.terminate(job)
    except JobNotFound:
        raise JobError(f"job {job} not found") from None


def _attempts(stdout: str | None) -> tuple[str, ...]:
    """Each attempt of the task as the launcher recorded it in the primary's stdout (training/cluster/attempts.py:
    every attempt prints the earlier ones, kept on the share, then its own): how it ended, the node it blamed, the
    node-hours a failure cost. None before the task has run (stdout None)."""
    from training.cluster import attempts

    if stdout is None:
        return ()
    return tuple(attempts.status_lines(stdout))
