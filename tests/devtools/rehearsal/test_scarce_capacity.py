"""The rehearsal's Batch endpoint plays a partial allocation (devtools/rehearsal/batch_endpoint.py: ScarceCapacity):
a pool that stopped at 1 of 2 nodes with a resizeErrors entry, read by `status` and `submit` through the real
azure-batch client; the job that waited past its deadline is ended and the node goes back; a second job whose
nodes come late, within its deadline, reaches the account that runs it. Every answer is checked against the
vendored REST spec. Cheap: an in-memory account (tests/infra/backends/batch/fake_batch.py), no nodes."""
import dataclasses
import io
from datetime import timedelta

import pytest

from devtools.rehearsal import batch_endpoint as rest
from infra.backends.batch import allocation, operate
from infra.backends.batch.service import AzureBatch
from tests.devtools.rehearsal.batch_rest_spec import violations
from tests.infra.backends.batch.fake_batch import MemoryAccount, _Token
from tests.infra.backends.batch.test_spec import inputs


@pytest.fixture
def scarce(monkeypatch):
    from azure.batch import BatchClient

    monkeypatch.setattr(operate, "pause", lambda seconds: None)  # submit's minute after ending an overdue job
    account = MemoryAccount()
    account.pools["gpu"] = {"id": "gpu", "state": "active", "allocationState": "steady", "enableAutoScale": True,
                            "currentDedicatedNodes": 2, "currentLowPriorityNodes": 0}
    account.nodes["gpu"] = [{"id": f"tvm-{i}", "state": "idle", "isDedicated": True,
                             "allocationTime": "2026-11-21T12:00:30.000000Z"} for i in range(2)]
    capacity = rest.ScarceCapacity(account, have=1)
    endpoint = rest.BatchEndpoint(capacity, clock=account.now)
    batch = AzureBatch(endpoint.url, client=BatchClient(endpoint.url, _Token(), connection_verify=endpoint.ca_file))
    yield batch, capacity, account, endpoint
    batch.client.close()
    endpoint.close()


def test_a_pool_stopped_at_one_of_two_nodes_is_said_ended_at_its_deadline_and_gives_its_node_back(scarce):
    batch, capacity, account, endpoint = scarce
    spec = dataclasses.replace(inputs(), nodes=2, allocation_timeout_minutes=30)
    job = operate.submit(batch, spec, account.now(), io.StringIO())
    assert job in capacity.held and job not in account.tasks  # Batch holds the 2-node task: 1 node came
    created = allocation._time(account.jobs[job]["creationTime"])

    status = operate.status(batch, job, now=created + timedelta(minutes=10))
    assert status.allocation.startswith("allocation: waiting for 2 node(s), the pool holds 1 (the pool's last "
                                        "resize: AccountCoreQuotaReached: The specified account has reached core "
                                        "quota); deadline"), status.allocation
    assert f"  {status.allocation}" in status.lines()

    # Past the deadline the next submit ends the waiting job (and warns of the quota error); with nothing left
    # waiting the pool gives its node back.
    out = io.StringIO()
    newer = operate.submit(batch, spec, created + timedelta(minutes=31), out)
    assert f"ended {job}: it waited past its allocation deadline (30 minutes)" in out.getvalue()
    # the node went back with the overdue job; the pool's last resize error is still the quota's
    assert "warning: pool gpu holds 0 node(s) and its last resize failed (AccountCoreQuotaReached" in out.getvalue()
    assert account.jobs[job]["executionInfo"]["terminateReason"] == allocation.TIMEOUT_REASON
    assert job not in capacity.held and newer in capacity.held and capacity.have == 0
    ended = operate.status(batch, job, now=created + timedelta(minutes=32))
    assert ended.allocation.startswith("allocation: ended (AllocationTimeout) without its 2 node(s) within 30 "
                                       "minutes (the pool's last resize: AccountCoreQuotaReached"), ended.allocation

    operate.cancel(batch, newer)  # the last waiting job: no node is left in the pool
    assert batch.pool_allocation("gpu")[1] == [] and capacity.pool("gpu")["currentDedicatedNodes"] == 0
    assert not violations(endpoint.responses)


def test_nodes_that_come_late_but_within_the_deadline_run_the_job(scarce):
    batch, capacity, account, endpoint = scarce
    spec = dataclasses.replace(inputs(), nodes=2, allocation_timeout_minutes=30)
    job = operate.submit(batch, spec, account.now(), io.StringIO())
    created = allocation._time(account.jobs[job]["creationTime"])
    capacity.arrive()  # 12 minutes in, the second node comes
    assert account.tasks[job]["multiInstanceSettings"]["numberOfInstances"] == 2 and not capacity.held
    pool, nodes = batch.pool_allocation("gpu")
    assert pool["currentDedicatedNodes"] == 2 and not pool.get("resizeErrors") and len(nodes) == 2
    account.tasks[job].update(state="running", executionInfo={"startTime": account.jobs[job]["creationTime"],
                                                              "retryCount": 0, "requeueCount": 0})
    assert operate.status(batch, job, now=created + timedelta(minutes=12)).allocation == ""
    out = io.StringIO()
    operate.submit(batch, spec, created + timedelta(minutes=40), out)  # a running job is never ended
    assert "ended" not in out.getvalue() and account.jobs[job]["state"] == "active"
    assert not violations(endpoint.responses)
