"""Allocation with a deadline (infra/backends/batch/allocation.py): the job's bound, the autoscale formula's
give-back run by the formula evaluator of test_cluster.py, and, at the wire, a pool that stopped at 1 of 2 nodes
with a resizeErrors entry, read by status, logs and submit through the real azure-batch client against the local
Batch endpoint (tests/infra/backends/batch/fake_batch.py), every answer checked against the vendored REST spec."""
import dataclasses
import io
from datetime import datetime, timedelta

import pytest

from infra.backends.batch import allocation, operate
from infra.backends.batch import spec as batch_spec
from tests.infra.backends.batch.test_cluster import Interval, Samples, evaluate_formula
from tests.infra.backends.batch.test_spec import inputs

QUOTA = {"code": "AccountCoreQuotaReached", "message": "The specified account has reached core quota",
         "values": [{"name": "Reason", "value": "The Batch account's dedicated core quota for the VM family is 96"}]}


def test_the_job_is_bounded_by_its_wait_plus_training_and_carries_its_deadline():
    spec = dataclasses.replace(inputs(), allocation_timeout_minutes=30, max_hours=24, retries=3)
    job = batch_spec.job_spec(spec, "j")
    # The wait once, then the first try and its 3 retries of 24 hours each (a retry starts the task's clock again).
    assert job["constraints"] == {"maxWallClockTime": "PT96H30M"}
    assert {"name": "allocationTimeoutMinutes", "value": "30"} in job["metadata"]
    assert batch_spec.task_spec(spec, "j")["constraints"]["maxWallClockTime"] == "PT24H"  # each try alone
    assert allocation.job_wall_clock(90, 1) == "PT2H30M" and allocation.job_wall_clock(60, 2) == "PT3H"
    assert allocation.job_wall_clock(30, 2, retries=1) == "PT4H30M"
    assert allocation.job_wall_clock(30, 2, retries=-1) == "PT2H30M"  # unlimited retries: no bound to add


class Window(Samples):
    """A metric sampled every 30 seconds, newest first: GetSample(interval) gives the samples inside it."""

    def GetSample(self, arg):  # noqa: N802 - Batch's name
        return self.values[:int(float(arg) // 30)] if isinstance(arg, Interval) else self.values[:int(arg)]


def pool_target(min_nodes, active, running, current, minutes=30):
    formula = batch_spec.autoscale_formula(min_nodes, 8, False, minutes)
    env = evaluate_formula(formula, **{"$ActiveTasks": active, "$RunningTasks": running,
                                       "$PendingTasks": active, "$CurrentDedicatedNodes": float(current),
                                       "$CurrentLowPriorityNodes": 0.0})
    return env["$TargetDedicatedNodes"]


@pytest.mark.parametrize("min_nodes", [0, 1])
def test_a_pool_that_let_a_job_wait_its_whole_deadline_gives_its_nodes_back(min_nodes):
    """1 of 2 nodes came; the 2-node task waited all 30 minutes (60 samples), nothing ran: back to minNodes."""
    assert pool_target(min_nodes, Window(*[2] * 60), Window(*[0] * 60), current=1) == min_nodes


@pytest.mark.parametrize("active,running,why", [
    (Window(*[2] * 40, *[0] * 20), Window(*[0] * 60), "queued 20 minutes ago: still within its deadline"),
    (Window(*[2] * 60), Window(*[0] * 50, 1, *[0] * 9), "a job ran within the window (an eviction's requeue)"),
    (Window(*[2] * 60, percent=50), Window(*[0] * 60, percent=50), "too few samples (a new pool): no evidence"),
    # The overdue job was ended and a new one queued: the minute submit waits left one empty sample.
    (Window(*[2] * 30, 0, *[2] * 29), Window(*[0] * 60), "a new job after the overdue one ended"),
])
def test_the_pool_keeps_asking_while_the_wait_is_not_a_whole_deadline(active, running, why):
    assert pool_target(0, active, running, current=1) == 2, why


def test_the_formula_gives_nothing_back_without_a_deadline():
    assert "$waitedAll" not in batch_spec.autoscale_formula(0, 8)


# --- At the wire: a pool that stopped at 1 of 2 nodes ---------------------------------------------------------

def stalled_pool(batch, created: datetime) -> None:
    """Pools - Get after a resize that stopped at 1 of 2 nodes (allocationState steady, resizeErrors), and the one
    node, allocated two minutes after the job was created (Nodes - List)."""
    batch.account.pools["gpu"] = {"id": "gpu", "state": "active", "allocationState": "steady",
                                  "currentDedicatedNodes": 1, "currentLowPriorityNodes": 0,
                                  "targetDedicatedNodes": 2, "targetLowPriorityNodes": 0,
                                  "enableAutoScale": True, "resizeErrors": [QUOTA]}
    batch.account.nodes["gpu"] = [{"id": "tvmps_1", "state": "idle", "isDedicated": True,
                                   "allocationTime": allocation._time(created + timedelta(minutes=2)).isoformat()
                                   .replace("+00:00", "Z")}]


def test_status_logs_and_submit_on_a_pool_stopped_at_one_of_two_nodes(batch, pauses, capsys):
    from tests.devtools.rehearsal.batch_rest_spec import violations

    spec = dataclasses.replace(inputs(), nodes=2, allocation_timeout_minutes=30)
    job = operate.submit(batch, spec, datetime(2026, 11, 21, 12, 0), io.StringIO())
    created = allocation._time(batch.jobs[job]["creationTime"])
    stalled_pool(batch, created)

    waiting = operate.status(batch, job, now=created + timedelta(minutes=12))
    assert waiting.allocation == (
        "allocation: waiting for 2 node(s), the pool holds 1 (the pool's last resize: AccountCoreQuotaReached: The "
        f"specified account has reached core quota); deadline {created + timedelta(minutes=30):%Y-%m-%d %H:%M} UTC "
        "(allocationTimeoutMinutes 30); 0.2 node-hours billed waiting so far")
    assert f"  {waiting.allocation}" in waiting.lines()

    past = operate.status(batch, job, now=created + timedelta(minutes=62))
    assert past.allocation.startswith("allocation: past its deadline") and "with 1 of 2 node(s)" in past.allocation
    assert "AccountCoreQuotaReached" in past.allocation and "1.0 node-hours billed waiting" in past.allocation

    # The next submit warns of the quota error and ends the overdue job before queuing its own, then waits a
    # minute so the formula's window sees the queue empty.
    out = io.StringIO()
    newer = operate.submit(batch, spec, created + timedelta(minutes=62), out)
    said = out.getvalue()
    assert f"ended {job}: it waited past its allocation deadline (30 minutes)" in said
    assert "warning: pool gpu holds 1 node(s) and its last resize failed (AccountCoreQuotaReached: " in said
    assert pauses == [allocation.SAMPLE_GAP_S] and batch.jobs[newer]["state"] == "active"
    assert ("POST", f"/jobs/{job}/terminate", "") in batch.requests
    assert batch.jobs[job]["executionInfo"]["terminateReason"] == allocation.TIMEOUT_REASON

    ended = operate.status(batch, job, now=created + timedelta(minutes=70))
    assert ended.allocation.startswith("allocation: ended (AllocationTimeout) without its 2 node(s) within 30 "
                                       "minutes (the pool's last resize: AccountCoreQuotaReached")
    capsys.readouterr()
    operate.logs(batch, job, "stdout", False, io.StringIO())
    said = [line for line in capsys.readouterr().err.splitlines() if "allocation:" in line]
    assert len(said) == 1 and said[0].startswith(f"logs: job {job}: allocation: ended (AllocationTimeout)")
    assert not violations(batch.endpoint.responses)


def test_a_started_job_says_nothing_of_allocation_and_is_never_ended_by_submit(batch, pauses):
    spec = dataclasses.replace(inputs(), nodes=2)
    job = operate.submit(batch, spec, datetime(2026, 11, 21, 12, 0), io.StringIO())
    created = allocation._time(batch.jobs[job]["creationTime"])
    stalled_pool(batch, created)
    batch.tasks[job].update(state="running", executionInfo={"startTime": batch.jobs[job]["creationTime"],
                                                            "retryCount": 0, "requeueCount": 0})
    assert operate.status(batch, job, now=created + timedelta(hours=3)).allocation == ""
    operate.submit(batch, spec, created + timedelta(hours=3), io.StringIO())
    assert batch.jobs[job]["state"] == "active" and pauses == []


def test_a_pool_without_resize_errors_gives_no_warning():
    pool = {"id": "gpu", "currentDedicatedNodes": 2, "resizeErrors": []}
    assert allocation.capacity_warning(pool, 2) is None and allocation.capacity_warning(None, 2) is None
    other = {**pool, "resizeErrors": [{"code": "DiskEncryptionFailure", "message": "m"}]}
    assert allocation.capacity_warning(other, 2) is None  # a pool mistake, not capacity: status names it


# The pool allocation mode (batchPoolAllocation): test_user_subscription.py.


def test_a_submit_right_after_a_waited_out_job_was_cancelled_waits_out_the_sample_gap(batch, pauses):
    """`cancel` of a job that waited its whole deadline, then `submit` 20 s later: the formula's window has no empty
    sample yet, so submit waits the rest of SAMPLE_GAP_S; after it, or after a job that ran, it does not."""
    spec = dataclasses.replace(inputs(), nodes=2, allocation_timeout_minutes=30)
    job = operate.submit(batch, spec, datetime(2026, 11, 21, 12, 0), io.StringIO())
    created = allocation._time(batch.jobs[job]["creationTime"])
    cancelled = created + timedelta(minutes=40)
    batch.jobs[job].update(state="completed", executionInfo={**batch.jobs[job]["executionInfo"],
                                                             "endTime": cancelled.isoformat().replace("+00:00", "Z"),
                                                             "terminateReason": "UserTerminate"})
    out = io.StringIO()
    newer = operate.submit(batch, spec, cancelled + timedelta(seconds=20), out)
    assert pauses == [allocation.SAMPLE_GAP_S - 20.0] and "waiting 70 s" in out.getvalue()
    batch.tasks[newer].update(state="running", executionInfo={"startTime": batch.jobs[newer]["creationTime"],
                                                              "retryCount": 0, "requeueCount": 0})
    operate.submit(batch, spec, cancelled + timedelta(seconds=allocation.SAMPLE_GAP_S + 30), io.StringIO())
    assert pauses == [allocation.SAMPLE_GAP_S - 20.0]
