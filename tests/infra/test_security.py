"""The pure security validators, the CrossGuard policies made from them, and every stack against them."""
from datetime import datetime, timezone

import pytest

from infra.cli import plan
from infra.core import security
from infra.policy.pack import policies

GOOD_ACCOUNT = {
    "enableHttpsTrafficOnly": True, "minimumTlsVersion": "TLS1_2", "allowBlobPublicAccess": False,
    "networkRuleSet": {"defaultAction": "Deny", "virtualNetworkRules": [{"virtualNetworkResourceId": "/sub/x"}]},
    "encryption": {"requireInfrastructureEncryption": True}, "tags": {"team": "dev"},
}
GOOD_NSG = {"securityRules": [
    {"name": "vnet", "direction": "Inbound", "access": "Allow", "sourceAddressPrefix": "VirtualNetwork"},
    {"name": "deny", "direction": "Inbound", "access": "Deny", "sourceAddressPrefix": "Internet"}]}
ACCOUNT = "azure-native:storage:StorageAccount"
NSG = "azure-native:network:NetworkSecurityGroup"

# (resource type, properties, the check that must fail)
BAD_RESOURCES = [
    (ACCOUNT, {**GOOD_ACCOUNT, "enableHttpsTrafficOnly": False}, "storage-https-only"),
    (ACCOUNT, {**GOOD_ACCOUNT, "minimumTlsVersion": "TLS1_0"}, "storage-min-tls-1-2"),
    (ACCOUNT, {k: v for k, v in GOOD_ACCOUNT.items() if k != "minimumTlsVersion"}, "storage-min-tls-1-2"),
    (ACCOUNT, {**GOOD_ACCOUNT, "allowBlobPublicAccess": True}, "storage-no-public-blob-access"),
    (ACCOUNT, {**GOOD_ACCOUNT, "networkRuleSet": {"defaultAction": "Allow"}}, "storage-network-default-deny"),
    (ACCOUNT, {**GOOD_ACCOUNT, "networkRuleSet": {"defaultAction": "Deny"}}, "storage-network-default-deny"),
    (ACCOUNT, {**GOOD_ACCOUNT, "encryption": {}}, "storage-infrastructure-encryption"),
    (ACCOUNT, {**GOOD_ACCOUNT, "tags": {"owner": "x"}}, "team-tag"),
    ("azure-native:storage:BlobContainer", {"publicAccess": "Blob"}, "blob-container-private"),
    ("azure-native:containerregistry:Registry", {"adminUserEnabled": True}, "registry-admin-user-disabled"),
    ("azure-native:containerregistry:Registry", {}, "registry-admin-user-disabled"),
    (NSG, {"securityRules": GOOD_NSG["securityRules"][:1]}, "nsg-denies-internet-inbound"),
    (NSG, {"securityRules": [{"name": "ssh", "direction": "Inbound", "access": "Allow", "sourceAddressPrefix": "*"},
                             *GOOD_NSG["securityRules"]]}, "nsg-denies-internet-inbound"),
    ("azure-native:network:NetworkInterface",
     {"ipConfigurations": [{"name": "ip", "publicIPAddress": {"id": "/pip"}}]}, "nic-no-public-ip"),
]


@pytest.mark.parametrize("resource_type,props,check", BAD_RESOURCES, ids=[c for _, _, c in BAD_RESOURCES])
def test_each_check_refuses_what_it_guards(resource_type, props, check):
    assert check in [c.name for c, _ in security.resource_violations(resource_type, props)]


@pytest.mark.parametrize("resource_type,props", [
    (ACCOUNT, GOOD_ACCOUNT), (NSG, GOOD_NSG), ("azure-native:storage:BlobContainer", {"publicAccess": "None"}),
    ("azure-native:containerregistry:Registry", {"adminUserEnabled": False}),
    ("azure-native:network:NetworkInterface", {"ipConfigurations": [{"name": "ip"}]}),
])
def test_compliant_resources_pass(resource_type, props):
    assert security.resource_violations(resource_type, props) == []


class _Args:
    def __init__(self, resource_type, props):
        self.resource_type, self.props, self.urn, self.name = resource_type, props, f"urn:{resource_type}", "r"


def test_policy_pack_reports_the_same_violations_through_crossguard_api():
    by_name = {p.name: p for p in policies()}
    assert set(by_name) == {c.name for c in [*security.RESOURCE_CHECKS, security.TAG_CHECK]}
    for resource_type, props, check in BAD_RESOURCES:
        reported = []
        by_name[check].validate(_Args(resource_type, props), reported.append)
        assert len(reported) == 1 and reported[0], check
    for policy in by_name.values():
        reported = []
        policy.validate(_Args(ACCOUNT, GOOD_ACCOUNT), reported.append)
        assert reported == [], policy.name


NOW = datetime(2026, 11, 21, tzinfo=timezone.utc)
GOOD_SAS = {"canonicalizedResource": "/blob/acct/outputs", "protocols": "https", "resource": "c",
            "permissions": "cw", "sharedAccessExpiryTime": "2026-11-28T00:00:00Z"}


@pytest.mark.parametrize("change,words", [
    ({"protocols": "https,http"}, "https only"),
    ({"resource": "b"}, "container"),
    ({"permissions": "cwd"}, "grants d"),
    ({"canonicalizedResource": "/blob/acct/data", "permissions": "rlw"}, "grants w"),
    ({"sharedAccessExpiryTime": None}, "no expiry"),
    ({"sharedAccessExpiryTime": "2027-11-21T00:00:00Z"}, "720 hours"),
    ({"canonicalizedResource": "/blob/acct/secrets"}, "unknown container"),
])
def test_sas_request_checks(change, words):
    assert security.check_sas_request(GOOD_SAS, NOW) is None
    assert words in security.check_sas_request({**GOOD_SAS, **change}, NOW)


def test_every_stack_passes_every_check(ev):
    results = plan.verdicts(ev)
    assert [r for r in results if r[0] == "FAIL"] == []
    passed = {name for verdict, name, _ in results if verdict == "PASS"}
    assert passed >= {"storage-https-only", "storage-network-default-deny", "registry-admin-user-disabled",
                      "nsg-denies-internet-inbound", "team-tag", "sas-least-privilege", "no-keys-in-outputs"}
