"""Allocation with a deadline: how long a Batch job waits for all its nodes, what happens after, and the one line
`submit`, `status` and `logs` say about it. Pure functions over the REST JSON (no SDK, no network).

ND-class capacity is scarce: a pool asked for 4 nodes often gets 1-3 and records why in `resizeErrors` (quota:
AccountCoreQuotaReached; capacity: AllocationFailed...). A multi-instance task starts only once all its nodes are
there, so without a deadline the nodes that did come bill idle for as long as the job waits. Batch has no
"wait at most" setting for a task; the deadline is made of three of its documented mechanisms:

1. The pool gives the nodes back (server side, nobody watching): the autoscale formula (give_back_lines) sets the
   target to minNodes once tasks have waited through the whole last `allocationTimeoutMinutes` while none ran.
   Samples are taken every 30 seconds and a formula reads a window of them with GetSample / GetSamplePercent
   (https://learn.microsoft.com/azure/batch/batch-automatic-scaling#obtain-sample-data; the page's own examples
   read 60 minutes back). How much history Batch keeps the page does not say, hence the key's 240-minute cap; with
   less history than the window, GetSamplePercent falls below 70 and nothing is given back (the safe side: the
   job's maxWallClockTime still ends it).
2. Batch ends the job (server side): the job's `constraints.maxWallClockTime` is the deadline plus
   trainingMaxHours, counted from the job's creation; "If the Job does not complete within the time limit, the
   Batch service terminates it and any Tasks that are still running" (BatchJobConstraints, Batch REST spec
   2025-06-01; its executionInfo.terminateReason is then MaxWallClockTimeExpiry). The task's own maxWallClockTime
   (trainingMaxHours) still bounds the training alone, counted from the task's start.
3. Our verbs end it at the deadline: `submit` ends the stack's jobs whose task never started and whose deadline
   has passed (terminateReason TIMEOUT_REASON) before it queues a new one, and waits a minute first so the
   formula's window holds a sample with nothing waiting: otherwise the old job's wait and the new job's would read
   as one, and the new job would find the pool already given back.
   What no verb ends waits at minNodes until (2).

Default deadline: 30 minutes = Batch's own resize timeout for a pool (15 minutes: resizeTimeout, "PT15M" in the
REST spec's Pools_GetPool_Basic example; a resize that has not completed by then stops with AllocationTimedOut),
one evaluation interval of the formula (5 minutes: AUTOSCALE_INTERVAL in cluster.py) before it asks, and ~10
minutes for a node's start task (the node health checks) and the image prefetch. Longer waits (a Spot pool at
night) are the stack's choice, up to 240 minutes.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

DEFAULT_MINUTES = 30
DEADLINE_METADATA = "allocationTimeoutMinutes"  # the job's own deadline, in its metadata (spec.job_spec)
TIMEOUT_REASON = "AllocationTimeout"  # the terminateReason `submit` ends an overdue job with (free text in Job - Terminate)
WALL_CLOCK_REASON = "MaxWallClockTimeExpiry"  # BatchJobExecutionInfo.terminateReason when (2) ended it
# Seconds `submit` waits after ending an overdue job: two 30-second samples, so the formula's window sees the
# queue empty once (see (3) above).
SAMPLE_GAP_S = 60
# Pool resize error codes that mean quota or capacity, not a mistake in the pool (PoolResizeErrorCodes:
# https://learn.microsoft.com/dotnet/api/microsoft.azure.batch.common.poolresizeerrorcodes): the account's core
# quota (dedicated, low-priority, Spot), no capacity for the size, or the resize timeout reached.
CAPACITY_CODES = ("AccountCoreQuotaReached", "AccountLowPriorityCoreQuotaReached", "AccountSpotCoreQuotaReached",
                  "AllocationFailed", "AllocationTimedOut", "OverconstrainedAllocationRequestError")


def job_wall_clock(allocation_minutes: int, max_hours: int) -> str:
    """The job's maxWallClockTime (ISO 8601 duration): wait for the nodes plus train."""
    hours, minutes = divmod(allocation_minutes, 60)
    return f"PT{max_hours + hours}H{minutes}M" if minutes else f"PT{max_hours + hours}H"


def give_back_lines(minutes: int, min_nodes: int) -> list[str]:
    """Autoscale statements after `$target` is computed: back to `min_nodes` once tasks have waited through the whole
    last `minutes` (the smallest sample of the window above 0) while none ran (the largest is 0). With too few
    samples (under 70% of the window, as a newly created pool has) nothing is given back: a wait is only cut short
    on evidence. Ternaries and comparisons on doubles are the formula's own operations (batch-automatic-scaling,
    "Operations"); tests/infra/backends/batch/test_allocation.py runs these lines with the formula evaluator of
    test_cluster.py."""
    window = f"TimeInterval_Minute * {minutes}"
    return [
        f"$waitedAll = $ActiveTasks.GetSamplePercent({window}) < 70 ? 0 : min($ActiveTasks.GetSample({window}));",
        f"$ranAny = $RunningTasks.GetSamplePercent({window}) < 70 ? 1 : max($RunningTasks.GetSample({window}));",
        f"$target = $waitedAll > 0 ? ($ranAny > 0 ? $target : {min_nodes}) : $target;",
    ]


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def deadline_minutes(job: dict[str, Any]) -> int | None:
    for item in job.get("metadata") or ():
        if item.get("name") == DEADLINE_METADATA:
            return int(item.get("value") or 0) or None
    return None  # a job submitted before the deadline existed


def deadline(job: dict[str, Any]) -> datetime | None:
    minutes, created = deadline_minutes(job), _time(job.get("creationTime"))
    return created + timedelta(minutes=minutes) if minutes and created else None


def never_started(task: dict[str, Any]) -> bool:
    """The task has not run on its nodes (BatchTaskExecutionInfo.startTime is set once it starts)."""
    return not (task.get("executionInfo") or {}).get("startTime")


def overdue(job: dict[str, Any], task: dict[str, Any], now: datetime) -> bool:
    """An active job whose task still waits for its nodes past the job's deadline."""
    end = deadline(job)
    return job.get("state") == "active" and never_started(task) and end is not None and now >= end


def gap_left(job: dict[str, Any], task: dict[str, Any], now: datetime) -> float:
    """Seconds of SAMPLE_GAP_S still to wait after `job` ended (a `cancel`, the deadline) having waited a whole
    deadline without starting: the formula may still hold the pool at minNodes for it; 0 otherwise."""
    execution, end = job.get("executionInfo") or {}, deadline(job)
    ended = _time(execution.get("endTime"))
    if job.get("state") != "completed" or not never_started(task) or end is None or ended is None or ended < end:
        return 0.0
    return max(0.0, SAMPLE_GAP_S - (now - ended).total_seconds())


def resize_error(pool: dict[str, Any] | None) -> str:
    """The pool's first resize error as "CODE: message" (ResizeError: code, message, values), or ""."""
    errors = (pool or {}).get("resizeErrors") or []
    if not errors:
        return ""
    first = errors[0]
    return ": ".join(str(part) for part in (first.get("code"), first.get("message")) if part)


def capacity_warning(pool: dict[str, Any] | None, nodes: int) -> str | None:
    """What `submit` says when the pool's last resize failed for quota or capacity: the job may wait out its deadline."""
    errors = [e for e in (pool or {}).get("resizeErrors") or [] if e.get("code") in CAPACITY_CODES]
    if not errors:
        return None
    have = int(pool.get("currentDedicatedNodes") or 0) + int(pool.get("currentLowPriorityNodes") or 0)
    return (f"warning: pool {pool.get('id', '?')} holds {have} node(s) and its last resize failed "
            f"({errors[0].get('code')}: {errors[0].get('message', '')}); a job of {nodes} node(s) may wait out its "
            "allocation deadline: ask for fewer nodes, or for quota (docs/deploying.md, \"Capacity\")")


def waited_node_hours(nodes: list[dict[str, Any]], since: datetime, until: datetime) -> float:
    """Node-hours the pool's nodes billed between `since` (the job's creation) and `until` (now, or the job's end),
    counted from each node's allocationTime (BatchNode); a preempted Spot node no longer bills
    (https://learn.microsoft.com/azure/batch/batch-spot-vms). Only the nodes still in the pool are seen: once given
    back, their hours are no longer readable from Batch."""
    total = 0.0
    for node in nodes:
        allocated = _time(node.get("allocationTime"))
        if allocated is None or node.get("state") == "preempted":
            continue
        start = max(allocated, since)
        if until > start:
            total += (until - start).total_seconds() / 3600
    return total


def allocation_line(job: dict[str, Any], task: dict[str, Any], pool: dict[str, Any] | None,
                    nodes: list[dict[str, Any]], now: datetime) -> str:
    """One line on a job whose task has not started on its nodes; "" once it has (or for a job without a deadline)."""
    minutes, created, end = deadline_minutes(job), _time(job.get("creationTime")), deadline(job)
    if not never_started(task) or minutes is None or created is None or end is None:
        return ""
    wanted = int((task.get("multiInstanceSettings") or {}).get("numberOfInstances") or 1)
    pool = pool or {}
    have = int(pool.get("currentDedicatedNodes") or 0) + int(pool.get("currentLowPriorityNodes") or 0)
    why = resize_error(pool)
    why_text = f" (the pool's last resize: {why})" if why else ""
    execution = job.get("executionInfo") or {}
    if job.get("state") == "active":
        hours = waited_node_hours(nodes, created, now)
        if now < end:
            return (f"allocation: waiting for {wanted} node(s), the pool holds {have}{why_text}; deadline "
                    f"{end:%Y-%m-%d %H:%M} UTC (allocationTimeoutMinutes {minutes}); {hours:.1f} node-hours billed "
                    "waiting so far")
        return (f"allocation: past its deadline ({end:%Y-%m-%d %H:%M} UTC, {minutes} minutes) with {have} of "
                f"{wanted} node(s){why_text}: the pool gives its nodes back; the next submit ends the job (or "
                f"`cancel` it); {hours:.1f} node-hours billed waiting (nodes still in the pool)")
    reason = execution.get("terminateReason")
    if reason not in (TIMEOUT_REASON, WALL_CLOCK_REASON):
        return ""
    ended = _time(execution.get("endTime")) or now
    hours = waited_node_hours(nodes, created, ended)
    return (f"allocation: ended ({reason}) without its {wanted} node(s) within {minutes} minutes{why_text}; "
            f"{hours:.1f} node-hours billed waiting (nodes still in the pool)")
