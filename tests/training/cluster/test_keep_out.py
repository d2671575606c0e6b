"""The failed node kept out (training/cluster/keep_out.py), at the wire: the real azure-batch client against the
local Batch endpoint (devtools/rehearsal/batch_endpoint.py): Nodes - List maps the blamed IP to its node, then
Compute Node - Disable Scheduling with taskcompletion; a 403 (the nodes' identity without a role for node
operations) is said in one line and the attempt's verdict stands."""
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


@pytest.fixture
def endpoint():
    from azure.batch import BatchClient

    account = NodesAccount()
    account.disabled = []
    account.pools["gpu"] = {"id": "gpu", "state": "active", "allocationState": "steady"}
    account.nodes["gpu"] = [{"id": f"tvmps_{i}", "state": "running", "schedulingState": "enabled",
                             "ipAddress": f"10.0.0.{i}", "isDedicated": True} for i in (4, 5, 6)]
    with rest.BatchEndpoint(account) as served:
        served.account_ = account
        served.client = lambda env: BatchClient(env["AZ_BATCH_ACCOUNT_URL"], _Token(),
                                                connection_verify=served.ca_file)
        yield served


def test_the_blamed_host_is_taken_out_with_taskcompletion(endpoint):
    env = {**ENV, "AZ_BATCH_ACCOUNT_URL": endpoint.url}
    done, text = keep_out(["10.0.0.5"], env, client_factory=endpoint.client)
    assert done == ["tvmps_5"]
    assert text == "scheduling disabled (taskcompletion) on node(s) tvmps_5 of pool gpu"
    assert endpoint.account_.disabled == [("tvmps_5", "taskcompletion")]
    assert [(m, p) for m, p, _ in endpoint.requests] == [("GET", "/pools/gpu/nodes"),
                                                         ("POST", "/pools/gpu/nodes/tvmps_5/disablescheduling")]
    assert [n["schedulingState"] for n in endpoint.account_.nodes["gpu"]] == ["enabled", "disabled", "enabled"]


def test_a_host_no_longer_in_the_pool_is_said(endpoint):
    env = {**ENV, "AZ_BATCH_ACCOUNT_URL": endpoint.url}
    done, text = keep_out(["10.0.0.9", "10.0.0.4"], env, client_factory=endpoint.client)
    assert done == ["tvmps_4"] and text.endswith("on node(s) tvmps_4 of pool gpu; not in the pool: 10.0.0.9")


def test_an_identity_without_the_role_is_one_line_and_nothing_raises(endpoint):
    endpoint.refuse = (403, "AuthorizationPermissionMismatch", "This request is not authorized to perform this "
                                                               "operation using this permission.")
    env = {**ENV, "AZ_BATCH_ACCOUNT_URL": endpoint.url}
    done, text = keep_out(["10.0.0.5"], env, client_factory=endpoint.client)
    assert done == [] and text.startswith("disable scheduling on 10.0.0.5 refused: AuthorizationPermissionMismatch "
                                          "(the pool's identity has no role that allows node operations")


def test_outside_batch_nothing_is_called():
    called = []
    done, text = keep_out(["10.0.0.5"], {}, client_factory=lambda env: called.append(env))
    assert (done, called) == ([], []) and text.startswith("no Batch account to ask")
