"""What an organisation's common Azure Policy assignments would meet, as ARM receives the stacks' resources:
Azure Policy's built-in "Storage SAS tokens should adhere to 7 day maximum validity" (Deny) on every storage account,
and the SAS the stack issues inside the period the accounts then enforce (Block)."""
import dataclasses

import pytest

from infra.cli import plan
from infra.core.config import stack as config
from infra.core.security import resources as security, firewalls as security_firewalls, sas as security_sas
from infra.core.config.schema import ConfigError
from infra.preview import offline
from tests.infra.conftest import AML_STACKS, BATCH_STACKS, NOW, evaluation_for

STACKS = BATCH_STACKS + AML_STACKS


@pytest.mark.parametrize("stack", STACKS)
def test_every_storage_account_blocks_sas_beyond_the_stacks_lifetime(stack):
    ev = evaluation_for(stack)
    accounts = ev.of_type(security.STORAGE_ACCOUNT)
    assert accounts
    for account in accounts:
        # The NFS (Azure Files) account signs no SAS (no shared keys): the shortest period.
        hours = 1 if account.inputs["kind"] == "FileStorage" else ev.config.storage.sas_expiry_hours
        assert account.inputs["sasPolicy"] == {"sasExpirationPeriod": security_sas.sas_expiration_period(hours),
                                               "expirationAction": "Block"}, account.urn
        [check] = [c for c in security.RESOURCE_CHECKS if c.name == "storage-sas-policy"]
        assert check.validate(account.inputs) is None, account.urn
    # Every SAS the stack asks for has a signed start and lives within the account's period (Block refuses the rest).
    requests = [i.args for i in ev.invocations if i.token == "azure-native:storage:listStorageAccountServiceSAS"]
    assert requests
    for args in requests:
        assert security_sas.check_sas_request(args, NOW, period_hours=ev.config.storage.sas_expiry_hours) is None


# The built-in's policyRule (Azure/azure-policy, built-in-policies/policyDefinitions/Storage/
# EnforceStorageSasMaxExpiration7Days_Deny.json at f4a50bacae07ddb096943c597669bcae494a6e29; definition
# 7aa1c9d5-3d7e-4579-8117-d85e99211757) denies when sasPolicy or its period is missing, when the period's days
# (split on ':' and '.') are over 7, or 7 with any hours/minutes/seconds, or when expirationAction is missing or not
# Block. One case per clause, and the edges that pass.
@pytest.mark.parametrize("policy,denied", [
    (None, True),
    ({"expirationAction": "Block"}, True),
    ({"sasExpirationPeriod": "8.00:00:00", "expirationAction": "Block"}, True),
    ({"sasExpirationPeriod": "7.00:00:01", "expirationAction": "Block"}, True),
    ({"sasExpirationPeriod": "7.01:00:00", "expirationAction": "Block"}, True),
    ({"sasExpirationPeriod": "1.00:00:00"}, True),
    ({"sasExpirationPeriod": "1.00:00:00", "expirationAction": "Log"}, True),
    ({"sasExpirationPeriod": "7.00:00:00", "expirationAction": "Block"}, False),
    ({"sasExpirationPeriod": "6.23:59:59", "expirationAction": "Block"}, False),
    ({"sasExpirationPeriod": "0.01:00:00", "expirationAction": "Block"}, False),
])
def test_the_check_is_the_builtin_7_day_sas_rule(policy, denied):
    [check] = [c for c in security.RESOURCE_CHECKS if c.name == "storage-sas-policy"]
    props = {} if policy is None else {"sasPolicy": policy}
    assert (check.validate(props) is not None) == denied


def test_the_period_is_days_and_hours_as_azure_writes_it():
    assert security_sas.sas_expiration_period(168) == "7.00:00:00"
    assert security_sas.sas_expiration_period(30) == "1.06:00:00"
    assert security_sas.sas_expiration_period(1) == "0.01:00:00"
    assert security_sas.sas_period_hours("1.06:30:00") == 30.5 and security_sas.sas_period_hours("7 days") is None


def test_plan_refuses_a_sas_lifetime_the_period_would_block_in_one_line(tmp_path):
    """A sasExpiryHours over 7 days: the accounts' period could not hold it under the built-in, so plan (and up)
    refuse it, naming the key and the fix."""
    from infra import REPO_ROOT

    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.a.yaml").write_text("config:\n  azure-dl-training:allowedIpRanges: [20.50.1.7/32]\n"
                                            "  azure-dl-training:sasExpiryHours: 720\n")
    with pytest.raises(ConfigError) as raised:
        config.from_stack_file("a", tmp_path)
    message = str(raised.value)
    assert message.startswith("config key 'sasExpiryHours'") and "set 168 or less" in message and "\n" not in message
    assert config.load_schema()["sasExpiryHours"].description.startswith(
        "Lifetime of the SAS tokens the stack issues (1-168 hours")


@pytest.mark.parametrize("stack", [BATCH_STACKS[0], AML_STACKS[0]])
def test_subnets_are_private_and_egress_through_the_nat_gateway(stack):
    ev = evaluation_for(stack)
    nat = ev.one("azure-native:network:NatGateway").state["id"]
    subnets = ev.of_type("azure-native:network:Subnet")
    assert subnets
    for subnet in subnets:
        assert subnet.inputs["defaultOutboundAccess"] is False, subnet.urn
        assert subnet.inputs["natGateway"] == {"id": nat}, subnet.urn


RESOURCE_LOGS = {"azure-native:storage:StorageAccount": None, "azure-native:batch:BatchAccount": "ServiceLog",
                 "azure-native:machinelearningservices:Workspace": "AmlComputeJobEvent",
                 "azure-native:containerregistry:Registry": "allLogs",
                 "azure-native:keyvault:Vault": "allLogs", "azure-native:logic:Workflow": "WorkflowRuntime"}
# Azure Policy's "Resource logs should be enabled for Audit on supported resources" (DiagnosticSettingsExistsAudit_
# Audit.json in Azure/azure-policy): for these types a setting counts only with an enabled log whose categoryGroup is
# audit or allLogs (requiredLogLevel's default, Audit).
AUDITED_BY_CATEGORY_GROUP = ("azure-native:containerregistry:Registry", "azure-native:keyvault:Vault")


@pytest.mark.parametrize("stack", [BATCH_STACKS[0], AML_STACKS[0]])
def test_every_resource_type_with_resource_logs_sends_them_to_the_workspace(stack):
    from tests.infra.components.test_budget import with_budget

    ev = with_budget(stack)  # the budget's guard (a Logic App) too
    workspace = ev.one("azure-native:operationalinsights:Workspace").state["id"]
    settings = {s.inputs["resourceUri"]: s.inputs for s in ev.of_type("azure-native:monitor:DiagnosticSetting")}
    assert all(s["workspaceId"] == workspace for s in settings.values())
    for token, category in RESOURCE_LOGS.items():
        for resource in ev.of_type(token):
            assert resource.state["id"] in settings, resource.urn
            logs = settings[resource.state["id"]].get("logs", [])
            if token in AUDITED_BY_CATEGORY_GROUP:
                assert [log for log in logs if log["enabled"] and log.get("categoryGroup") in ("audit", "allLogs")], \
                    resource.urn
            elif category:
                assert category in [log["category"] for log in logs], resource.urn


def test_the_batch_pool_encrypts_its_nodes_temporary_disk():
    """Azure Policy's "Azure Batch pools should have disk encryption enabled"; Linux pools take TemporaryDisk only."""
    ev = evaluation_for(BATCH_STACKS[0])
    vm = ev.one("azure-native:batch:Pool").inputs["deploymentConfiguration"]["virtualMachineConfiguration"]
    assert vm["diskEncryptionConfiguration"] == {"targets": ["TemporaryDisk"]}


def test_a_premium_registry_is_closed_but_to_the_deployers_and_reached_by_the_nodes_through_its_private_endpoint():
    """ACR (Premium only): the public endpoint denies by default and admits allowedIpRanges (up pushes from there);
    the nodes resolve the registry's name in the VNet's privatelink.azurecr.io zone to its private endpoint
    (container-registry-private-link). No Microsoft.ContainerRegistry service endpoint on the compute subnet: with it
    the nodes' traffic reached the public endpoint from private addresses no IP rule admits. Basic and Standard
    take neither."""
    premium = evaluation_for("vision")
    assert premium.config.registry.registry_sku == "Premium"
    acr = premium.one("azure-native:containerregistry:Registry")
    rules = acr.inputs["networkRuleSet"]
    assert rules["defaultAction"] == "Deny"
    assert [r["iPAddressOrRange"] for r in rules["ipRules"]] == list(
        security_firewalls.firewall_ip_rules(premium.config.network.allowed_ip_ranges))
    assert all(r["action"] == "Allow" for r in rules["ipRules"])
    subnets = {s.name.rsplit("-", 1)[-1]: s for s in premium.of_type("azure-native:network:Subnet")}
    for subnet in subnets.values():
        assert "Microsoft.ContainerRegistry" not in [e["service"] for e in subnet.inputs["serviceEndpoints"]]
    # The node path: compute subnet -> the VNet's DNS (the zone linked to it) -> the endpoint, in a subnet of the
    # same VNet whose NSG admits the VNet -> the registry (the endpoint's connection, group "registry").
    vnet = premium.one("azure-native:network:VirtualNetwork").state["id"]
    [endpoint] = premium.of_type("azure-native:network:PrivateEndpoint")
    connection = endpoint.inputs["privateLinkServiceConnections"][0]
    assert connection["privateLinkServiceId"] == acr.state["id"] and connection["groupIds"] == ["registry"]
    [home] = [s for s in subnets.values() if s.state["id"] == endpoint.inputs["subnet"]["id"]]
    assert home.inputs["virtualNetworkName"] == subnets["compute"].inputs["virtualNetworkName"]
    nsg = [n for n in premium.of_type("azure-native:network:NetworkSecurityGroup")
           if n.state["id"] == home.inputs["networkSecurityGroup"]["id"]][0]
    assert any(r["access"] == "Allow" and r["direction"] == "Inbound" and r["sourceAddressPrefix"] == "VirtualNetwork"
               for r in nsg.inputs["securityRules"])
    zone = premium.one("azure-native:privatedns:PrivateZone")
    assert zone.inputs["privateZoneName"] == "privatelink.azurecr.io"
    [link] = premium.of_type("azure-native:privatedns:VirtualNetworkLink")
    assert link.inputs["virtualNetwork"]["id"] == vnet and link.inputs["privateZoneName"] == zone.state["name"]
    group = premium.one("azure-native:network:PrivateDnsZoneGroup")
    assert group.inputs["privateEndpointName"] == endpoint.state["name"]
    assert [c["privateDnsZoneId"] for c in group.inputs["privateDnsZoneConfigs"]] == [zone.state["id"]]
    # Nothing boots nodes before their way to the registry: the pool waits for the zone's records and the pull grant.
    pool = premium.one("azure-native:batch:Pool")
    pull = [r for r in premium.of_type("azure-native:authorization:RoleAssignment") if r.urn.endswith("-acr-pull")]
    assert {group.urn, link.urn, pull[0].urn} <= set(pool.dependencies)

    standard = evaluation_for(BATCH_STACKS[0])
    assert standard.config.registry.registry_sku != "Premium"
    assert "networkRuleSet" not in standard.one("azure-native:containerregistry:Registry").inputs
    assert not standard.of_type("azure-native:privatedns:PrivateZone")
    assert not standard.of_type("azure-native:network:PrivateEndpoint")


def test_encryption_at_host_on_the_nfs_vm_only_where_the_stack_says_the_subscription_has_the_feature():
    """Azure Policy's "Virtual machines and virtual machine scale sets should have encryption at host enabled" (MCSB):
    securityProfile.encryptionAtHost, which Azure refuses without Microsoft.Compute/EncryptionAtHost registered
    (https://learn.microsoft.com/azure/virtual-machines/disks-enable-host-based-encryption-portal): off by default,
    on with nfsEncryptionAtHost, and plan then says how to register the feature."""
    base = evaluation_for(BATCH_STACKS[0])
    assert base.config.nfs.kind == "vm" and not base.config.nfs.encryption_at_host
    vm = base.one("azure-native:compute:VirtualMachine").inputs["securityProfile"]
    assert "encryptionAtHost" not in vm and vm["securityType"] == "TrustedLaunch"
    assert not [line for line in plan.before_up(base.config) if "EncryptionAtHost" in line]

    cfg = dataclasses.replace(base.config, nfs=dataclasses.replace(base.config.nfs, encryption_at_host=True))
    on = offline.evaluate(cfg, now=NOW)
    vm = on.one("azure-native:compute:VirtualMachine").inputs["securityProfile"]
    assert vm["encryptionAtHost"] is True and vm["securityType"] == "TrustedLaunch"
    assert vm["uefiSettings"] == {"secureBootEnabled": True, "vTpmEnabled": True}
    [line] = [line for line in plan.before_up(cfg) if "EncryptionAtHost" in line]
    assert "`az feature register --namespace Microsoft.Compute --name EncryptionAtHost`" in line
    assert "az provider register --namespace Microsoft.Compute" in line and "deallocated" in line
