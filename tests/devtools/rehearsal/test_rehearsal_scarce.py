"""`rehearse --scarce` (devtools/rehearsal/scarce.py): the job waits on 1 of 2 nodes, `status` says so with the
pool's resizeErrors and node-hours, past the deadline `submit` ends it (AllocationTimeout), `status` says why, the
pool gives its node back, and the late nodes run the next job.

Cheap: `play` against the Batch endpoint in front of the tests' in-memory account (no nodes, no root), through the
real azure-batch client, every answer checked against the vendored REST spec; the rehearsal's own refusals
without starting anything. The whole rehearsal with --scarce (root: the nodes' namespaces; about 1.5 minutes) is
test_rehearsal_scarce_run.py, in `make test-faults`."""
import dataclasses
import io
from datetime import timedelta

import pytest

from devtools.rehearsal import batch_endpoint as rest
from devtools.rehearsal import run, scarce
from infra.backends.batch import allocation, operate
from infra.backends.batch.service import AzureBatch
from tests.devtools.rehearsal.batch_rest_spec import violations
from tests.infra.backends.batch.fake_batch import MemoryAccount, _Token
from tests.infra.backends.batch.test_spec import inputs


@pytest.fixture
def pool_of(monkeypatch):
    """A local Batch endpoint whose pool (2 nodes in the account) stops at `have` of them (ScarceCapacity)."""
    from azure.batch import BatchClient

    def sleep(seconds):
        raise AssertionError(f"slept {seconds} s: play notes submit's wait, it does not sleep it")

    monkeypatch.setattr(operate, "pause", sleep)  # play must put its own in place, and take it away after
    opened = []

    def make(have):
        account = MemoryAccount()
        account.pools["gpu"] = {"id": "gpu", "state": "active", "allocationState": "steady", "enableAutoScale": True,
                                "currentDedicatedNodes": 2, "currentLowPriorityNodes": 0}
        account.nodes["gpu"] = [{"id": f"tvm-{i}", "state": "idle", "isDedicated": True} for i in range(2)]
        capacity = rest.ScarceCapacity(account, have=have, came=account.now())  # the node came before the job
        endpoint = rest.BatchEndpoint(capacity, clock=account.now)
        batch = AzureBatch(endpoint.url, client=BatchClient(endpoint.url, _Token(), connection_verify=endpoint.ca_file))
        opened.append((batch, endpoint))
        return batch, capacity, account, endpoint

    make.sleep = sleep
    yield make
    for batch, endpoint in opened:
        batch.client.close()
        endpoint.close()


def test_the_job_waits_is_ended_at_its_deadline_with_the_reason_and_no_node_is_left(pool_of):
    batch, capacity, account, endpoint = pool_of(have=1)
    spec = dataclasses.replace(inputs(), nodes=2, allocation_timeout_minutes=30)
    job = operate.submit(batch, spec, account.now(), io.StringIO())
    out = io.StringIO()
    played = scarce.play(batch, capacity, spec, job, out)
    assert operate.pause is pool_of.sleep  # play put back the pause it found

    assert played.ended == job and played.job != job
    lines = played.lines
    assert lines[0].startswith("the pool stopped at 1 of 2 node(s) (resizeErrors: AccountCoreQuotaReached: The "
                               f"specified account has reached core quota); job {job} waits"), lines[0]
    # 10 minutes in: the node that came bills; 1 node x 10 minutes (and the second it came before the job)
    assert lines[1].startswith("`status` 10 minutes in: allocation: waiting for 2 node(s), the pool holds 1 (the "
                               "pool's last resize: AccountCoreQuotaReached"), lines[1]
    assert lines[1].endswith("0.2 node-hours billed waiting so far"), lines[1]
    assert "allocation: past its deadline" in lines[2] and "with 1 of 2 node(s)" in lines[2], lines[2]
    assert lines[2].endswith("0.5 node-hours billed waiting (nodes still in the pool)"), lines[2]  # 31 minutes
    assert lines[3] == (f"`submit` 1 minute past the deadline ended {job} and queued {played.job} (its "
                        f"{allocation.SAMPLE_GAP_S} s wait for the autoscale formula's samples not slept: no formula "
                        "here)")
    assert lines[4].startswith("`submit` said: warning: pool gpu holds 0 node(s) and its last resize failed "
                               "(AccountCoreQuotaReached"), lines[4]
    assert lines[5].startswith(f"`status` of {job}: completed; allocation: ended (AllocationTimeout) without its 2 "
                               "node(s) within 30 minutes (the pool's last resize: AccountCoreQuotaReached"), lines[5]
    assert lines[6].endswith("(no node left)")
    assert f"ended {job}: it waited past its allocation deadline (30 minutes)" in out.getvalue()
    assert account.jobs[job]["executionInfo"]["terminateReason"] == allocation.TIMEOUT_REASON

    # the late nodes: the new job's task reached the account (which runs it), within its own deadline
    assert account.tasks[played.job]["multiInstanceSettings"]["numberOfInstances"] == 2 and not capacity.held
    newer = account.jobs[played.job]
    assert allocation._time(newer["creationTime"]) + timedelta(minutes=30) == allocation.deadline(newer)
    assert len(batch.pool_allocation("gpu")[1]) == 2
    assert not violations(endpoint.responses)


def test_a_pool_that_holds_enough_nodes_is_not_played_as_scarce(pool_of):
    batch, capacity, account, endpoint = pool_of(have=2)
    spec = dataclasses.replace(inputs(), nodes=2, allocation_timeout_minutes=30)
    job = operate.submit(batch, spec, account.now(), io.StringIO())
    with pytest.raises(scarce.ScarceNotPlayed, match="the pool holds 2 node.s., enough for the job's 2"):
        scarce.play(batch, capacity, spec, job, io.StringIO())


@pytest.mark.parametrize("flags, said", [
    (["--nodes", "1"], "--scarce: the pool stops one node short of the job, so the job needs --nodes 2 or more"),
    (["--serve"], "--scarce: plays a new rehearsal's job; --serve serves an ended one: leave one of them out"),
])
def test_scarce_refuses_what_it_cannot_play_in_one_line_before_starting(tmp_path, capsys, flags, said):
    work = tmp_path / "work"
    assert run.main(["--scarce", "--work", str(work), *flags]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {said}\n" and not work.exists()
