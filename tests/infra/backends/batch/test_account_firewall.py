"""The Batch account's two public endpoints as the stack declares them (https://learn.microsoft.com/azure/batch/
public-network-access): the account endpoint admits the deployers' allowedIpRanges and the nodes' NAT address (a
node keeping a failed node out calls it: training/cluster/keep_out.py); the node management endpoint, which only
the pool's nodes call, admits the NAT address alone instead of the whole Internet."""
from infra.backends.batch.cluster import account_ip_rules
from tests.infra.conftest import evaluation_for


def test_the_node_management_endpoint_admits_the_nodes_nat_address_only():
    ev = evaluation_for("dev")
    profile = ev.one("azure-native:batch:BatchAccount").inputs["networkProfile"]
    egress = ev.one("azure-native:network:PublicIPAddress", "egress").state["ipAddress"]
    nodes = profile["nodeManagementAccess"]
    assert nodes["defaultAction"] == "Deny" and [r["value"] for r in nodes["ipRules"]] == [egress]
    assert egress in [r["value"] for r in profile["accountAccess"]["ipRules"]]


def test_the_account_rules_add_the_nat_address_once():
    assert account_ip_rules(("20.50.1.7/32", "20.70.0.0/24"), "20.1.1.1") == ["20.50.1.7", "20.70.0.0/24", "20.1.1.1"]
    assert account_ip_rules(("20.1.1.1",), "20.1.1.1") == ["20.1.1.1"]
    assert account_ip_rules(("20.1.1.1",), None) == ["20.1.1.1"]
