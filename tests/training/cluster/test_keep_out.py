"""The failed node kept out (training/cluster/keep_out.py), at the wire: the real azure-batch client against the
local Batch endpoint (devtools/rehearsal/batch_endpoint.py): Nodes - List maps the blamed IP to its node, then
Compute Node - Disable Scheduling and Pool - Remove Nodes, both with taskcompletion (the node leaves once this task
ends, so autoscale adds a replacement); a pool that is resizing refuses the removal (409) and the line says the node
stays; a 403 (the account's firewall or the nodes' identity without a role for node operations: both named) is said
in one line and the attempt's verdict stands."""
import pytest

from devtools.rehearsal import batch_endpoint as rest
from tests.infra.backends.batch.fake_batch import MemoryAccount, _Token
from training.cluster.keep_out import keep_out

ENV = {"AZ_BATCH_POOL_ID": "gpu", "AZ_BATCH_ACCOUNT_URL": "set below", "AZURE_CLIENT_ID": "node-identity"}


class NodesAccount(MemoryAccount):
    """The in-memory account with node scheduling: the service's schedulingState of each node."""

    def disable_node_scheduling(self, pool_id, node_id, option):
        for node in self.pool_nodes(pool_id):
            if node["id"] == node_id:
                node["schedulingState"] = "disabled"
                self.disabled.append((node_id, option))
                return
        raise rest.BatchRefusal(404, "NodeNotFound", "The specified node does not exist.")

    def remove_nodes(self, pool_id, node_ids, option):
        if self.pool(pool_id)["allocationState"] != "steady":  # Pools_RemoveNodes' precondition
            raise rest.BatchRefusal(409, "PoolBeingResized", "The specified pool is being resized.")
        self.removed.append((node_ids, option))


@pytest.fixture
def endpoint():
    from azure.batch import BatchClient

    account = NodesAccount()
    account.disabled, account.removed = [], []
    account.pools["gpu"] = {"id": "gpu", "state": "active", "allocationState": "steady"}
    account.nodes["gpu"] = [{"id": f"tvmps_{i}", "state": "running", "schedulingState": "enabled",
                             "ipAddress": f"10.0.0.{i}", "isDedicated": True} for i in (4, 5, 6)]
    with rest.BatchEndpoint(account) as served:
        served.account_ = account
        served.client = lambda env: BatchClient(env["AZ_BATCH_ACCOUNT_URL"], _Token(),
                                                connection_verify=served.ca_file)
        yield served


def test_the_blamed_host_is_taken_out_with_taskcompletion_and_leaves_the_pool(endpoint):
    env = {**ENV, "AZ_BATCH_ACCOUNT_URL": endpoint.url}
    done, text = keep_out(["10.0.0.5"], env, client_factory=endpoint.client)
    assert done == ["tvmps_5"]
    assert text == ("scheduling disabled (taskcompletion) on node(s) tvmps_5 of pool gpu; removal asked "
                    "(taskcompletion): it leaves the pool when this task ends, and autoscale adds a replacement")
    assert endpoint.account_.disabled == [("tvmps_5", "taskcompletion")]
    assert endpoint.account_.removed == [(["tvmps_5"], "taskcompletion")]
    # The SDK's removal poller may read the pool once (GET /pools/gpu) on its own thread: not waited for.
    asked = [(m, p) for m, p, _ in endpoint.requests if (m, p) != ("GET", "/pools/gpu")]
    assert asked == [("GET", "/pools/gpu/nodes"), ("POST", "/pools/gpu/nodes/tvmps_5/disablescheduling"),
                     ("POST", "/pools/gpu/removenodes")]
    assert [n["schedulingState"] for n in endpoint.account_.nodes["gpu"]] == ["enabled", "disabled", "enabled"]


def test_a_resizing_pool_refuses_the_removal_and_the_line_says_the_node_stays(endpoint):
    endpoint.account_.pools["gpu"]["allocationState"] = "resizing"
    env = {**ENV, "AZ_BATCH_ACCOUNT_URL": endpoint.url}
    done, text = keep_out(["10.0.0.5"], env, client_factory=endpoint.client)
    assert done == ["tvmps_5"] and endpoint.account_.removed == []
    assert text.endswith("; removing it refused: the pool is resizing (Remove Nodes needs a steady pool): it stays "
                         "in the pool offline, and billed, and the retry gets no replacement until it is removed "
                         "(the portal: the pool's Nodes, Delete)")


def test_a_host_no_longer_in_the_pool_is_said(endpoint):
    env = {**ENV, "AZ_BATCH_ACCOUNT_URL": endpoint.url}
    done, text = keep_out(["10.0.0.9", "10.0.0.4"], env, client_factory=endpoint.client)
    assert done == ["tvmps_4"] and "on node(s) tvmps_4 of pool gpu; not in the pool: 10.0.0.9; removal asked" in text


def test_a_403_names_both_causes_in_one_line_and_nothing_raises(endpoint):
    """Batch answers 403 for a caller its firewall does not admit and for one without the role: the line names
    both (the NAT gateway's address in the account's ipRules; the node-operations role)."""
    endpoint.refuse = (403, "AuthorizationPermissionMismatch", "This request is not authorized to perform this "
                                                               "operation using this permission.")
    env = {**ENV, "AZ_BATCH_ACCOUNT_URL": endpoint.url}
    done, text = keep_out(["10.0.0.5"], env, client_factory=endpoint.client)
    assert done == [] and "\n" not in text
    assert text.startswith("disable scheduling on 10.0.0.5 refused: AuthorizationPermissionMismatch (either the "
                           "account's firewall does not admit this node's egress address, the NAT gateway's")
    assert "or the pool's identity has no role that allows node operations" in text


def test_outside_batch_nothing_is_called():
    called = []
    done, text = keep_out(["10.0.0.5"], {}, client_factory=lambda env: called.append(env))
    assert (done, called) == ([], []) and text.startswith("no Batch account to ask")
