"""The pure security validators, the CrossGuard policies made from them, and every stack against them."""
from datetime import datetime, timezone

import pytest

from pulumi_policy import StackValidationArgs
from pulumi_policy.policy import PolicyResource

from infra.cli import plan
from infra.core.config import stack as config, schema as config_schema
from infra.core.security import resources as security, firewalls as security_firewalls, sas as security_sas
from infra.policy.pack import policies

GOOD_ACCOUNT = {
    "enableHttpsTrafficOnly": True, "minimumTlsVersion": "TLS1_2", "allowBlobPublicAccess": False,
    "networkRuleSet": {"defaultAction": "Deny", "virtualNetworkRules": [{"virtualNetworkResourceId": "/sub/x"}]},
    "encryption": {"requireInfrastructureEncryption": True}, "tags": {"team": "dev"},
    "sasPolicy": {"sasExpirationPeriod": "7.00:00:00", "expirationAction": "Block"},
}
GOOD_NSG = {"securityRules": [
    {"name": "vnet", "direction": "Inbound", "access": "Allow", "sourceAddressPrefix": "VirtualNetwork"},
    {"name": "deny", "direction": "Inbound", "access": "Deny", "sourceAddressPrefix": "Internet"}],
    "tags": {"team": "dev"}}
ACCOUNT = "azure-native:storage:StorageAccount"
NSG = "azure-native:network:NetworkSecurityGroup"
VAULT = "azure-native:keyvault:Vault"
BATCH = "azure-native:batch:BatchAccount"
GOOD_VAULT = {"properties": {"enableRbacAuthorization": True, "enablePurgeProtection": True,
                             "networkAcls": {"defaultAction": "Deny", "ipRules": [{"value": "20.50.1.7"}]}},
              "tags": {"team": "dev"}}
GOOD_BATCH = {"allowedAuthenticationModes": ["AAD"], "tags": {"team": "dev"},
              "networkProfile": {"accountAccess": {"defaultAction": "Deny", "ipRules": [{"value": "20.50.1.7"}]}}}


ROLE = "azure-native:authorization:RoleAssignment"
RG_SCOPE = "/subscriptions/s/resourceGroups/rg-dltrain-dev-dev"
OTHER_GROUP = "/subscriptions/s/resourceGroups/rg-dltrain-nlp-nlp"  # another team's group, same subscription


def _grant(scope=RG_SCOPE, role="b24988ac-6180-42a0-ab88-20f7382dd24c"):  # Contributor
    return {"scope": scope, "principalId": "g", "principalType": "Group",
            "roleDefinitionId": f"/subscriptions/s/providers/Microsoft.Authorization/roleDefinitions/{role}"}


def _storage_ip(value):
    return {**GOOD_ACCOUNT, "networkRuleSet": {**GOOD_ACCOUNT["networkRuleSet"], "ipRules": [{"iPAddressOrRange": value}]}}


def _vault_ip(value):
    return {**GOOD_VAULT, "properties": {**GOOD_VAULT["properties"], "networkAcls": {
        "defaultAction": "Deny", "ipRules": [{"value": value}]}}}

STACK_GROUP = "rg-dltrain-dev-dev"  # the stack's own resource group (RG_SCOPE), as plan and the pack name it


def _pool_image(version):
    image = {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2404",
             **({"version": version} if version else {})}
    return {"deploymentConfiguration": {"virtualMachineConfiguration": {"imageReference": image}}}


def violations(resource_type, props):
    """(check, message) for each check one resource fails, through the loop plan and the policy pack use."""
    return [(f.check, f.message) for f in security.apply_checks([security.Subject(
        resource_type, props, resource_group=STACK_GROUP)]) if f.message]


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
    # A resource that takes tags and has none at all (the Batch pool had none until this check saw it).
    (ACCOUNT, {k: v for k, v in GOOD_ACCOUNT.items() if k != "tags"}, "team-tag"),
    ("azure-native:batch:Pool", {"vmSize": "Standard_ND96isr_H100_v5"}, "team-tag"),
    # The pool's image by version: `latest`, or no version (Batch's default is `latest`), is refused.
    ("azure-native:batch:Pool", _pool_image("latest"), "batch-pool-image-pinned"),
    ("azure-native:batch:Pool", _pool_image(None), "batch-pool-image-pinned"),
    (ROLE, _grant(scope="/subscriptions/s"), "role-assignment-within-resource-group"),
    (ROLE, _grant(scope="/providers/Microsoft.Management/managementGroups/corp"),
     "role-assignment-within-resource-group"),
    (ROLE, _grant(scope="/"), "role-assignment-within-resource-group"),
    # Another resource group, or a resource in it, or a group whose name only starts with the stack's.
    (ROLE, _grant(scope=OTHER_GROUP), "role-assignment-within-resource-group"),
    (ROLE, _grant(scope=OTHER_GROUP + "/providers/Microsoft.Storage/storageAccounts/st"),
     "role-assignment-within-resource-group"),
    (ROLE, _grant(scope=RG_SCOPE + "-x"), "role-assignment-within-resource-group"),
    (ROLE, _grant(role="8e3af657-a8ff-443c-a75c-2fe8c4bcb635"), "role-assignment-not-privileged"),  # Owner
    (ROLE, _grant(role="18d7d88d-d35e-4fb5-a5c3-7773c20a72d9"), "role-assignment-not-privileged"),  # UAA
    (ROLE, _grant(role="F58310D9-A9F6-439A-9E8D-F62E7B41A168"), "role-assignment-not-privileged"),  # RBAC Admin
    # Not named above, and it can assign roles: Key Vault Data Access Administrator (built-in roles, security page).
    (ROLE, _grant(role="8b54135c-b56d-4d72-a534-26097cfdc8d8"), "role-assignment-not-privileged"),
    ("azure-native:storage:BlobContainer", {"publicAccess": "Blob"}, "blob-container-private"),
    ("azure-native:containerregistry:Registry", {"adminUserEnabled": True}, "registry-admin-user-disabled"),
    ("azure-native:containerregistry:Registry", {}, "registry-admin-user-disabled"),
    (NSG, {"securityRules": GOOD_NSG["securityRules"][:1]}, "nsg-denies-internet-inbound"),
    (NSG, {"securityRules": [{"name": "ssh", "direction": "Inbound", "access": "Allow", "sourceAddressPrefix": "*"},
                             *GOOD_NSG["securityRules"]]}, "nsg-denies-internet-inbound"),
    ("azure-native:network:NetworkInterface",
     {"ipConfigurations": [{"name": "ip", "publicIPAddress": {"id": "/pip"}}]}, "nic-no-public-ip"),
    # Service rules: what Azure refuses although the provider's types take it.
    (ACCOUNT, _storage_ip("20.50.1.7/32"), "storage-firewall-ip-rules"),
    (ACCOUNT, _storage_ip("20.50.1.6/31"), "storage-firewall-ip-rules"),
    (ACCOUNT, _storage_ip("10.1.0.0/16"), "storage-firewall-ip-rules"),
    (ACCOUNT, _storage_ip("2001:db8::1"), "storage-firewall-ip-rules"),
    (VAULT, _vault_ip("192.168.1.0/24"), "key-vault-firewall-ip-rules"),
    (VAULT, _vault_ip("20.50.1.7/24"), "key-vault-firewall-ip-rules"),
    (BATCH, {**GOOD_BATCH, "networkProfile": {"accountAccess": {"defaultAction": "Deny",
                                                                "ipRules": [{"value": "2001:db8::/64"}]}}},
     "batch-firewall-ip-rules"),
]


@pytest.mark.parametrize("resource_type,props,check", BAD_RESOURCES, ids=[c for _, _, c in BAD_RESOURCES])
def test_each_check_refuses_what_it_guards(resource_type, props, check):
    assert check in [c.name for c, _ in violations(resource_type, props)]


@pytest.mark.parametrize("resource_type,props", [
    (ACCOUNT, GOOD_ACCOUNT), (NSG, GOOD_NSG), ("azure-native:storage:BlobContainer", {"publicAccess": "None"}),
    (ACCOUNT, _storage_ip("20.50.1.7")), (ACCOUNT, _storage_ip("20.50.0.0/30")), (VAULT, GOOD_VAULT),
    (VAULT, _vault_ip("20.50.1.7/32")), (BATCH, GOOD_BATCH),
    ("azure-native:containerregistry:Registry", {"adminUserEnabled": False, "tags": {"team": "dev"}}),
    ("azure-native:network:NetworkInterface", {"ipConfigurations": [{"name": "ip"}], "tags": {"team": "dev"}}),
    (ROLE, _grant()), (ROLE, _grant(scope=RG_SCOPE.upper() + "/providers/Microsoft.Storage/storageAccounts/st")),
    ("azure-native:storage:BlobContainer", {}),  # takes no tags: nothing to check
])
def test_compliant_resources_pass(resource_type, props):
    assert violations(resource_type, props) == []


class _Args:
    def __init__(self, resource_type, props):
        self.resource_type, self.props, self.urn, self.name = resource_type, props, f"urn:{resource_type}", "r"


def _stack_args(resource_type, props):
    """A stack of the stack's own resource group and one resource, as CrossGuard hands a stack policy."""
    group = _resource(security.RESOURCE_GROUP, "rg", {"resourceGroupName": STACK_GROUP, "tags": {"team": "dev"}})
    return StackValidationArgs([group, _resource(resource_type, "r", props)])


def test_policy_pack_reports_the_same_violations_through_crossguard_api():
    by_name = {p.name: p for p in policies()}
    assert set(by_name) == {c.name for c in security.PER_RESOURCE_CHECKS} | {security.VNET_RULE_CHECK.name}
    stack_policies = {c.name for c in security.PER_RESOURCE_CHECKS if isinstance(c, security.StackCheck)}
    assert stack_policies == {"role-assignment-within-resource-group"}
    for resource_type, props, check in BAD_RESOURCES:
        reported = []
        if check in stack_policies:
            by_name[check].validate(_stack_args(resource_type, props), lambda m, urn=None: reported.append(m))
        else:
            by_name[check].validate(_Args(resource_type, props), reported.append)
        assert len(reported) == 1 and reported[0], check
    for policy in by_name.values():
        reported = []
        if policy.name in stack_policies:
            policy.validate(_stack_args(ROLE, _grant()), lambda m, urn=None: reported.append(m))
        elif policy.name != security.VNET_RULE_CHECK.name:  # a stack policy: below
            policy.validate(_Args(ACCOUNT, GOOD_ACCOUNT), reported.append)
        assert reported == [], policy.name


def test_a_grant_in_another_resource_group_is_refused_by_name_and_a_check_without_the_group_refuses_too():
    [(check, message)] = violations(ROLE, _grant(scope=OTHER_GROUP))
    assert check.name == "role-assignment-within-resource-group"
    assert "rg-dltrain-nlp-nlp" in message and "'rg-dltrain-dev-dev'" in message
    # The stack's group compared case-insensitively (ARM IDs are), and a caller that names no group gets no pass.
    assert violations(ROLE, _grant(scope=RG_SCOPE.replace("rg-dltrain", "RG-DLTRAIN"))) == []
    unnamed = security.apply_checks([security.Subject(ROLE, _grant())], [check])
    assert "did not name it" in unnamed[0].message


# --- Service rules ----------------------------------------------------------------------------------------------

def test_firewall_ip_rules_give_single_addresses_bare_and_split_a_31():
    # Storage refuses /31 and /32 and asks for the individual addresses; Key Vault and Batch take them too.
    assert security_firewalls.firewall_ip_rules(["20.50.1.7/32", "20.50.1.8", "20.60.1.0/31", "20.70.0.0/24"]) == (
        "20.50.1.7", "20.50.1.8", "20.60.1.0", "20.60.1.1", "20.70.0.0/24")
    assert security_firewalls.firewall_ip_rules(["20.50.1.7", "20.50.1.7/32"]) == ("20.50.1.7",)  # one rule, not two
    props = {**GOOD_ACCOUNT, "networkRuleSet": {**GOOD_ACCOUNT["networkRuleSet"], "ipRules": [
        {"iPAddressOrRange": rule} for rule in security_firewalls.firewall_ip_rules(["20.50.1.7/32", "20.60.1.0/31"])]}}
    assert violations(ACCOUNT, props) == []


def test_a_32_is_refused_with_the_bare_address_to_give_instead():
    message = violations(ACCOUNT, _storage_ip("20.50.1.6/31"))[0][1]
    assert message.startswith("networkRuleSet.ipRules: 20.50.1.6/31: /31 and /32 ranges are refused")
    assert message.endswith("20.50.1.6, 20.50.1.7")


def test_config_hint_for_allowed_ip_ranges_suggests_what_the_firewalls_take():
    with pytest.raises(config_schema.ConfigError) as err:
        config.parse("x", {"allowedIpRanges": []})
    assert "/32" not in str(err.value) and "bare" in str(err.value)
    cfg = config.parse("x", {"allowedIpRanges": ["20.50.1.7"]})  # a bare address, as ifconfig.me prints it
    assert security_firewalls.firewall_ip_rules(cfg.network.allowed_ip_ranges) == ("20.50.1.7",)


SUBNET = security.SUBNET
VNET_SUBNETS = {"compute": {"id": "/s/compute", "addressPrefix": "10.10.0.0/20",
                            "serviceEndpoints": [{"service": "Microsoft.Storage"}]},
                "vault-ready": {"id": "/s/ready", "addressPrefix": "10.10.16.0/24",
                                "serviceEndpoints": [{"service": "Microsoft.Storage"},
                                                     {"service": "Microsoft.KeyVault"}]}}


def _vault_on(*subnet_ids):
    return {**GOOD_VAULT, "properties": {**GOOD_VAULT["properties"], "networkAcls": {
        "defaultAction": "Deny", "virtualNetworkRules": [{"id": i} for i in subnet_ids]}}}


def test_a_vault_rule_on_a_subnet_without_the_key_vault_endpoint_is_refused():
    check = security.VNET_RULE_CHECK
    assert security.vnet_rule_subnet_ids(VAULT, _vault_on("/s/compute", "/s/ready")) == ["/s/compute", "/s/ready"]
    message = check.validate(VAULT, [VNET_SUBNETS["compute"], VNET_SUBNETS["vault-ready"]])
    assert "10.10.0.0/20" in message and "no Microsoft.KeyVault service endpoint" in message
    assert check.validate(VAULT, [VNET_SUBNETS["vault-ready"]]) is None
    assert check.validate(ACCOUNT, [VNET_SUBNETS["compute"]]) is None  # storage needs Microsoft.Storage only


def _resource(resource_type, name, props, property_dependencies=None):
    return PolicyResource(resource_type, props, f"urn:pulumi:dev::p::{resource_type}::{name}", name, None, None, None,
                          [], property_dependencies or {})


def test_the_policy_pack_finds_a_vault_s_subnets_in_a_preview_and_after_up():
    policy = next(p for p in policies() if p.name == security.VNET_RULE_CHECK.name)
    compute = _resource(SUBNET, "compute", VNET_SUBNETS["compute"])
    ready = _resource(SUBNET, "ready", VNET_SUBNETS["vault-ready"])

    def violations(vault):
        reported = []
        policy.validate(StackValidationArgs([compute, ready, vault]), lambda m, urn=None: reported.append((m, urn)))
        return reported

    # A preview: the rule's subnet ID is not known yet, the property's dependency is.
    preview = _resource(VAULT, "kv", _vault_on(), {"properties": [compute]})
    [(message, urn)] = violations(preview)
    assert "Microsoft.KeyVault" in message and urn == preview.urn
    # After `up`: by ID.
    assert len(violations(_resource(VAULT, "kv", _vault_on("/s/compute")))) == 1
    assert violations(_resource(VAULT, "kv", _vault_on("/s/ready"), {"properties": [ready]})) == []


NOW = datetime(2026, 11, 21, tzinfo=timezone.utc)
GOOD_SAS = {"canonicalizedResource": "/blob/acct/outputs", "protocols": "https", "resource": "c",
            "permissions": "cw", "sharedAccessStartTime": "2026-11-21T00:00:00Z",
            "sharedAccessExpiryTime": "2026-11-28T00:00:00Z"}


@pytest.mark.parametrize("change,words", [
    ({"protocols": "https,http"}, "https only"),
    ({"resource": "b"}, "container"),
    ({"permissions": "cwd"}, "grants d"),
    ({"canonicalizedResource": "/blob/acct/data", "permissions": "rlw"}, "grants w"),
    ({"sharedAccessExpiryTime": None}, "no expiry"),
    ({"sharedAccessExpiryTime": "2027-11-21T00:00:00Z"}, "longer than the account's SAS expiration period (168"),
    ({"sharedAccessStartTime": None}, "no signed start"),
    ({"sharedAccessStartTime": "2026-11-20T23:00:00Z"}, "which blocks it"),  # 169 hours
    ({"canonicalizedResource": "/blob/acct/secrets"}, "unknown container"),
])
def test_sas_request_checks(change, words):
    assert security_sas.check_sas_request(GOOD_SAS, NOW) is None
    assert words in security_sas.check_sas_request({**GOOD_SAS, **change}, NOW)


def test_a_sas_longer_than_the_stacks_own_period_is_refused():
    """The account's period is the stack's sasExpiryHours: a 168-hour SAS on a 72-hour account is blocked."""
    assert "(72 hours)" in security_sas.check_sas_request(GOOD_SAS, NOW, period_hours=72)


def test_every_stack_passes_every_check(ev):
    results = plan.verdicts(ev) + plan.service_verdicts(ev)
    assert [r for r in results if r[0] == "FAIL"] == []
    assert ("PASS", "vnet-rule-service-endpoints") in {r[:2] for r in results}
    passed = {name for verdict, name, _ in results if verdict == "PASS"}
    assert passed >= {"storage-https-only", "storage-network-default-deny", "registry-admin-user-disabled",
                      "nsg-denies-internet-inbound", "team-tag", "sas-least-privilege", "no-keys-in-outputs"}


def test_which_types_take_tags_comes_from_the_provider_types():
    assert security.takes_tags(ACCOUNT) and security.takes_tags("azure-native:batch:Pool")
    assert not security.takes_tags("azure-native:storage:BlobContainer") and not security.takes_tags(ROLE)
    assert not security.takes_tags("docker-build:index:Image")


def test_every_resource_that_takes_tags_has_the_team_tag(ev):
    """Every declared resource whose type takes tags, whether the program gave it a `tags` input or not."""
    for resource in ev.resources:
        if resource.custom and security.takes_tags(resource.type):
            assert (resource.inputs.get("tags") or {}).get("team") == ev.config.team, resource.urn
