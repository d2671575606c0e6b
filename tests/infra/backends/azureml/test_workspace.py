"""The Azure ML backend as the program declares it (mocks): workspace, private endpoint, GPU compute cluster,
datastore, environments, Key Vault, and that none of the Batch backend's resources come with it."""
import dataclasses
import subprocess
import sys
from datetime import timedelta

import pytest

from infra import REPO_ROOT
from infra.cli import plan
from infra.preview import offline
from infra.components import roles
from infra.backends.shared import StackOutputs
from infra.backends.azureml.workspace import WORKSPACE_DNS_ZONES, environment_version
from infra.components.name_generation import NameGenerationProvider
from infra.core.containers import AML_DATASTORES
from infra.core import naming
from infra.core.security import resources as security, firewalls as security_firewalls
from tests.infra.conftest import NOW
from infra.core.security.role_ids import role_key

ML = "azure-native:machinelearningservices"


def test_the_workspace_uses_the_stacks_own_resources_and_is_open_only_as_the_stack_says(aml_ev):
    ws = aml_ev.one(f"{ML}:Workspace").inputs
    assert ws["storageAccount"] == aml_ev.one("azure-native:storage:StorageAccount").state["id"]
    assert ws["containerRegistry"] == aml_ev.one("azure-native:containerregistry:Registry").state["id"]
    assert ws["applicationInsights"] == aml_ev.one("azure-native:applicationinsights:Component").state["id"]
    assert ws["keyVault"] == aml_ev.one("azure-native:keyvault:Vault").state["id"]
    public = aml_ev.config.aml.workspace_access == "public"
    assert ws["publicNetworkAccess"] == ("Enabled" if public else "Disabled")
    assert ws["systemDatastoresAuthMode"] == "identity"
    assert ws["identity"]["type"] == "SystemAssigned"


def test_the_workspace_is_reached_through_a_private_endpoint_with_its_dns_zones(aml_ev):
    endpoint = aml_ev.one("azure-native:network:PrivateEndpoint").inputs
    assert endpoint["subnet"]["id"] == aml_ev.outputs["storageSubnetId"]
    connection = endpoint["privateLinkServiceConnections"][0]
    assert connection["privateLinkServiceId"] == aml_ev.one(f"{ML}:Workspace").state["id"]
    assert connection["groupIds"] == ["amlworkspace"]
    zones = {z.inputs["privateZoneName"]: z.state["id"] for z in aml_ev.of_type("azure-native:privatedns:PrivateZone")}
    assert set(zones) == set(WORKSPACE_DNS_ZONES)
    links = aml_ev.of_type("azure-native:privatedns:VirtualNetworkLink")
    assert {link.inputs["virtualNetwork"]["id"] for link in links} == {aml_ev.outputs["vnetId"]}
    group = aml_ev.one("azure-native:network:PrivateDnsZoneGroup")
    assert {c["privateDnsZoneId"] for c in group.inputs["privateDnsZoneConfigs"]} == set(zones.values())
    # The cluster is created once the names resolve: after the zones' links and the endpoint's records.
    compute = aml_ev.one(f"{ML}:Compute")
    assert {group.urn, *(link.urn for link in links)} <= set(compute.dependencies)


def test_the_gpu_cluster_is_private_scales_to_min_and_runs_as_the_nodes_identity(aml_ev):
    cfg = aml_ev.config
    compute = aml_ev.one(f"{ML}:Compute")
    props = compute.inputs["properties"]
    cluster = props["properties"]
    assert props["computeType"] == "AmlCompute" and props["disableLocalAuth"] is True
    assert cluster["vmSize"] == cfg.nodes.gpu_sku
    assert cluster["vmPriority"] == ("LowPriority" if cfg.nodes.spot else "Dedicated")
    assert cluster["scaleSettings"] == {"minNodeCount": cfg.nodes.min_nodes, "maxNodeCount": cfg.nodes.max_nodes,
                                        "nodeIdleTimeBeforeScaleDown": f"PT{cfg.aml.idle_minutes}M"}
    assert cluster["subnet"]["id"] == aml_ev.outputs["computeSubnetId"]
    assert cluster["enableNodePublicIp"] is False and cluster["remoteLoginPortPublicAccess"] == "Disabled"
    nodes = aml_ev.outputs["pullIdentityId"]
    assert list(compute.inputs["identity"]["userAssignedIdentities"]) == [nodes]
    # What the docs say the cluster's identity does: pull the images, read (and write) the data by identity.
    principal = next(i.state["principalId"] for i in aml_ev.of_type("azure-native:managedidentity:UserAssignedIdentity")
                     if i.state["id"] == nodes)
    granted = {(a.inputs["scope"].rsplit("/", 1)[-1], role_key(a.inputs["roleDefinitionId"], a.inputs["scope"]))
               for a in aml_ev.of_type("azure-native:authorization:RoleAssignment")
               if a.inputs["principalId"] == principal}
    registry = aml_ev.one("azure-native:containerregistry:Registry").state["name"]
    assert granted >= {(registry, roles.ACR_PULL), ("data", roles.BLOB_DATA_READER),
                       ("outputs", roles.BLOB_DATA_WRITER)}


def test_data_and_outputs_are_datastores_without_a_secret(aml_ev):
    stores = {s.inputs["name"]: s.inputs["properties"] for s in aml_ev.of_type(f"{ML}:Datastore")}
    assert {store: props["containerName"] for store, props in stores.items()} == {
        store: container for container, store in AML_DATASTORES.items()}
    assert aml_ev.outputs["amlDatastores"] == AML_DATASTORES
    for props in stores.values():
        assert props["datastoreType"] == "AzureBlob" and props["accountName"] == aml_ev.outputs["storageAccountName"]
        assert props["credentials"] == {"credentialsType": "None"}


def test_one_environment_per_image_pinned_to_its_digest(aml_ev):
    versions = aml_ev.of_type(f"{ML}:EnvironmentVersion")
    assert len(versions) == len(aml_ev.config.registry.frameworks)
    for framework in aml_ev.config.registry.frameworks:
        image = aml_ev.outputs["imageRefs"][framework]
        version = next(v for v in versions if f"env-{framework}-" in v.name)
        assert "@sha256:" in image and version.inputs["properties"]["image"] == image
        assert version.inputs["version"] == environment_version(image)
        assert aml_ev.outputs["amlEnvironments"][framework] == f"dltrain-{framework}:{environment_version(image)}"
    # A new image makes a new version; the same image, the same one.
    assert environment_version("cr.io/pytorch@sha256:01") != environment_version("cr.io/pytorch@sha256:02")
    assert environment_version("cr.io/pytorch@sha256:01") == environment_version("cr.io/pytorch@sha256:01")


def test_the_key_vault_is_rbac_only_purge_protected_and_firewalled(aml_ev):
    vault = aml_ev.one("azure-native:keyvault:Vault").inputs["properties"]
    assert vault["enableRbacAuthorization"] is True and vault["enablePurgeProtection"] is True
    acls = vault["networkAcls"]
    assert acls["defaultAction"] == "Deny"
    assert [rule["value"] for rule in acls["ipRules"]] == list(
        security_firewalls.firewall_ip_rules(aml_ev.config.network.allowed_ip_ranges))
    assert {rule["id"] for rule in acls["virtualNetworkRules"]} == {aml_ev.outputs["computeSubnetId"],
                                                                   aml_ev.outputs["storageSubnetId"]}


def test_the_subnets_the_vault_admits_carry_the_key_vault_endpoint(aml_ev):
    """Else ARM refuses the vault: SubnetsHaveNoServiceEndpointsConfigured."""
    rules = aml_ev.one("azure-native:keyvault:Vault").inputs["properties"]["networkAcls"]["virtualNetworkRules"]
    subnets = {s.state["id"]: s.inputs for s in aml_ev.of_type("azure-native:network:Subnet")}
    for rule in rules:
        assert "Microsoft.KeyVault" in [e["service"] for e in subnets[rule["id"]]["serviceEndpoints"]], rule
    assert ("PASS", "vnet-rule-service-endpoints") in {v[:2] for v in plan.service_verdicts(aml_ev)}


def test_identity_datastores_the_nodes_and_the_deployer_may_use_the_workspace_storage(aml_ev):
    """azure-ai-ml uploads the code snapshot with the caller's identity; the cluster reads it and writes logs
    and MLflow artifacts with its own, in containers the workspace names: both on the account."""
    account = aml_ev.one("azure-native:storage:StorageAccount").state["id"]
    nodes = aml_ev.one("azure-native:managedidentity:UserAssignedIdentity", "pull-id").state["principalId"]
    on_account = {(g.inputs["principalId"], g.inputs["principalType"]): g
                  for g in aml_ev.of_type("azure-native:authorization:RoleAssignment") if g.inputs["scope"] == account}
    assert set(on_account) == {(nodes, "ServicePrincipal"), ("deployer", aml_ev.config.deployer_principal_type)}
    assert {role_key(g.inputs["roleDefinitionId"], g.inputs["scope"]) for g in on_account.values()} == {
        roles.BLOB_DATA_WRITER}
    job = next(r for r in aml_ev.of_type("pulumi-python:dynamic:Resource") if "workspace" in r.inputs)
    assert on_account[("deployer", aml_ev.config.deployer_principal_type)].urn in job.dependencies


def test_vault_and_workspace_names_change_with_each_new_stack_and_stay_for_its_life(aml_ev):
    """A deleted vault (purge protection) and workspace keep their names for 90 and 14 days: a stack destroyed
    and deployed again must not ask for them."""
    cfg = aml_ev.config
    generation = aml_ev.one("pulumi-python:dynamic:Resource", "ml-names").state["generation"]
    vault = aml_ev.one("azure-native:keyvault:Vault").inputs["vaultName"]
    workspace = aml_ev.one("azure-native:machinelearningservices:Workspace").inputs["workspaceName"]
    assert vault == naming.key_vault(cfg.team, cfg.stack, cfg.location, generation) and len(vault) <= 24
    assert workspace == naming.aml_workspace(cfg.team, cfg.stack, generation)
    assert aml_ev.outputs["amlWorkspaceName"] == workspace
    # The same stack's later runs propose another generation and keep the first (no change, no replacement).
    provider = NameGenerationProvider()
    created = provider.create({"generation": generation})
    assert created.outs == {"generation": generation}
    assert provider.diff(created.id, created.outs, {"generation": "20271231T000000Z"}).changes is False
    # A new stack (after destroy) gets new names.
    again = offline.evaluate(cfg, now=NOW + timedelta(days=1))
    assert again.one("azure-native:keyvault:Vault").inputs["vaultName"] != vault
    assert again.one("azure-native:machinelearningservices:Workspace").inputs["workspaceName"] != workspace


def test_no_batch_or_nfs_resource_comes_with_the_azureml_backend(aml_ev):
    types = {r.type for r in aml_ev.resources}
    assert not types & {"azure-native:batch:BatchAccount", "azure-native:batch:Pool", "azure-native:compute:VirtualMachine"}
    assert not [r for r in aml_ev.of_type("pulumi-python:dynamic:Resource") if "batch_endpoint" in r.inputs]  # no Batch job
    assert not any("nfs" in r.name for r in aml_ev.resources)
    assert aml_ev.outputs["backend"] == "azureml" and "poolId" not in aml_ev.outputs


@pytest.mark.parametrize("check,props,message", [
    ("aml-workspace-access", {"publicNetworkAccess": "Enabled", "systemDatastoresAuthMode": "identity"},
     "publicNetworkAccess must be Disabled"),
    ("aml-workspace-access", {"publicNetworkAccess": "Enabled", "systemDatastoresAuthMode": "identity",
                              "tags": {"network-access": "private"}}, "publicNetworkAccess must be Disabled"),
    ("aml-workspace-access", {"publicNetworkAccess": "Disabled", "systemDatastoresAuthMode": "accessKey"},
     "systemDatastoresAuthMode must be identity"),
    ("aml-compute-private", {"properties": {"disableLocalAuth": True, "properties": {
        "subnet": {"id": "s"}, "enableNodePublicIp": True, "remoteLoginPortPublicAccess": "Disabled"}}},
     "enableNodePublicIp must be false"),
    ("aml-compute-private", {"properties": {"disableLocalAuth": True, "properties": {
        "subnet": {"id": "s"}, "enableNodePublicIp": False, "remoteLoginPortPublicAccess": "NotSpecified"}}},
     "remoteLoginPortPublicAccess must be Disabled"),
    ("aml-datastore-no-secret", {"properties": {"credentials": {"credentialsType": "AccountKey"}}},
     "a datastore holds no key or SAS"),
    ("key-vault-locked", {"properties": {"enableRbacAuthorization": False}}, "enableRbacAuthorization must be true"),
])
def test_each_azureml_check_refuses_what_it_guards(check, props, message):
    validator = next(c for c in security.RESOURCE_CHECKS if c.name == check)
    assert message in (validator.validate(props) or "")


def test_plan_shows_the_azureml_resources_costs_and_what_is_not_built_yet():
    result = subprocess.run([sys.executable, "-m", "infra", "plan", "--stack", "nlp"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "backend azureml" in out and f"{ML}:Compute  dltrain-nlp-ml-gpu" in out
    assert "PASS aml-workspace-access" in out and "PASS aml-compute-private" in out
    assert "NFS" not in out.split("Estimated cost")[1].split("Training job")[0]
    # spot: true (Pulumi.nlp.yaml): the Spot rate bounded by the pay-as-you-go price, never a fixed discount.
    assert "spot: true: Spot nodes bill the Spot rate of Standard_ND96asr_v4 in westus2" in out
    assert "is at most the pay-as-you-go price: every node figure above is its upper bound" in out
    assert "bill less" not in out and "discount" not in out.replace("not a discounted estimate", "")
    assert "an evicted node bills until Azure removes it" in out
    # Azure ML sets no retries here and its docs do not say an evicted command job reruns: plan says so.
    assert "an eviction may end the run" in out and "requeued" not in out
    assert "launched on `pulumi up` as an Azure ML command job: pytorch (horovod) on 4 node(s) x 8 GPUs" in out
    assert ("Azure ML low-priority core quota (Spot nodes, spot: true; one for all VM families) in westus2: 384 vCPUs "
            "(4 node(s) x 96) for StandardNDASv4_A100Family") in out


def test_up_launches_the_job_from_the_same_outputs_submit_reads(aml_ev):
    from infra.backends.azureml.training_job import inputs_from
    from infra.backends.azureml import job as aml_job

    job = next(r for r in aml_ev.of_type("pulumi-python:dynamic:Resource") if "workspace" in r.inputs)
    assert job.inputs["workspace"] == aml_ev.outputs["amlWorkspaceName"]
    assert job.inputs["subscription_id"] == aml_ev.outputs["subscriptionId"]
    assert inputs_from(job.inputs) == aml_job.aml_job_inputs(aml_ev.config, StackOutputs.from_json(aml_ev.outputs))
    assert aml_ev.outputs["trainingJobId"] == aml_job.job_name(inputs_from(job.inputs))


def test_the_provider_submits_replaces_and_cancels_a_running_job_on_delete():
    from infra.backends.azureml.training_job import AmlTrainingJobProvider, inputs_from
    from tests.infra.conftest import evaluation_for
    from tests.infra.backends.azureml.fake_aml import FakeAmlJobs

    props = next(r for r in evaluation_for("nlp").of_type("pulumi-python:dynamic:Resource")
                 if "workspace" in r.inputs).inputs
    from infra.backends.staging import Readiness

    aml = FakeAmlJobs()
    provider = AmlTrainingJobProvider(aml, lambda data_url, status_url: Readiness(True, "`data` holds 160 files"))
    created = provider.create(props)
    outs = created.outs  # what the engine keeps, and hands back to diff and delete
    assert aml.calls == [("submit", created.id)] and outs["job_name"] == created.id
    submitted = aml.jobs[created.id]["job"]
    assert submitted.resources.instance_count == inputs_from(props).nodes
    # Only what the training depends on replaces the job (once it has ended: tests/infra/backends/test_job_resources.py);
    # the engine's floats are the same numbers.
    assert provider.diff(created.id, {**outs, "nodes": float(props["nodes"])}, props).changes is False
    aml.finish(created.id, {})
    assert provider.diff(created.id, outs, {**props, "train_args": ["--epochs", "1"]}).replaces == ["train_args"]
    # delete: a running job is cancelled, a finished one left alone, a gone one tolerated; history stays.
    aml.jobs[created.id]["status"] = "Running"
    provider.delete(created.id, outs)
    assert aml.calls[-1] == ("cancel", created.id) and created.id in aml.jobs
    provider.delete(created.id, outs)
    assert aml.calls.count(("cancel", created.id)) == 1
    provider.delete("gone", {**outs, "job_name": "gone"})


def test_a_private_workspace_is_reached_from_the_vnet_only_and_up_launches_no_job(aml_ev):
    """amlWorkspaceAccess private: public network access disabled, so `pulumi up` (outside the VNet) cannot
    submit; no job resource, no deployer grant for it, and plan says how to submit."""
    from infra.cli import plan

    cfg = dataclasses.replace(aml_ev.config, aml=dataclasses.replace(aml_ev.config.aml, workspace_access="private"),
                              training=dataclasses.replace(aml_ev.config.training, launch_on_up=True))
    ev = offline.evaluate(cfg, now=NOW)
    workspace = ev.one(f"{ML}:Workspace")
    assert workspace.inputs["publicNetworkAccess"] == "Disabled" and "network-access" not in workspace.inputs["tags"]
    assert not [r for r in ev.of_type("pulumi-python:dynamic:Resource") if "workspace" in r.inputs]
    assert ev.outputs["trainingJobId"] == ""
    text, secure = plan.render(ev)
    assert secure, text
    assert "not launched on `pulumi up`: the workspace is reached from the VNet only (amlWorkspaceAccess: private)" in text


def test_a_public_workspace_is_open_by_declared_choice_and_up_launches_the_job(aml_ev):
    cfg = dataclasses.replace(aml_ev.config, aml=dataclasses.replace(aml_ev.config.aml, workspace_access="public"),
                              training=dataclasses.replace(aml_ev.config.training, launch_on_up=True))
    ev = offline.evaluate(cfg, now=NOW)
    workspace = ev.one(f"{ML}:Workspace")
    assert workspace.inputs["publicNetworkAccess"] == "Enabled"
    assert workspace.inputs["tags"]["network-access"] == "public"
    assert [r for r in ev.of_type("pulumi-python:dynamic:Resource") if "workspace" in r.inputs]
    assert not [f for f in security.apply_checks([security.Subject(f"{ML}:Workspace", workspace.inputs)]) if f.message]


def test_the_nodes_account_wide_grant_cannot_rewrite_the_stacks_own_containers(aml_ev):
    """The nodes' identity needs Blob Data Contributor on the account for the workspace's containers; an ABAC
    condition keeps its writes out of data, scripts and status (the training code runs as that identity)."""
    account = aml_ev.one("azure-native:storage:StorageAccount").state["id"]
    nodes = aml_ev.one("azure-native:managedidentity:UserAssignedIdentity", "pull-id").state["principalId"]
    grant = next(g.inputs for g in aml_ev.of_type("azure-native:authorization:RoleAssignment")
                 if g.inputs["scope"] == account and g.inputs["principalId"] == nodes)
    assert grant["conditionVersion"] == "2.0"
    condition = " ".join(grant["condition"].split())
    for action in ("write", "add/action", "delete", "move/action"):
        assert f"!(ActionMatches{{'Microsoft.Storage/storageAccounts/blobServices/containers/blobs/{action}'}})" in condition
    assert "blobs/read" not in condition  # reading stays as the role gives it
    for container in ("data", "scripts", "status"):
        assert (f"@Resource[Microsoft.Storage/storageAccounts/blobServices/containers:name] StringNotEquals "
                f"'{container}'") in condition
    assert condition.startswith("( ( !(ActionMatches") and ") OR ( @Resource" in condition
