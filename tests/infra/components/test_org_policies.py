"""What an organisation's common Azure Policy assignments would meet, as ARM receives the stacks' resources:
a SAS expiration policy on every storage account (Deny: "Storage account SAS tokens should adhere to 7 day maximum
validity"), and plan's warning when sasExpiryHours would break it."""
import dataclasses

import pytest

from infra.cli import plan
from infra.core import config, security
from infra.preview import offline
from tests.infra.conftest import AML_STACKS, BATCH_STACKS, NOW, evaluation_for

STACKS = BATCH_STACKS + AML_STACKS


@pytest.mark.parametrize("stack", STACKS)
def test_every_storage_account_carries_the_stacks_sas_lifetime_as_its_sas_policy(stack):
    ev = evaluation_for(stack)
    accounts = ev.of_type(security.STORAGE_ACCOUNT)
    assert accounts
    for account in accounts:
        # The NFS (Azure Files) account signs no SAS (no shared keys): the shortest period.
        hours = 1 if account.inputs["kind"] == "FileStorage" else ev.config.storage.sas_expiry_hours
        assert account.inputs["sasPolicy"] == {"sasExpirationPeriod": security.sas_expiration_period(hours),
                                               "expirationAction": "Log"}, account.urn


def test_the_period_is_days_and_hours_as_azure_writes_it_and_the_check_needs_it():
    assert security.sas_expiration_period(168) == "7.00:00:00"
    assert security.sas_expiration_period(30) == "1.06:00:00"
    assert security.sas_expiration_period(1) == "0.01:00:00"
    [check] = [c for c in security.RESOURCE_CHECKS if c.name == "storage-sas-policy"]
    assert check.validate({"sasPolicy": {"sasExpirationPeriod": "7.00:00:00", "expirationAction": "Log"}}) is None
    assert "sasExpirationPeriod is None" in check.validate({})
    assert "Log or Block" in check.validate({"sasPolicy": {"sasExpirationPeriod": "7.00:00:00"}})


def test_plan_warns_when_sas_expiry_hours_would_break_the_7_day_policy():
    base = config.from_stack_file(BATCH_STACKS[0])
    assert base.storage.sas_expiry_hours <= 168
    assert not [line for line in plan.before_up(base) if "7 day maximum validity" in line]
    longer = dataclasses.replace(base, storage=dataclasses.replace(base.storage, sas_expiry_hours=720))
    [line] = [line for line in plan.before_up(longer) if "7 day maximum validity" in line]
    assert line.startswith("sasExpiryHours 720 sets the storage account's sasPolicy to 30.00:00:00")
    assert "set sasExpiryHours to 168 or less" in line


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
                 "azure-native:containerregistry:Registry": "ContainerRegistryLoginEvents",
                 "azure-native:keyvault:Vault": "AuditEvent", "azure-native:logic:Workflow": "WorkflowRuntime"}


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
            if category:
                assert category in [log["category"] for log in settings[resource.state["id"]]["logs"]], resource.urn


def test_the_batch_pool_encrypts_its_nodes_temporary_disk():
    """Azure Policy's "Azure Batch pools should have disk encryption enabled"; Linux pools take TemporaryDisk only."""
    ev = evaluation_for(BATCH_STACKS[0])
    vm = ev.one("azure-native:batch:Pool").inputs["deploymentConfiguration"]["virtualMachineConfiguration"]
    assert vm["diskEncryptionConfiguration"] == {"targets": ["TemporaryDisk"]}


def test_a_premium_registry_is_closed_but_to_the_deployers_and_the_nodes_egress():
    """ACR network rules (Premium only): deny by default, admit allowedIpRanges (up pushes) and the NAT gateway's
    public address (every node's pull leaves through it); Basic and Standard take none."""
    premium = evaluation_for("vision")
    assert premium.config.registry.registry_sku == "Premium"
    registry = premium.one("azure-native:containerregistry:Registry").inputs
    egress = premium.one("azure-native:network:PublicIPAddress").state["ipAddress"]
    rules = registry["networkRuleSet"]
    assert rules["defaultAction"] == "Deny"
    assert [r["iPAddressOrRange"] for r in rules["ipRules"]] == [
        *security.firewall_ip_rules(premium.config.network.allowed_ip_ranges), egress]
    assert all(r["action"] == "Allow" for r in rules["ipRules"])
    standard = evaluation_for(BATCH_STACKS[0])
    assert standard.config.registry.registry_sku != "Premium"
    assert "networkRuleSet" not in standard.one("azure-native:containerregistry:Registry").inputs


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
