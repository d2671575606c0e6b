"""AzureBatch.pool_nodes (what `teams --live` shows as a Batch stack's nodes now) through the real azure-batch
client against the local Batch endpoint: Pools - Get's currentDedicatedNodes and currentLowPriorityNodes, and the
pool's 404 and the account's 403 each as one line."""
import pytest

from infra.backends.shared import JobError, ServiceRefused


def test_counts_dedicated_and_low_priority_nodes_of_the_pool(batch):
    batch.account.pools["gpu"] = {"id": "gpu", "state": "active", "allocationState": "resizing",
                                  "currentDedicatedNodes": 2, "currentLowPriorityNodes": 1,
                                  "targetDedicatedNodes": 4, "targetLowPriorityNodes": 1}
    batch.account.nodes["gpu"] = [{"id": "tvmps_s1", "state": "starting", "isDedicated": False}]
    assert batch.pool_nodes("gpu") == (2, 1)  # what the pool holds now, not what it is resizing to
    assert batch.requests == [("GET", "/pools/gpu", ""), ("GET", "/pools/gpu/nodes", "")]


def test_preempted_spot_nodes_are_not_counted_as_they_no_longer_bill(batch):
    """currentLowPriorityNodes includes preempted Spot nodes (BatchPool in the REST spec); Nodes - List says which."""
    from tests.devtools.rehearsal.batch_rest_spec import violations

    batch.account.pools["gpu"] = {"id": "gpu", "state": "active", "allocationState": "steady",
                                  "currentDedicatedNodes": 1, "currentLowPriorityNodes": 3,
                                  "targetDedicatedNodes": 1, "targetLowPriorityNodes": 3}
    batch.account.nodes["gpu"] = [
        {"id": "tvmps_d1", "state": "running", "isDedicated": True},
        {"id": "tvmps_s1", "state": "running", "isDedicated": False},
        {"id": "tvmps_s2", "state": "preempted", "isDedicated": False},
        {"id": "tvmps_s3", "state": "preempted", "isDedicated": False}]
    assert batch.pool_nodes("gpu") == (1, 1)
    assert batch.requests == [("GET", "/pools/gpu", ""), ("GET", "/pools/gpu/nodes", "")]
    assert not violations(batch.endpoint.responses)


def test_a_missing_pool_and_a_refusal_are_one_line(batch):
    with pytest.raises(JobError, match=r"^the Batch account has no pool gpu \(deleted outside Pulumi\?"):
        batch.pool_nodes("gpu")
    batch.endpoint.refuse = (403, "AuthorizationFailure", "This request is not authorized to perform this operation.")
    with pytest.raises(ServiceRefused, match=r"^the Batch account refused reading pool gpu \(403 "
                                             r"AuthorizationFailure\): this machine's address"):
        batch.pool_nodes("gpu")
