"""Which waits the allocation deadline ends (infra/backends/batch/allocation.py): a task that ran and waits again after
a retry or a requeue (no startTime then: "present only for Tasks that are in the running or completed state", Batch
REST spec 2025-06-01) is resuming, and a job queued behind another on a pool with no quota or capacity error is
waiting its turn: neither is ended by `submit`, and `status` names each case. Read through the real azure-batch
client against the local Batch endpoint (tests/infra/backends/batch/fake_batch.py), every answer checked against the
vendored REST spec."""
import dataclasses
import io
from datetime import timedelta

import pytest

from infra.backends.batch import allocation, operate
from tests.infra.backends.batch.test_allocation import QUOTA, stalled_pool
from tests.infra.backends.batch.test_spec import inputs

SERIES_QUOTA = {"code": "AccountVMSeriesCoreQuotaReached",
                "message": "The specified account has reached VM series core quota for standardNDASv4Family"}
SPEC = dataclasses.replace(inputs(), nodes=2, allocation_timeout_minutes=30)


def submitted(batch):
    """A 2-node job submitted on a pool stopped at 1 of 2 nodes for quota; (job ID, its creation time)."""
    from datetime import datetime

    job = operate.submit(batch, SPEC, datetime(2026, 11, 21, 12, 0), io.StringIO())
    created = allocation._time(batch.jobs[job]["creationTime"])
    stalled_pool(batch, created)
    return job, created


# What Batch shows of a task that ran and is back in the queue (BatchTask, BatchTaskExecutionInfo): after a retry
# (retryCount, lastRetryTime), after a requeue by a user request (requeueCount, lastRequeueTime), and after a Spot
# eviction, on which the counters' descriptions are silent: then only previousState (not set "if the Task is in its
# initial Active state") shows it ran.
RESUMING = {
    "retried": {"state": "active", "previousState": "running",
                "executionInfo": {"retryCount": 1, "requeueCount": 0, "lastRetryTime": "2026-11-21T12:40:00Z"}},
    "requeued": {"state": "active", "previousState": "running",
                 "executionInfo": {"retryCount": 0, "requeueCount": 1, "lastRequeueTime": "2026-11-21T12:40:00Z"}},
    "evicted": {"state": "active", "previousState": "running", "previousStateTransitionTime": "2026-11-21T12:05:00Z",
                "executionInfo": {"retryCount": 0, "requeueCount": 0}},
}


@pytest.mark.parametrize("case", sorted(RESUMING))
def test_a_resuming_job_is_never_ended_by_the_deadline_and_status_says_it_resumes(batch, pauses, case):
    from tests.devtools.rehearsal.batch_rest_spec import violations

    job, created = submitted(batch)
    batch.tasks[job].update(RESUMING[case])
    later = created + timedelta(minutes=62)  # past the 30-minute deadline, the pool short for quota
    said = operate.status(batch, job, now=later).allocation
    assert said.startswith("allocation: resuming: its task ran before (") and "no allocation deadline ends" in said
    out = io.StringIO()
    operate.submit(batch, SPEC, later, out)
    assert batch.jobs[job]["state"] == "active", out.getvalue()
    assert "ended" not in out.getvalue() and pauses == []
    assert ("POST", f"/jobs/{job}/terminate", "") not in batch.requests
    assert not violations(batch.endpoint.responses)


def test_a_job_queued_behind_a_running_one_is_not_ended_and_status_says_it_waits_its_turn(batch, pauses):
    """The pool at its maxNodes running another job: no resize error, so the wait is for a turn, not capacity."""
    job, created = submitted(batch)
    pool = batch.account.pools["gpu"]
    pool.update(resizeErrors=[], currentDedicatedNodes=2, targetDedicatedNodes=2)
    later = created + timedelta(minutes=62)
    said = operate.status(batch, job, now=later).allocation
    assert said.startswith("allocation: queued past its deadline") and "no submit ends it" in said
    assert "gives its nodes back" not in said
    out = io.StringIO()
    operate.submit(batch, SPEC, later, out)
    assert batch.jobs[job]["state"] == "active" and "ended" not in out.getvalue() and pauses == []


@pytest.mark.parametrize("error", [QUOTA, SERIES_QUOTA], ids=["account quota", "VM series quota"])
def test_a_never_started_job_waiting_for_capacity_past_its_deadline_is_ended(batch, pauses, error):
    job, created = submitted(batch)
    batch.account.pools["gpu"]["resizeErrors"] = [error]
    later = created + timedelta(minutes=62)
    said = operate.status(batch, job, now=later).allocation
    assert said.startswith("allocation: past its deadline") and "a wait for capacity" in said and error["code"] in said
    out = io.StringIO()
    operate.submit(batch, SPEC, later, out)
    assert f"ended {job}: it waited past its allocation deadline (30 minutes)" in out.getvalue()
    assert f"({error['code']})" in out.getvalue() and pauses == [allocation.SAMPLE_GAP_S]
    assert f"warning: pool gpu holds 1 node(s) and its last resize failed ({error['code']}: " in out.getvalue()


def test_the_per_family_quota_error_is_a_capacity_code():
    pool = {"id": "gpu", "currentDedicatedNodes": 0, "resizeErrors": [SERIES_QUOTA]}
    assert allocation.capacity_error(pool) == SERIES_QUOTA
    assert "AccountVMSeriesCoreQuotaReached" in allocation.capacity_warning(pool, 2)


def test_a_task_in_its_initial_active_state_never_ran():
    assert allocation.ran_before({"state": "active", "executionInfo": {"retryCount": 0, "requeueCount": 0}}) == ""
    assert allocation.ran_before({"state": "running", "executionInfo": {"startTime": "2026-11-21T12:00:00Z"}})
    assert allocation.ran_before(RESUMING["evicted"]).startswith("back in the queue after running")
