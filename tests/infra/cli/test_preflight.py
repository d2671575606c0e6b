"""`python -m infra preflight` at the wire: the real ARM pipeline (azure-mgmt-core) and the Retail Prices client
against a local HTTPS endpoint answering as the REST specs' examples do (tests/infra/backends/arm_endpoint.py):
each check's pass and its refusal, and the verb without a sign-in."""
import shutil
import subprocess
import sys
import time

import pytest

from infra import REPO_ROOT
from infra.backends import preflight
from infra.cli.main import main
from infra.core.preflight import subscription as verdicts
from infra.core.preflight.check import FAIL, OK, WARN
from infra.preview import offline
from tests.infra.backends.arm_endpoint import (CONTRIBUTOR, READER, SUBSCRIPTION, ArmEndpoint, deny,
                                               not_for_subscription, sas_expiry_policy, usage, vm_sku)
from tests.infra.backends.cost_endpoint import Token
from tests.infra.backends.test_signin_and_firewalls import NO_LOGIN_BOUND_S, no_azure_environment
from tests.infra.conftest import evaluation_for
from training.data import transfer

DEV_GPU = ("Standard_ND96asr_v4", "standardNDASv4Family", 96)  # the family as Resource SKUs names it
NFS_VM = ("Standard_D16s_v5", "standardDSv5Family", 16)


def needs_of(stack: str) -> verdicts.Needs:
    ev = evaluation_for(stack)
    return verdicts.needs(ev.config, [(r.type, r.inputs) for r in ev.resources], SUBSCRIPTION, offline.SUBSCRIPTION)


@pytest.fixture
def arm():
    endpoint = ArmEndpoint("westeurope", DEV_GPU, NFS_VM)
    yield endpoint
    endpoint.close()


@pytest.fixture
def aml_arm():  # nlp: Azure ML, 4 Spot ND96asr_v4 in westus2, no NFS VM
    endpoint = ArmEndpoint("westus2", DEV_GPU)
    yield endpoint
    endpoint.close()


def clients(endpoint: ArmEndpoint):
    return (preflight.Arm(Token(), base_url=endpoint.url, connection_verify=endpoint.ca_file, retry_total=0),
            preflight.RetailPrices(endpoint.url, connection_verify=endpoint.ca_file))


def run(stack: str, endpoint: ArmEndpoint) -> dict[str, verdicts.Check]:
    arm, prices = clients(endpoint)
    try:
        checks = preflight.run(needs_of(stack), SUBSCRIPTION, arm, prices)
    finally:
        arm.close()
        prices.close()
    return {c.name: c for c in checks}


def test_every_check_passes_on_a_subscription_that_can_run_the_stack(arm):
    checks = run("dev", arm)
    assert list(checks)[:8] == ["providers", "size Standard_ND96asr_v4", "size Standard_D16s_v5",
                                "batch size Standard_ND96asr_v4", "quota", "batch accounts", "batch quota", "roles"]
    assert sorted(n.split()[1] for n in checks if n.startswith("policy ")) == [
        "batchAccounts", "registries", "resourceGroups", "storageAccounts", "virtualMachines"]
    assert list(checks)[-1] == "price Standard_ND96asr_v4"
    assert [c.verdict for c in checks.values()].count(FAIL) == 0, [c.line() for c in checks.values()]
    # the Batch account is not there yet: its quota is known only after `up`
    assert checks["batch quota"].verdict == WARN and "rerun preflight" in checks["batch quota"].text
    assert "$27.20/h pay-as-you-go" in checks["price Standard_ND96asr_v4"].text  # Linux, not Windows nor Spot
    # the requests: the specs' api-versions, a storage account as ARM receives it
    versions = {(m, p.split("/providers/")[-1].split("/")[0], v) for m, p, v, _ in arm.requests if v}
    assert {v for m, p, v, _ in arm.requests if "/Microsoft.Batch/" in p} == {"2025-06-01"}  # not a retiring one
    assert ("GET", "Microsoft.Compute", "2021-07-01") in versions and \
        ("POST", "Microsoft.PolicyInsights", "2024-10-01") in versions
    storage = next(b["resourceDetails"] for m, p, v, b in arm.requests if b and b["resourceDetails"][
        "resourceContent"]["type"] == "Microsoft.Storage/storageAccounts")
    assert storage["apiVersion"] == "2024-01-01"
    assert storage["scope"] == f"/subscriptions/{SUBSCRIPTION}/resourceGroups/rg-dltrain-dev-dev"
    props = storage["resourceContent"]["properties"]
    assert props["supportsHttpsTrafficOnly"] is True and props["sasPolicy"]["expirationAction"] == "Block"
    assert props["networkRuleSet"]["ipRules"][0] == {"value": "203.0.113.0/24", "action": "Allow"}
    assert SUBSCRIPTION in props["networkRuleSet"]["virtualNetworkRules"][0]["virtualNetworkResourceId"]


def test_an_unregistered_provider_fails_with_the_register_command(arm):
    arm.providers["Microsoft.Batch"] = "NotRegistered"
    del arm.providers["Microsoft.ContainerRegistry"]
    check = run("dev", arm)["providers"]
    assert check.verdict == FAIL
    assert "az provider register --namespace Microsoft.Batch --wait" in check.text
    assert "Microsoft.ContainerRegistry (NotRegistered)" in check.text


def test_a_size_not_offered_to_the_subscription_fails(arm):
    arm.skus[0]["restrictions"] = [not_for_subscription("westeurope")]
    check = run("dev", arm)["size Standard_ND96asr_v4"]
    assert check.verdict == FAIL and "not to this subscription (NotAvailableForSubscription)" in check.text


def test_a_size_missing_from_the_region_or_from_batch_fails(arm):
    arm.skus = [s for s in arm.skus if s["name"] != "Standard_D16s_v5"]
    arm.batch_skus = []
    found = run("dev", arm)
    assert found["size Standard_D16s_v5"].verdict == FAIL and "not offered in westeurope (NFS server)" in \
        found["size Standard_D16s_v5"].text
    assert [c for c in found.values() if "Batch does not offer it" in c.text and c.verdict == FAIL]


def test_a_zone_restriction_is_a_note_for_a_stack_without_zones(arm):
    arm.skus[0]["restrictions"] = [not_for_subscription("westeurope", "Zone", ["1", "3"])]
    check = run("dev", arm)["size Standard_ND96asr_v4"]
    assert check.verdict == OK and "not in zones 1,3" in check.text


def test_batch_account_quota_below_max_nodes_fails_and_enough_passes(arm):
    arm.batch_account = {"name": "badev7698ff71", "location": "westeurope", "properties": {
        "accountEndpoint": "badev7698ff71.westeurope.batch.azure.com", "provisioningState": "Succeeded",
        "poolAllocationMode": "BatchService", "dedicatedCoreQuota": 500, "lowPriorityCoreQuota": 100,
        "dedicatedCoreQuotaPerVMFamily": [{"name": "standardA0_A7Family", "coreQuota": 20},
                                          {"name": "standardNDASv4Family", "coreQuota": 96}],
        "dedicatedCoreQuotaPerVMFamilyEnforced": True, "poolQuota": 100, "activeJobAndJobScheduleQuota": 300}}
    check = run("dev", arm)["batch quota"]
    assert check.verdict == FAIL and "is 96 vCPUs, maxNodes 2 x 96 needs 192" in check.text
    arm.batch_account["properties"]["dedicatedCoreQuotaPerVMFamily"][1]["coreQuota"] = 192
    assert run("dev", arm)["batch quota"].verdict == OK


def account(name: str, location: str = "westeurope", **quotas) -> dict:
    """A Batch account as BatchAccountList.json / BatchAccountGet.json (2025-06-01) write one."""
    return {"id": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/rg-{name}/providers/Microsoft.Batch/batchAccounts/"
                  f"{name}", "name": name, "type": "Microsoft.Batch/batchAccounts", "location": location,
            "identity": {"type": "None"},
            "properties": {"accountEndpoint": f"{name}.{location}.batch.azure.com", "provisioningState": "Succeeded",
                           "poolAllocationMode": "BatchService", "dedicatedCoreQuota": 500,
                           "lowPriorityCoreQuota": 100, "dedicatedCoreQuotaPerVMFamilyEnforced": True,
                           "dedicatedCoreQuotaPerVMFamily": [{"name": "standardNDASv4Family", "coreQuota": 192}],
                           "poolQuota": 100, "activeJobAndJobScheduleQuota": 300, **quotas}}


def test_a_region_whose_batch_account_quota_is_used_up_fails_with_the_fixes(arm):
    """Location - Get Quotas' accountQuota (1 in the spec's example) against Batch Account - List in the region."""
    arm.batch_accounts = [account("bateamb1"), account("bateamc1", "eastus")]
    check = run("dev", arm)["batch accounts"]
    assert check.verdict == FAIL and check.text.startswith(
        f"subscription {SUBSCRIPTION} has 1 Batch account(s) in westeurope (bateamb1) and may have 1 there: `up` cannot "
        "create badev")
    assert "another region (location) or subscription (azure-native:subscriptionId), use backend: azureml, or " \
           "request 2 Batch accounts per region in westeurope" in check.text
    arm.batch_account_quota = 3
    assert run("dev", arm)["batch accounts"].verdict == OK
    arm.batch_account_quota = 1
    arm.batch_account = account(needs_of("dev").batch_account)  # the stack's own: it holds its place
    assert run("dev", arm)["batch accounts"].verdict == OK


def test_an_existing_accounts_pool_and_job_quotas_of_zero_fail(arm):
    """New accounts' defaults were reduced, in some cases to zero (batch-quota-limit): poolQuota 0 stops `up` at the
    pool, activeJobAndJobScheduleQuota 0 every job."""
    arm.batch_account = account(needs_of("dev").batch_account, poolQuota=0, activeJobAndJobScheduleQuota=0)
    check = run("dev", arm)["batch limits"]
    assert check.verdict == FAIL and "poolQuota is 0 and it has 0 pool(s), so `up` cannot create pool gpu: request " \
                                     "poolQuota 1" in check.text
    assert "activeJobAndJobScheduleQuota is 0, so no job can be submitted" in check.text
    arm.batch_account["properties"].update(poolQuota=1, activeJobAndJobScheduleQuota=100)
    arm.batch_pools = [{"id": f"{arm.batch_account['id']}/pools/gpu", "name": "gpu",
                        "type": "Microsoft.Batch/batchAccounts/pools", "etag": "W/\"0x8D4EDFEBFADF4AB\"",
                        "properties": {"vmSize": "STANDARD_ND96ASR_V4"}}]
    assert run("dev", arm)["batch limits"].verdict == OK  # its own pool is already there
    arm.batch_account = None  # no account yet: batch quota says it is known after `up`
    assert "batch limits" not in run("dev", arm)


def test_subscription_quota_for_the_nfs_vm_and_azure_ml_spot_nodes(arm, aml_arm):
    arm.usages = [usage("cores", 990, 1000), usage("standardDSv5Family", 0, 100), usage("lowPriorityCores", 0, 0)]
    check = run("dev", arm)["quota"]
    assert check.verdict == FAIL and "cores (regional) needs 16 vCPUs, 10 free" in check.text
    # nlp: 4 Spot nodes of 96 vCPUs on the Spot quota
    aml_arm.usages = [usage("cores", 0, 1000), usage("lowPriorityCores", 100, 400)]
    check = run("nlp", aml_arm)["quota"]
    assert check.verdict == FAIL and "lowPriorityCores (Spot) needs 384 vCPUs, 300 free" in check.text and \
        "spot-quota" in check.text
    aml_arm.usages = [usage("cores", 0, 1000), usage("lowPriorityCores", 0, 400)]
    assert run("nlp", aml_arm)["quota"].verdict == OK


def test_roles_a_contributor_or_reader_cannot_create_role_assignments(arm):
    arm.permissions = CONTRIBUTOR
    check = run("dev", arm)["roles"]
    assert check.verdict == FAIL and "Microsoft.Authorization/roleAssignments/write" in check.text
    assert "--role 'User Access Administrator' --scope /subscriptions/" in check.text
    arm.permissions = READER
    check = run("dev", arm)["roles"]
    assert check.verdict == FAIL and "Microsoft.Resources/subscriptions/resourceGroups/write" in check.text
    # the group exists: asked at its scope, and an Owner there passes
    arm.group = {"id": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/rg-dltrain-dev-dev", "name":
                 "rg-dltrain-dev-dev", "location": "westeurope", "properties": {"provisioningState": "Succeeded"}}
    arm.permissions = [{"actions": ["Microsoft.Authorization/*", "*/write"], "notActions": []}]
    assert run("dev", arm)["roles"].verdict == OK
    assert any(p.endswith("/resourceGroups/rg-dltrain-dev-dev/providers/Microsoft.Authorization/permissions")
               for _, p, _, _ in arm.requests)


def test_policy_the_7_day_sas_deny_refuses_an_account_without_sas_policy(arm):
    arm.policy = sas_expiry_policy
    assert run("dev", arm)["policy storageAccounts stdeve54846c5"].verdict == OK  # the stack sets sasPolicy

    def without_sas_policy(body):
        body["resourceDetails"]["resourceContent"].get("properties", {}).pop("sasPolicy", None)
        return sas_expiry_policy(body)

    arm.policy = without_sas_policy
    check = run("dev", arm)["policy storageAccounts stdeve54846c5"]
    assert check.verdict == FAIL and "Microsoft.Storage/storageAccounts/sasPolicy" in check.text
    assert "az policy exemption create" in check.text


def test_policy_field_restrictions_as_the_specs_example_answers(arm):
    """PolicyRestrictions_CheckAtResourceGroupScope.json's answer: location 'west europe' denied, a tag required."""
    example = {"fieldRestrictions": [
        {"field": "tags.newtag", "restrictions": [{"result": "Required", "defaultValue": "defaultVal", "policy": {
            "policyAssignmentId": "/subscriptions/d8db/providers/microsoft.authorization/policyAssignments/57DAC8A0"},
            "policyEffect": "Deny", "reason": "tags.newtag is required"}]},
        {"field": "location", "restrictions": [{"result": "Deny", "values": ["west europe"], "policy": {
            "policyAssignmentId": "/subscriptions/d8db/providers/microsoft.authorization/policyAssignments/1563EBD3"},
            "policyEffect": "Deny", "reason": "location must be one of the following: eastus, westus, westus2"}]}],
        "contentEvaluationResult": {"policyEvaluations": [deny("type", definition="435CAE41")]}}
    arm.policy = lambda body: example
    check = run("dev", arm)["policy storageAccounts stdeve54846c5"]
    assert check.verdict == FAIL
    assert "location 'westeurope' is denied by" in check.text and "tags.newtag is required" in check.text
    assert "defaultVal" in check.text and "policyDefinitions/435CAE41" in check.text


def test_price_differs_or_is_missing_warns_and_never_fails(arm):
    arm.prices[0]["retailPrice"] = 40.0
    check = run("dev", arm)["price Standard_ND96asr_v4"]
    assert check.verdict == WARN and "$40.00/h" in check.text
    arm.prices = []
    assert run("dev", arm)["price Standard_ND96asr_v4"].verdict == WARN


def test_a_question_azure_refuses_fails_alone(arm):
    arm.refuse["Microsoft.Authorization/permissions"] = (403, "AuthorizationFailed", "The client does not have "
                                                         "authorization to perform action")
    checks = run("dev", arm)
    assert checks["roles"].verdict == FAIL and "403" in checks["roles"].text
    assert checks["providers"].verdict == OK and checks["policy storageAccounts stdeve54846c5"].verdict == OK


@pytest.fixture
def project(tmp_path):
    """A copy of the dev stack whose allowedIpRanges is a real address (the example's placeholder fails)."""
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    text = (REPO_ROOT / "Pulumi.dev.yaml").read_text().replace("[203.0.113.0/24]", "[20.50.1.2]")
    (tmp_path / "Pulumi.dev.yaml").write_text(text)
    return tmp_path


def test_the_verb_prints_one_line_per_check_and_exits_by_them(arm, project, capsys):
    argv = ["preflight", "--stack", "dev", "--project-dir", str(project)]
    assert main(argv, preflight_services=lambda: clients(arm)) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"preflight of stack dev (batch, 2 x Standard_ND96asr_v4 in westeurope) against "
                          f"subscription {SUBSCRIPTION}:")  # the one subscription the sign-in sees
    assert "nothing stops `pulumi up --stack dev`" in out
    arm.permissions = READER
    assert main(argv + ["--subscription", SUBSCRIPTION], preflight_services=lambda: clients(arm)) == 1
    out = capsys.readouterr().out
    assert "\nFAIL roles: " in out and "1 would stop `pulumi up` or the first job (roles)" in out


def test_the_examples_placeholder_address_fails_and_two_subscriptions_need_one_named(arm, capsys):
    assert main(["preflight", "--stack", "dev"], preflight_services=lambda: clients(arm)) == 1
    assert "FAIL config: allowedIpRanges: 203.0.113.0/24" in capsys.readouterr().out
    arm.subscriptions.append({**arm.subscriptions[0], "subscriptionId": "other", "displayName": "Other"})
    assert main(["preflight", "--stack", "dev"], preflight_services=lambda: clients(arm)) == 2
    assert "pass --subscription ID" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["preflight", "leftovers"])
def test_without_azure_sign_in_it_says_so_in_one_line_at_once(verb, tmp_path):
    (tmp_path / "home").mkdir()
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "infra", verb, "--stack", "dev"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=60,
                            env=no_azure_environment(tmp_path / "home"))
    assert result.returncode == 1 and result.stdout == "", result.stdout
    assert result.stderr.count("\n") == 1 and transfer.NOT_SIGNED_IN in result.stderr, result.stderr
    assert time.monotonic() - started < NO_LOGIN_BOUND_S


def test_a_bad_stack_name_is_one_line(tmp_path, capsys):
    assert main(["preflight", "--stack", "nosuch"], preflight_services=lambda: pytest.fail("asked Azure")) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_every_namespace_the_stacks_use_is_known():
    for stack in ("dev", "nlp", "trial"):
        assert all(ns.startswith("Microsoft.") for ns in needs_of(stack).namespaces), stack


def test_sku_verdict_spot_needs_low_priority_capable():
    sku = vm_sku("Standard_NC4as_T4_v3", "standardNCASv3_T4Family", 4, "eastus", low_priority=False)
    check, _ = verdicts.sku_verdict("Standard_NC4as_T4_v3", "eastus", [sku], "Batch pool", spot=True)
    assert check.verdict == FAIL and "set spot: false" in check.text


def test_plan_names_preflight_as_the_step_before_up():
    from infra.cli import plan

    text, _ = plan.render(evaluation_for("dev"))
    before = text.split("Before `pulumi up`\n", 1)[1]
    assert before.startswith("  - run `python -m infra preflight --stack dev`")
