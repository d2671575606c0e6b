"""batchPoolAllocation: the default batch-service and user-subscription mode. Under Pulumi's mocks
(infra/preview/offline.py) a user-subscription stack declares the account in UserSubscription mode with its Key
Vault reference, the vault (RBAC, purge protection, deny-by-default firewall) in the team's group, and the Batch
service's Key Vault Secrets Officer grant on that vault alone; plan names the quota and the subscription grant;
preflight at the wire (the real ARM pipeline against tests/infra/backends/arm_endpoint.py) reads the subscription's
family usage and the Batch service's role on the subscription."""
import dataclasses
import shutil
from datetime import timedelta

import pytest

from infra import REPO_ROOT
from infra.backends import preflight
from infra.cli import plan
from infra.components.name_generation import NameGenerationProvider
from infra.core import naming
from infra.core.config import stack as config
from infra.core.security import role_ids, resources as security
from infra.core.preflight import subscription as verdicts
from infra.core.config.schema import ConfigError
from infra.core.preflight.check import FAIL, OK
from infra.preview import offline
from tests.infra.backends.arm_endpoint import SUBSCRIPTION, role_assignment, usage
from tests.infra.backends.cost_endpoint import Token
from tests.infra.conftest import NOW, evaluation_for

BATCH_SERVICE = "f520d84c-3fd3-4cc8-88d4-2ed25b00d27a"  # its object ID in some tenant (it differs per tenant)
ORCHESTRATION = "a35466a1-cfd6-450a-b35e-683fcdf30363"


def user_subscription(stack: str = "dev"):
    cfg = config.from_stack_file(stack)
    return dataclasses.replace(cfg, nodes=dataclasses.replace(cfg.nodes, pool_allocation="user-subscription",
                                                              batch_service_object_id=BATCH_SERVICE))


@pytest.fixture(scope="module")
def ev():
    return offline.evaluate(user_subscription(), now=NOW)


def stack_file(tmp_path, *lines: str):
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    stack = (REPO_ROOT / "Pulumi.dev.yaml").read_text()
    keys = "".join(f"  azure-dl-training:{line}\n" for line in lines)
    (tmp_path / "Pulumi.dev.yaml").write_text(stack.replace("config:\n", "config:\n" + keys, 1))
    return tmp_path


def test_plan_states_the_default_mode_its_quota_and_the_vcpus_at_max_nodes():
    cfg = config.from_stack_file("dev")
    [line] = [line for line in plan.before_up(cfg) if line.startswith("Pool allocation:")]
    assert line.startswith("Pool allocation: batch-service (batchPoolAllocation, the default: Batch's docs advise "
                           "it for most cases and it needs nothing outside the resource group). The nodes draw on "
                           f"the Batch account's own dedicated {cfg.nodes.sku.quota_family} core quota, "
                           f"{cfg.nodes.max_nodes * cfg.nodes.sku.vcpus} vCPUs ({cfg.nodes.max_nodes} node(s) x "
                           f"{cfg.nodes.sku.vcpus}) at maxNodes"), line
    assert "1-3 Batch accounts per region" in line and "subscription's shared per-family quota" in line


def test_plan_states_the_subscriptions_quota_and_the_one_time_grant_in_user_subscription_mode():
    cfg = user_subscription()
    [line] = [line for line in plan.before_up(cfg) if line.startswith("Pool allocation:")]
    vcpus = cfg.nodes.max_nodes * cfg.nodes.sku.vcpus
    assert line.startswith("Pool allocation: user-subscription (batchPoolAllocation). The nodes are VMs in this "
                           f"subscription and draw on its per-family vCPU quota for {cfg.nodes.sku.quota_family} in "
                           f"{cfg.location}, {vcpus} vCPUs"), line
    assert f"--assignee-object-id {BATCH_SERVICE}" in line and f"--role {ORCHESTRATION}" in line
    spot = dataclasses.replace(cfg, nodes=dataclasses.replace(cfg.nodes, spot=True))
    [line] = [line for line in plan.before_up(spot) if line.startswith("Pool allocation:")]
    assert "Spot (low-priority) vCPU quota of the region" in line


def test_user_subscription_needs_the_batch_services_object_id_in_one_line(tmp_path):
    folder = stack_file(tmp_path, "batchPoolAllocation: user-subscription")
    with pytest.raises(ConfigError, match=r"batchServiceObjectId.*unset: batchPoolAllocation user-subscription needs "
                                          r"the object ID .*az ad sp show --id ddbf3205-c6bd-46ae-8127-60eb93363864"):
        config.from_stack_file("dev", folder)
    folder = stack_file(tmp_path, "batchPoolAllocation: user-subscription", "batchServiceObjectId: not-a-guid")
    with pytest.raises(ConfigError, match="batchServiceObjectId.*not-a-guid"):
        config.from_stack_file("dev", folder)
    folder = stack_file(tmp_path, "batchPoolAllocation: user-subscription", f"batchServiceObjectId: {BATCH_SERVICE}")
    nodes = config.from_stack_file("dev", folder).nodes
    assert (nodes.pool_allocation, nodes.batch_service_object_id) == ("user-subscription", BATCH_SERVICE)


def test_the_account_references_its_own_vault_and_the_batch_service_may_keep_secrets_there_only(ev):
    account = ev.one("azure-native:batch:BatchAccount")
    [vault] = [v for v in ev.of_type("azure-native:keyvault:Vault") if "cluster" in v.name]
    assert account.inputs["poolAllocationMode"] == "UserSubscription"
    assert account.inputs["allowedAuthenticationModes"] == ["AAD"]  # Azure AD only, as the mode requires
    assert account.inputs["keyVaultReference"] == {"id": vault.state["id"],
                                                   "url": f"https://{vault.inputs['vaultName']}.vault.azure.net/"}
    assert vault.inputs["resourceGroupName"] == account.inputs["resourceGroupName"]
    assert vault.inputs["location"] == account.inputs["location"]  # "same subscription and region"
    props = vault.inputs["properties"]
    assert props["enableRbacAuthorization"] is True and props["enablePurgeProtection"] is True
    assert props["networkAcls"] == {"defaultAction": "Deny", "bypass": "AzureServices"}  # Batch is a trusted service
    grants = [r for r in ev.of_type("azure-native:authorization:RoleAssignment")
              if r.inputs["principalId"] == BATCH_SERVICE]
    assert [(g.inputs["roleDefinitionId"].rsplit("/", 1)[-1], g.inputs["scope"]) for g in grants] == [
        (role_ids.KEY_VAULT_SECRETS_OFFICER, vault.state["id"])]  # nothing on the subscription: an owner's grant
    assert grants[0].urn in account.dependencies  # the account is created once Batch may use the vault
    # Only Batch Account - Create takes the mode and the vault: a change replaces the account (its fixed name first
    # freed), and plan says so.
    assert set(account.replace_on_changes) == {"poolAllocationMode", "keyVaultReference"}
    assert account.delete_before_replace is True
    assert "Changing the mode on a deployed stack replaces its Batch account and pool" in "".join(
        line for line in plan.before_up(ev.config) if line.startswith("Pool allocation:"))
    group = account.inputs["resourceGroupName"]
    findings = [f for f in security.apply_checks(
        [security.Subject(r.type, r.inputs, r.name, resource_group=group) for r in (account, vault, *grants)])
        if f.message]
    assert findings == [], findings
    # the Secrets Officer is refused on the group (it is a whole-resource role: one vault only)
    wider = {**grants[0].inputs, "scope": f"/subscriptions/{offline.SUBSCRIPTION}/resourceGroups/{group}"}
    assert any(f.message for f in security.apply_checks([security.Subject(grants[0].type, wider, "g",
                                                                          resource_group=group)]))


def test_the_vaults_name_is_new_after_destroy_and_stays_for_the_stacks_life(ev):
    """A deleted purge-protected vault holds its name for its retention days: a stack destroyed and brought up
    again within them must ask for another (as Azure ML's vault does: test_workspace.py)."""
    cfg = ev.config
    generation = ev.one("pulumi-python:dynamic:Resource", "cluster-names").state["generation"]
    [vault] = [v for v in ev.of_type("azure-native:keyvault:Vault") if "cluster" in v.name]
    name = vault.inputs["vaultName"]
    assert name == naming.key_vault(cfg.team, cfg.stack, cfg.location, generation, cfg.naming_subscription)
    assert 3 <= len(name) <= 24
    # Before, the name was fixed: the generation "batch" for every life of the stack.
    assert name != naming.key_vault(cfg.team, cfg.stack, cfg.location, "batch", cfg.naming_subscription)
    # A later run of the same stack proposes another generation and keeps the first (no diff: no new vault).
    provider = NameGenerationProvider()
    created = provider.create({"generation": generation})
    assert provider.diff(created.id, created.outs, {"generation": "20271231T000000Z"}).changes is False
    # destroy, then up a day later (within the 7 retention days): a new generation, a new vault name, and the
    # account's Key Vault reference follows it.
    again = offline.evaluate(cfg, now=NOW + timedelta(days=1))
    [vault2] = [v for v in again.of_type("azure-native:keyvault:Vault") if "cluster" in v.name]
    assert vault2.inputs["vaultName"] != name
    assert again.one("azure-native:batch:BatchAccount").inputs["keyVaultReference"]["url"] == \
        f"https://{vault2.inputs['vaultName']}.vault.azure.net/"


def test_batch_service_mode_declares_no_vault_for_the_account():
    ev = evaluation_for("dev")
    account = ev.one("azure-native:batch:BatchAccount")
    assert account.inputs["poolAllocationMode"] == "BatchService" and "keyVaultReference" not in account.inputs
    assert not [v for v in ev.of_type("azure-native:keyvault:Vault") if "cluster" in v.name]
    assert not [r for r in ev.of_type("pulumi-python:dynamic:Resource") if "names" in r.name]  # no generation


def run_preflight(needs, endpoint):
    arm = preflight.Arm(Token(), base_url=endpoint.url, connection_verify=endpoint.ca_file, retry_total=0)
    try:
        return {c.name: c for c in preflight.run(needs, SUBSCRIPTION, arm, None)}
    finally:
        arm.close()


def test_preflight_reads_the_subscriptions_family_usage_and_the_batch_services_role(ev, arm):
    needs = verdicts.needs(ev.config, [(r.type, r.inputs) for r in ev.resources], SUBSCRIPTION, offline.SUBSCRIPTION)
    assert (needs.pool_allocation, needs.batch_service_object_id) == ("user-subscription", BATCH_SERVICE)
    vcpus = needs.gpu_vcpus
    arm.usages = [usage("cores", 0, 1000), usage("standardNDASv4Family", 0, vcpus - 96), usage("standardDSv5Family", 0, 100)]
    checks = run_preflight(needs, arm)
    assert "batch quota" not in checks  # the account's own quota does not apply in this mode
    assert checks["quota"].verdict == FAIL and f"standardNDASv4Family (dedicated) needs {vcpus} vCPUs, " \
                                               f"{vcpus - 96} free" in checks["quota"].text
    role = checks["batch service role"]
    assert role.verdict == FAIL and f"--assignee-object-id {BATCH_SERVICE}" in role.text and \
        f"--scope /subscriptions/{SUBSCRIPTION}" in role.text and "batch-service" in role.text
    assert any(p.endswith("/providers/Microsoft.Authorization/roleAssignments") and v == "2022-04-01"
               for _, p, v, _ in arm.requests)
    # the owner's grant made, and quota for maxNodes: both pass
    arm.usages[1] = usage("standardNDASv4Family", 0, vcpus)
    arm.role_assignments = [role_assignment("someone-else", ORCHESTRATION, f"/subscriptions/{SUBSCRIPTION}"),
                            role_assignment(BATCH_SERVICE, ORCHESTRATION, f"/subscriptions/{SUBSCRIPTION}")]
    checks = run_preflight(needs, arm)
    assert checks["quota"].verdict == OK and checks["batch service role"].verdict == OK, checks
    # a role on one resource group is not the subscription's
    arm.role_assignments = [role_assignment(BATCH_SERVICE, ORCHESTRATION, f"/subscriptions/{SUBSCRIPTION}/"
                                                                          "resourceGroups/other")]
    assert run_preflight(needs, arm)["batch service role"].verdict == FAIL
