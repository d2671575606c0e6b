"""AzureBatch.pool_nodes (what `teams --live` shows as a Batch stack's nodes now) through the real azure-batch
client against the local Batch endpoint: Pools - Get's currentDedicatedNodes and currentLowPriorityNodes, and the
pool's 404 and the account's 403 each as one line."""
import pytest

from infra.backends.shared import JobError, ServiceRefused


def test_counts_dedicated_and_low_priority_nodes_of_the_pool(batch):
    batch.account.pools["gpu"] = {"id": "gpu", "state": "active", "allocationState": "resizing",
                                  "currentDedicatedNodes": 2, "currentLowPriorityNodes": 1,
                                  "targetDedicatedNodes": 4, "targetLowPriorityNodes": 1}
    assert batch.pool_nodes("gpu") == (2, 1)  # what the pool holds now, not what it is resizing to
    assert batch.requests == [("GET", "/pools/gpu", "")]


def test_a_missing_pool_and_a_refusal_are_one_line(batch):
    with pytest.raises(JobError, match=r"^the Batch account has no pool gpu \(deleted outside Pulumi\?"):
        batch.pool_nodes("gpu")
    batch.endpoint.refuse = (403, "AuthorizationFailure", "This request is not authorized to perform this operation.")
    with pytest.raises(ServiceRefused, match=r"^the Batch account refused reading pool gpu \(403 "
                                             r"AuthorizationFailure\): this machine's address"):
        batch.pool_nodes("gpu")
