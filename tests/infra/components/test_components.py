"""Each component, for every stack file: the resources it declares and the properties that matter."""
import dataclasses
import json
import uuid
from datetime import timedelta

import pytest

from infra import REPO_ROOT
from infra.cli import plan
from infra.preview import offline
from infra.components import registry, roles
from infra.core import containers, naming
from infra.core.config import stack as config
from infra.core.security import firewalls as security_firewalls
from tests.infra.conftest import NOW
from infra.core.security.role_ids import role_key


def _children_of(ev, component_type):
    component = next(r for r in ev.resources if r.type == component_type)
    return component, [r for r in ev.resources if r.parent_urn == component.urn]


def test_components_own_their_children_and_name_them_after_themselves(ev):
    components = [r for r in ev.resources if not r.custom]
    assert {c.type for c in components} >= {"dltrain:index:Environment", "dltrain:network:Network",
                                            "dltrain:storage:Storage", "dltrain:registry:Registry",
                                            "dltrain:monitoring:Monitoring"}
    for component in components:
        for child in (r for r in ev.resources if r.parent_urn == component.urn):
            assert child.name.startswith(component.name + "-"), f"{child.urn} not named after {component.name}"
    # Nothing Azure-side is left at the top: every resource hangs off a component.
    assert all(r.parent_urn.endswith(f"Stack::azure-dl-training-{ev.config.stack}") is False
               for r in ev.resources if r.custom)


def test_network_vnet_subnets_nsgs_and_nat(ev):
    cfg = ev.config
    vnet = ev.one("azure-native:network:VirtualNetwork")
    assert vnet.inputs["addressSpace"]["addressPrefixes"] == [str(cfg.network.address_space)]
    assert vnet.inputs["location"] == cfg.location
    nat = ev.one("azure-native:network:NatGateway")
    nsgs = {r.state["id"]: r for r in ev.of_type("azure-native:network:NetworkSecurityGroup")}
    subnets = {s.name.rsplit("-", 1)[1]: s.inputs for s in ev.of_type("azure-native:network:Subnet")}
    assert subnets["compute"]["addressPrefix"] == str(cfg.network.compute_subnet)
    assert subnets["storage"]["addressPrefix"] == str(cfg.network.storage_subnet)
    for name, subnet in subnets.items():
        assert subnet["natGateway"]["id"] == nat.state["id"], f"{name} subnet has no NAT egress"
        assert "Microsoft.Storage" in [e["service"] for e in subnet["serviceEndpoints"]]
        rules = nsgs[subnet["networkSecurityGroup"]["id"]].inputs["securityRules"]
        inbound = sorted((r["priority"], r["access"], r["sourceAddressPrefix"]) for r in rules if r["direction"] == "Inbound")
        # VNet traffic (MPI, NCCL, NFS on any port) allowed first, the Internet denied.
        assert inbound == [(100, "Allow", "VirtualNetwork"), (4000, "Deny", "Internet")]
    assert len(nsgs) == 2
    public_ip = ev.one("azure-native:network:PublicIPAddress")
    assert nat.inputs["publicIpAddresses"] == [{"id": public_ip.state["id"]}]


def test_storage_account_invariants(ev):
    cfg = ev.config
    account = ev.one("azure-native:storage:StorageAccount", "-data-")
    p = account.inputs
    assert p["accountName"] == naming.storage_account(cfg.team, cfg.stack, cfg.location)
    assert len(p["accountName"]) <= 24 and p["accountName"].isalnum() and p["accountName"].islower()
    assert (p["kind"], p["enableHttpsTrafficOnly"], p["minimumTlsVersion"], p["allowBlobPublicAccess"]) == \
        ("StorageV2", True, "TLS1_2", False)
    rules = p["networkRuleSet"]
    assert rules["defaultAction"] == "Deny" and rules["bypass"] == "AzureServices"
    subnet_ids = sorted(s.state["id"] for s in ev.of_type("azure-native:network:Subnet"))
    assert sorted(r["virtualNetworkResourceId"] for r in rules["virtualNetworkRules"]) == subnet_ids
    assert [r["iPAddressOrRange"] for r in rules.get("ipRules", [])] == list(
        security_firewalls.firewall_ip_rules(cfg.network.allowed_ip_ranges))
    assert p["encryption"]["requireInfrastructureEncryption"] is True
    assert account.retain_on_delete == cfg.storage.retain_outputs
    assert ev.one("azure-native:resources:ResourceGroup").retain_on_delete == cfg.storage.retain_outputs


def test_storage_containers_and_no_file_share(ev):
    containers = {c.inputs["containerName"]: c for c in ev.of_type("azure-native:storage:BlobContainer")}
    assert set(containers) == {"data", "scripts", "outputs", "status"}
    assert all(c.inputs["publicAccess"] == "None" for c in containers.values())
    # Results go to `outputs`; the `results` share nothing used is gone, with its output.
    storage = next(r for r in ev.resources if r.type == "dltrain:storage:Storage")
    assert not [r for r in ev.of_type("azure-native:storage:FileShare") if r.parent_urn == storage.urn]
    assert "resultsShareName" not in ev.outputs
    urls = ev.outputs["containerUrls"]
    account = ev.outputs["storageAccountName"]
    assert urls == {c: f"https://{account}.blob.core.windows.net/{c}" for c in containers}


def test_scripts_holds_the_whole_runtime_package_and_nothing_else(ev):
    blobs = {b.inputs["blobName"]: b for b in ev.of_type("azure-native:storage:Blob")}
    in_scripts = {name for name, b in blobs.items() if b.inputs["containerName"] == "scripts"}
    shipped = {"training/" + p.relative_to(REPO_ROOT / "training").as_posix()
               for p in (REPO_ROOT / "training").rglob("*.py") if "__pycache__" not in p.parts}
    assert in_scripts == shipped
    # Subpackages travel (Batch keeps the folders below the prefix) and developer tools do not.
    assert {"training/__main__.py", "training/runner.py", "training/pytorch/loop.py", "training/tensorflow/loop.py",
            "training/data/stage.py", "training/cluster/node_ssh.py"} <= in_scripts
    assert not any(name.startswith(("devtools/", "tests/", "infra/")) for name in in_scripts)
    for name in in_scripts:
        assert blobs[name].inputs["source"].path == str(REPO_ROOT / name)


def test_sas_per_container_least_permission_https_bounded_expiry(ev):
    requests = {i.args["canonicalizedResource"].rsplit("/", 1)[1]: i.args for i in ev.invocations
                if i.token == "azure-native:storage:listStorageAccountServiceSAS"}
    assert {c: r["permissions"] for c, r in requests.items()} == {"data": "rl", "scripts": "rl", "outputs": "cw"}
    expected_expiry = (NOW.replace(minute=0, second=0) + timedelta(hours=ev.config.storage.sas_expiry_hours))
    for container, request in requests.items():
        assert request["canonicalizedResource"] == f"/blob/{ev.outputs['storageAccountName']}/{container}"
        assert request["protocols"] == "https" and request["resource"] == "c"
        assert request["sharedAccessExpiryTime"] == expected_expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
        # A signed start (the hour of `up`): under the account's Block policy a SAS without one is refused.
        assert request["sharedAccessStartTime"] == NOW.replace(minute=0, second=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    # Exported, and only as a secret.
    assert set(ev.outputs["sas"]) == {"data", "scripts", "outputs"}
    assert "sas" in ev.secret_outputs
    assert f"sp={requests['outputs']['permissions']}" in ev.outputs["sas"]["outputs"]


def test_sas_expiry_rounds_to_the_hour():
    assert containers.sas_expiry(NOW, 24) == "2026-11-22T12:00:00Z"


def test_no_account_key_is_ever_read_or_exported(ev):
    tokens = {i.token for i in ev.invocations}
    assert not tokens & {"azure-native:storage:listStorageAccountKeys",
                         "azure-native:containerregistry:listRegistryCredentials"}
    everything = json.dumps([ev.outputs] + [r.inputs for r in ev.resources], default=str)
    assert offline.MOCK_ACCOUNT_KEY not in everything
    assert "AccountKey=" not in everything
    plain = json.dumps({k: v for k, v in ev.outputs.items() if k not in ev.secret_outputs}, default=str)
    assert offline.MOCK_SAS_SIGNATURE not in plain


def test_registry_admin_disabled_identity_pull_and_scoped_push(ev):
    cfg = ev.config
    acr = ev.one("azure-native:containerregistry:Registry")
    assert acr.inputs["adminUserEnabled"] is False and acr.inputs["sku"]["name"] == cfg.registry.registry_sku
    identity = ev.one("azure-native:managedidentity:UserAssignedIdentity", "pull-id")
    pull = ev.one("azure-native:authorization:RoleAssignment", "acr-pull")
    assert pull.inputs["principalId"] == identity.state["principalId"]
    assert pull.inputs["roleDefinitionId"].endswith(f"/roleDefinitions/{roles.ACR_PULL}")
    assert pull.inputs["scope"] == acr.state["id"]
    scope = ev.one("azure-native:containerregistry:ScopeMap")
    assert sorted(scope.inputs["actions"]) == sorted(
        f"repositories/{fw}/content/{a}" for fw in cfg.registry.frameworks for a in ("read", "write"))
    token = ev.one("azure-native:containerregistry:Token")
    assert token.inputs["scopeMapId"] == scope.state["id"] and token.inputs["status"] == "enabled"
    password = ev.one("pulumi-python:dynamic:Resource", "push-password")
    assert password.inputs["token_id"] == token.state["id"]
    assert ev.outputs["pullIdentityId"] == identity.state["id"]


def test_one_image_per_framework_pushed_with_the_token(ev):
    cfg = ev.config
    images = {i.name: i.inputs for i in ev.of_type("docker-build:index:Image")}
    assert len(images) == len(cfg.registry.frameworks)
    login = ev.outputs["registryLoginServer"]
    for framework in cfg.registry.frameworks:
        image = next(v for k, v in images.items() if f"-{framework}-" in k)
        assert image["dockerfile"]["location"] == f"images/{framework}.Dockerfile"
        assert image["tags"] == [f"{login}/{framework}:{cfg.registry.image_tag}"]
        assert image["push"] is True and image["buildOnPreview"] is False
        assert image["platforms"] == ["linux/amd64"]
        (reg,) = image["registries"]
        assert reg["address"] == login and reg["username"] == "training-image-push"
        assert reg["password"] == "mock-token-password"  # the generated token password, not an admin one
        assert ev.outputs["imageRefs"][framework].startswith(f"{login}/{framework}:")


def test_token_password_expiry_is_stable_within_a_month():
    assert registry.token_expiry(NOW) == "2027-01-01T00:00:00Z"
    assert registry.token_expiry(NOW.replace(day=1)) == registry.token_expiry(NOW.replace(day=30))
    assert registry.token_expiry(NOW.replace(month=12)) == "2027-02-01T00:00:00Z"


def test_monitoring_workspace_app_insights_storage_and_batch_diagnostics(ev):
    workspace = ev.one("azure-native:operationalinsights:Workspace")
    assert workspace.inputs["retentionInDays"] == ev.config.monitoring.log_retention_days
    insights = ev.one("azure-native:applicationinsights:Component")
    assert insights.inputs["workspaceResourceId"] == workspace.state["id"]
    account_id = ev.one("azure-native:storage:StorageAccount", "-data-").state["id"]
    settings = {d.inputs["resourceUri"]: d.inputs for d in ev.of_type("azure-native:monitor:DiagnosticSetting")}
    watched = {account_id, f"{account_id}/blobServices/default",
               ev.one("azure-native:containerregistry:Registry").state["id"],
               *(guard.state["id"] for guard in ev.of_type("azure-native:logic:Workflow"))}  # a budget's guard
    if ev.config.backend == "batch":
        batch_id = ev.one("azure-native:batch:BatchAccount").state["id"]
        watched.add(batch_id)
        assert {log["category"] for log in settings[batch_id]["logs"]} == {"ServiceLog", "AuditLog"}
    else:
        aml_id = ev.one("azure-native:machinelearningservices:Workspace").state["id"]
        watched |= {aml_id, ev.one("azure-native:keyvault:Vault").state["id"]}
        assert {log["category"] for log in settings[aml_id]["logs"]} == {
            "AmlComputeClusterEvent", "AmlComputeJobEvent", "AmlComputeCpuGpuUtilization", "AmlRunStatusChangedEvent"}
    assert set(settings) == watched
    assert all(s["workspaceId"] == workspace.state["id"] for s in settings.values())
    blob_logs = {log["category"] for log in settings[f"{account_id}/blobServices/default"]["logs"]}
    assert blob_logs == {"StorageRead", "StorageWrite", "StorageDelete"}


def test_every_taggable_resource_carries_the_team_tag(ev):
    tagged = [r for r in ev.resources if r.custom and "tags" in r.inputs and r.type.startswith("azure-native:")]
    assert len(tagged) >= 8
    for resource in tagged:
        assert resource.inputs["tags"]["team"] == ev.config.team, resource.urn


def test_stack_outputs(ev):
    assert set(ev.outputs) >= {"resourceGroupName", "vnetId", "computeSubnetId", "storageSubnetId",
                               "storageAccountName", "containerUrls", "sas", "registryLoginServer", "imageRefs",
                               "pullIdentityId", "pullIdentityClientId", "logAnalyticsWorkspaceId"}
    assert ev.outputs["resourceGroupName"] == naming.resource_group(ev.config.team, ev.config.stack)


@pytest.mark.parametrize("stack", ["dev", "nlp"])
def test_single_addresses_reach_every_firewall_bare(stack):
    """Storage refuses /31 and /32 (the usual single egress address): each firewall gets what it accepts."""
    given = ("20.50.1.7/32", "20.60.1.0/31", "20.70.0.0/24")
    base = config.from_stack_file(stack)
    cfg = dataclasses.replace(base, network=dataclasses.replace(base.network, allowed_ip_ranges=given))
    ev = offline.evaluate(cfg, now=NOW)
    expected = ["20.50.1.7", "20.60.1.0", "20.60.1.1", "20.70.0.0/24"]
    account = ev.one("azure-native:storage:StorageAccount", "-data-").inputs
    assert [r["iPAddressOrRange"] for r in account["networkRuleSet"]["ipRules"]] == expected
    if cfg.backend == "batch":
        batch = ev.one("azure-native:batch:BatchAccount").inputs
        egress = ev.one("azure-native:network:PublicIPAddress", "egress").state["ipAddress"]  # the nodes' (keep_out)
        assert [r["value"] for r in batch["networkProfile"]["accountAccess"]["ipRules"]] == [*expected, egress]
    else:
        vault = ev.one("azure-native:keyvault:Vault").inputs
        assert [r["value"] for r in vault["properties"]["networkAcls"]["ipRules"]] == expected
    assert [v for v in plan.service_verdicts(ev) if v[0] == "FAIL"] == []


def test_role_assignment_names_are_seeded_with_scope_principal_and_role():
    name = roles.assignment_name("/subscriptions/s/x", "principal-a", roles.ACR_PULL)
    assert name == str(uuid.uuid5(uuid.NAMESPACE_URL, f"/subscriptions/s/x|principal-a|{roles.ACR_PULL}"))
    # Another principal (a recreated identity), scope (another stack or subscription) or role: another name.
    assert len({name, roles.assignment_name("/subscriptions/s/x", "principal-b", roles.ACR_PULL),
                roles.assignment_name("/subscriptions/t/x", "principal-a", roles.ACR_PULL),
                roles.assignment_name("/subscriptions/s/x", "principal-a", roles.BLOB_DATA_READER)}) == 4


def test_every_role_assignment_is_named_after_what_it_grants(ev):
    assignments = ev.of_type("azure-native:authorization:RoleAssignment")
    for assignment in assignments:
        p = assignment.inputs
        role = role_key(p["roleDefinitionId"], p["scope"])  # a custom role is named by its key
        assert p["roleAssignmentName"] == roles.assignment_name(p["scope"], p["principalId"], role), assignment.urn
        # A new name replaces it, and Azure refuses the same grant twice under two names: the old goes first.
        assert assignment.delete_before_replace, assignment.urn
    assert len({a.inputs["roleAssignmentName"] for a in assignments}) == len(assignments)
