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
2. Batch ends the job (server side): the job's `constraints.maxWallClockTime` is the deadline plus every try's
   trainingMaxHours, counted from the job's creation; "If the Job does not complete within the time limit, the Batch
   service terminates it and any Tasks that are still running" (BatchJobConstraints, Batch REST spec
   2025-06-01; its executionInfo.terminateReason is then MaxWallClockTimeExpiry). The task's own maxWallClockTime
   (trainingMaxHours) still bounds the training alone, counted from the task's start.
3. Our verbs end it at the deadline: `submit` ends the stack's jobs whose task never ran, whose deadline has passed
   AND whose pool's last resize failed for quota or capacity (CAPACITY_CODES) before it queues a new one
   (terminateReason TIMEOUT_REASON), and waits SAMPLE_GAP_S first so the formula's window holds a sample with nothing
   waiting: otherwise the old job's wait and the new job's would read as one, and the new job would find the pool
   already given back. What no verb ends waits at minNodes until (2).

Which waits a deadline ends (status says which case a job is in, allocation_line):
- A task that ran before and waits again is resuming, never ended: a Spot eviction requeues it and a node fault
  retries it, and then it is `active` with no startTime ("This property is present only for Tasks that are in the
  running or completed state", BatchTaskExecutionInfo.startTime, Batch REST spec 2025-06-01). What still shows it ran:
  retryCount/lastRetryTime (a retry), requeueCount/lastRequeueTime (a requeue "as the result of a user request": pool
  shrink, job disable), and the task's own previousState, which "is not set if the Task is in its initial Active
  state" (BatchTask.previousState): a requeue after a preemption, on which the counters' descriptions are silent,
  leaves an active task whose previous state is running. ran_before reads all of them.
- A job queued behind a running one (the pool at maxNodes, no resize error) is waiting its turn, not for capacity:
  its nodes are not idle-billing for it, so it is never ended; only a wait that coincides with a quota or capacity
  error in the pool's resizeErrors is.

The job's maxWallClockTime covers its wait for nodes once plus every try of its task: the deadline plus (1 +
maxTaskRetryCount) x trainingMaxHours (job_wall_clock), since the task's own bound is counted "from the time the Task
starts" and a retry starts again (BatchTaskConstraints.maxWallClockTime; startTime "If the Task has been restarted or
retried, this is the most recent time"). Queueing behind other jobs longer than that is not covered: Batch then ends
the job with MaxWallClockTimeExpiry and status says so.

Default deadline: 30 minutes. Batch's resizeTimeout does not bound an autoscale pool ("This timeout applies only to
manual scaling; it has no effect when enableAutoScale is set to true", BatchPool.resizeTimeout in the REST spec), and
the docs give no bound for how long an autoscale resize may seek nodes, so the figure is ours: one evaluation interval
of the formula (5 minutes: AUTOSCALE_INTERVAL in cluster.py) before it asks, ~15 minutes for the nodes to be
allocated and boot, and ~10 minutes for a node's start task (the node health checks) and the image prefetch. Longer
waits (a Spot pool at night) are the stack's choice, up to 240 minutes.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

DEFAULT_MINUTES = 30
DEADLINE_METADATA = "allocationTimeoutMinutes"  # the job's own deadline, in its metadata (spec.job_spec)
TIMEOUT_REASON = "AllocationTimeout"  # the terminateReason `submit` ends an overdue job with (free text in Job - Terminate)
WALL_CLOCK_REASON = "MaxWallClockTimeExpiry"  # BatchJobExecutionInfo.terminateReason when (2) ended it
# Seconds `submit` waits after ending an overdue job, so the formula's window holds a sample with the queue empty
# (see (3) above): samples "are recorded every 30 seconds", "samples may not be recorded for a particular interval",
# and "It takes approximately one minute for samples to propagate through the system"
# (https://learn.microsoft.com/azure/batch/batch-automatic-scaling, "Samples"): three sample periods, so one
# missing sample still leaves two, where 60 s (two) left no margin.
SAMPLE_GAP_S = 90
# Pool resize error codes that mean quota or capacity, not a mistake in the pool (PoolResizeErrorCodes:
# https://learn.microsoft.com/dotnet/api/microsoft.azure.batch.common.poolresizeerrorcodes): the account's core
# quota (dedicated, low-priority, Spot), no capacity for the size, or the resize timeout reached; and the per-VM-family
# dedicated quota, the one a GPU pool meets first (a new account's ND families start at 0), which that class does not
# list: AccountVMSeriesCoreQuotaReached ("The specified account has reached VM series core quota for <family>",
# https://learn.microsoft.com/troubleshoot/azure/hpc/batch/azure-batch-pool-resizing-failure, Scenario 3).
CAPACITY_CODES = ("AccountCoreQuotaReached", "AccountLowPriorityCoreQuotaReached", "AccountSpotCoreQuotaReached",
                  "AccountVMSeriesCoreQuotaReached", "AllocationFailed", "AllocationTimedOut",
                  "OverconstrainedAllocationRequestError")


def job_wall_clock(allocation_minutes: int, max_hours: int, retries: int = 0) -> str:
    """The job's maxWallClockTime (ISO 8601 duration): wait for the nodes once, plus train on every try (the first
    and `retries` more, maxTaskRetryCount; -1, unlimited, counts as one)."""
    hours, minutes = divmod(allocation_minutes, 60)
    hours += max_hours * (1 + max(0, retries))
    return f"PT{hours}H{minutes}M" if minutes else f"PT{hours}H"


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


def ran_before(task: dict[str, Any]) -> str:
    """How the task shows it has run on nodes ("" if it has not): running or completed (startTime), retried, requeued,
    or back in the queue after running (previousState); the module docstring gives the REST spec's words for each."""
    execution = task.get("executionInfo") or {}
    if execution.get("startTime"):
        return "started"
    retries, requeues = int(execution.get("retryCount") or 0), int(execution.get("requeueCount") or 0)
    if retries or execution.get("lastRetryTime"):
        return f"retried {retries} time(s)"
    if requeues or execution.get("lastRequeueTime"):
        return f"requeued {requeues} time(s)"
    if task.get("previousState") in ("preparing", "running", "completed"):
        return f"back in the queue after {task['previousState']} (a Spot eviction or a node's recovery)"
    return ""


def never_started(task: dict[str, Any]) -> bool:
    """The task has never run on its nodes (ran_before)."""
    return not ran_before(task)


def capacity_error(pool: dict[str, Any] | None) -> dict[str, Any] | None:
    """The pool's first resize error that means quota or capacity (CAPACITY_CODES), or None."""
    return next((e for e in (pool or {}).get("resizeErrors") or [] if e.get("code") in CAPACITY_CODES), None)


def overdue(job: dict[str, Any], task: dict[str, Any], now: datetime, pool: dict[str, Any] | None = None) -> bool:
    """An active job whose task never ran, past the job's deadline, on a pool whose last resize failed for quota or
    capacity: only such a wait is ended (a job queued behind another, or a resuming one, is not)."""
    end = deadline(job)
    return (job.get("state") == "active" and never_started(task) and end is not None and now >= end
            and capacity_error(pool) is not None)


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
    error = capacity_error(pool)
    if error is None:
        return None
    have = int(pool.get("currentDedicatedNodes") or 0) + int(pool.get("currentLowPriorityNodes") or 0)
    return (f"warning: pool {pool.get('id', '?')} holds {have} node(s) and its last resize failed "
            f"({error.get('code')}: {error.get('message', '')}); a job of {nodes} node(s) may wait out its "
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
    """One line on a job whose task waits for its nodes, naming its case (waiting within its deadline; past it for
    capacity, which the next submit ends; past it queued behind others, which nothing ends; resuming after a requeue or
    a retry), or why it ended without them; "" once it runs (or for a job without a deadline)."""
    minutes, created, end = deadline_minutes(job), _time(job.get("creationTime")), deadline(job)
    if minutes is None or created is None or end is None:
        return ""
    wanted = int((task.get("multiInstanceSettings") or {}).get("numberOfInstances") or 1)
    pool = pool or {}
    have = int(pool.get("currentDedicatedNodes") or 0) + int(pool.get("currentLowPriorityNodes") or 0)
    why = resize_error(pool)
    why_text = f" (the pool's last resize: {why})" if why else ""
    execution = job.get("executionInfo") or {}
    ran = ran_before(task)
    if job.get("state") == "active" and task.get("state") == "active" and ran:
        return (f"allocation: resuming: its task ran before ({ran}) and waits for {wanted} node(s) again, the pool "
                f"holds {have}{why_text}; no allocation deadline ends a resuming job (the job's maxWallClockTime "
                "still bounds it)")
    if ran:
        return ""
    if job.get("state") == "active":
        hours = waited_node_hours(nodes, created, now)
        if now < end:
            return (f"allocation: waiting for {wanted} node(s), the pool holds {have}{why_text}; deadline "
                    f"{end:%Y-%m-%d %H:%M} UTC (allocationTimeoutMinutes {minutes}); {hours:.1f} node-hours billed "
                    "waiting so far")
        if capacity_error(pool) is None:
            return (f"allocation: queued past its deadline ({end:%Y-%m-%d %H:%M} UTC, {minutes} minutes) with {have} "
                    f"of {wanted} node(s), but the pool reports no quota or capacity error{why_text}: it waits its "
                    "turn behind the pool's other work (maxNodes reached, or nodes busy), so no submit ends it; "
                    "`cancel` it to stop waiting")
        return (f"allocation: past its deadline ({end:%Y-%m-%d %H:%M} UTC, {minutes} minutes) with {have} of "
                f"{wanted} node(s){why_text}: a wait for capacity, so the pool gives its nodes back once nothing has "
                f"run for the whole deadline, and the next submit ends the job (or `cancel` it); {hours:.1f} "
                "node-hours billed waiting (nodes still in the pool)")
    reason = execution.get("terminateReason")
    if reason not in (TIMEOUT_REASON, WALL_CLOCK_REASON):
        return ""
    ended = _time(execution.get("endTime")) or now
    hours = waited_node_hours(nodes, created, ended)
    return (f"allocation: ended ({reason}) without its {wanted} node(s) within {minutes} minutes{why_text}; "
            f"{hours:.1f} node-hours billed waiting (nodes still in the pool)")
