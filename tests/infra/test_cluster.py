"""NFS server, Batch account, GPU pool and the TrainingJob resource, as the program declares them (mocks)."""
import base64
import dataclasses

import pytest

from infra import REPO_ROOT
from infra.cli import offline
from infra.components import roles
from infra.core import nfs_user_data
from infra.core import batch_spec, config
from infra.components.cluster import REPLACE_ON_CHANGES
from tests.infra.conftest import BATCH_STACKS, NOW, evaluation_for

POOL = "azure-native:batch:Pool"


@pytest.fixture(params=BATCH_STACKS)
def ev(request) -> offline.Evaluation:
    """Every stack of the Batch backend: this module's resources exist only there."""
    return evaluation_for(request.param)


def test_pool_is_an_infiniband_gpu_pool_in_the_compute_subnet_without_public_ips(ev):
    pool = ev.one(POOL).inputs
    sku = ev.config.sku
    assert pool["vmSize"] == ev.config.gpu_sku and sku.infiniband
    assert pool["interNodeCommunication"] == "Enabled"
    assert pool["taskSlotsPerNode"] == 1
    network = pool["networkConfiguration"]
    assert network["subnetId"] == ev.outputs["computeSubnetId"]
    assert network["publicIPAddressConfiguration"] == {"provision": "NoPublicIPAddresses"}
    vm = pool["deploymentConfiguration"]["virtualMachineConfiguration"]
    assert vm["imageReference"]["offer"] == "ubuntu-hpc"  # InfiniBand and GPU drivers come with the image


def test_pool_pulls_images_with_the_managed_identity_not_a_password(ev):
    pool = ev.one(POOL).inputs
    identity_id = ev.one("azure-native:managedidentity:UserAssignedIdentity", "pull-id").state["id"]
    containers = pool["deploymentConfiguration"]["virtualMachineConfiguration"]["containerConfiguration"]
    assert containers["type"] == "DockerCompatible"
    # By tag: a digest in this replace-on-change property would redeploy the pool on every image rebuild.
    tags = {ref.split("@")[0] for ref in ev.outputs["imageRefs"].values()}
    assert set(containers["containerImageNames"]) == tags
    assert not any("@sha256:" in name for name in containers["containerImageNames"])
    [registry] = containers["containerRegistries"]
    assert registry == {"registryServer": ev.outputs["registryLoginServer"],
                        "identityReference": {"resourceId": identity_id}}
    assert pool["identity"]["userAssignedIdentities"] == [identity_id]


def test_pool_mounts_the_nfs_share_and_autoscales_from_zero(ev):
    pool = ev.one(POOL).inputs
    [mount] = pool["mountConfiguration"]
    assert mount["nfsMountConfiguration"]["source"] == ev.outputs["nfsMountSource"]
    assert mount["nfsMountConfiguration"]["relativeMountPath"] == batch_spec.NFS_MOUNT
    formula = pool["scaleSettings"]["autoScale"]["formula"]
    assert f"$target = $tasks > 0 ? {ev.config.max_nodes} : {ev.config.min_nodes};" in formula
    assert "$NodeDeallocationOption = taskcompletion;" in formula
    assert "fixedScale" not in pool["scaleSettings"]


def test_pool_is_replaced_when_azure_cannot_update_a_property(ev):
    pool = ev.one(POOL)
    assert {"vmSize", "deploymentConfiguration", "networkConfiguration", "interNodeCommunication",
            "mountConfiguration"} <= set(REPLACE_ON_CHANGES)
    assert pool.replace_on_changes == REPLACE_ON_CHANGES


def test_batch_account_takes_azure_ad_only_and_denies_by_default(ev):
    account = ev.one("azure-native:batch:BatchAccount").inputs
    assert account["allowedAuthenticationModes"] == ["AAD"]
    access = account["networkProfile"]["accountAccess"]
    assert access["defaultAction"] == "Deny"
    assert [rule["value"] for rule in access.get("ipRules", [])] == list(ev.config.allowed_ip_ranges)


def test_nfs_vm_is_private_keyless_and_exports_to_the_compute_subnet_only(ev):
    vm = ev.one("azure-native:compute:VirtualMachine")
    nic = ev.one("azure-native:network:NetworkInterface").inputs
    assert nic["ipConfigurations"][0]["subnet"]["id"] == ev.outputs["storageSubnetId"]
    assert "publicIPAddress" not in nic["ipConfigurations"][0]
    linux = vm.inputs["osProfile"]["linuxConfiguration"]
    assert linux["disablePasswordAuthentication"] is True and "adminPassword" not in vm.inputs["osProfile"]
    assert len(vm.inputs["storageProfile"]["dataDisks"]) == ev.config.nfs_disk_count
    assert vm.ignore_changes == ["osProfile"]  # a new throwaway key must not replace the data server
    script = nfs_user_data.setup_script(str(ev.config.compute_subnet), ev.config.nfs_disk_count)
    exports = [line.strip() for line in script.splitlines() if "/etc/exports.d/" in line and "echo" in line]
    assert exports == [f'echo "/data {ev.config.compute_subnet}(rw,async,no_subtree_check,no_root_squash)" '
                       '> /etc/exports.d/dltrain.exports']
    assert f"--raid-devices={ev.config.nfs_disk_count}" in script
    stage = nfs_user_data.stage_script()
    assert 'python -m training stage "$DATA_CONTAINER_URL" /data/imagenet' in stage
    assert "touch /data/imagenet/.staged" in stage
    # The stager's own pins, as in .venv and the images.
    lines = (REPO_ROOT / "training" / "requirements-stage.txt").read_text().splitlines()
    pins = [pin for pin in (line.split("#")[0].strip() for line in lines) if pin]
    assert any(pin.startswith("azure-storage-blob==") for pin in pins)  # the stager's own pins, all of them
    assert f"pip install --quiet {' '.join(pins)}" in stage


def test_nfs_vm_reads_storage_with_its_own_identity_and_its_user_data_holds_no_sas(ev):
    vm = ev.one("azure-native:compute:VirtualMachine")
    identity_id = ev.one("azure-native:managedidentity:UserAssignedIdentity", "nfs-id").state["id"]
    assert vm.inputs["identity"]["type"] == "SystemAssigned, UserAssigned"  # Entra login + storage
    assert vm.inputs["identity"]["userAssignedIdentities"] == [identity_id]
    grants = [r.inputs for r in ev.of_type("azure-native:authorization:RoleAssignment") if "nfs" in r.name]
    container = {ev.one("azure-native:storage:BlobContainer", f"data-{c}").state["id"]: c
                 for c in ("data", "scripts", "status")}
    assert {container[g["scope"]]: g["roleDefinitionId"].rsplit("/", 1)[-1] for g in grants} == {
        "data": roles.BLOB_DATA_READER, "scripts": roles.BLOB_DATA_READER, "status": roles.BLOB_DATA_CONTRIBUTOR}
    user_data = base64.b64decode(vm.inputs["osProfile"]["customData"]).decode()
    assert "sig=" not in user_data and "?sv=" not in user_data
    assert f"AZURE_CLIENT_ID={ev.one('azure-native:managedidentity:UserAssignedIdentity', 'nfs-id').state['clientId']}" \
        in user_data


def test_one_nfs_disk_needs_no_raid():
    script = nfs_user_data.setup_script("10.10.0.0/20", 1)
    assert "mdadm" not in script and 'device="${disks[0]}"' in script


def test_azure_files_kind_is_an_nfs_share_reachable_from_the_vnet_without_keys():
    cfg = dataclasses.replace(config.from_stack_file("dev"), nfs_kind="azure-files", nfs_disk_size_gb=1024)
    ev = offline.evaluate(cfg, now=NOW)
    assert not ev.of_type("azure-native:compute:VirtualMachine")
    account = ev.one("azure-native:storage:StorageAccount", "nfs").inputs
    assert account["kind"] == "FileStorage" and account["allowSharedKeyAccess"] is False
    assert account["networkRuleSet"]["defaultAction"] == "Deny"
    share = ev.one("azure-native:storage:FileShare", "nfs").inputs
    assert share["enabledProtocols"] == "NFS" and share["shareQuota"] == 1024
    assert ev.outputs["nfsMountSource"].endswith(".file.core.windows.net:/" + account["accountName"] + "/data")
    from infra.cli import plan

    text, secure = plan.render(ev)
    assert secure, text  # https-only is waived for the NFS account only because it is keyless and VNet-only


def test_training_job_is_launched_on_up_with_the_nodes_identity_and_no_sas(ev):
    job = next(r for r in ev.of_type("pulumi-python:dynamic:Resource") if "batch_endpoint" in r.inputs)
    assert job.inputs["nodes"] == ev.config.max_nodes and job.inputs["gpu_sku"] == ev.config.gpu_sku
    assert job.inputs["image"] == ev.outputs["imageRefs"][ev.config.training_image]
    assert job.inputs["pool_id"] == ev.outputs["poolId"]
    assert job.inputs["node_identity_id"] == ev.outputs["pullIdentityId"]
    assert job.inputs["scripts_url"] == ev.outputs["containerUrls"]["scripts"]
    assert "sig=" not in repr(job.inputs)
    # Submitted only once the NFS server reports the data staged (vm kind).
    assert job.inputs["data_status_url"] == ev.outputs["containerUrls"]["status"]
    assert job.inputs["max_hours"] == ev.config.training_max_hours
    assert ev.outputs["trainingJobId"].startswith(f"train-{ev.config.stack}-")
    # The nodes may read scripts and data and write outputs, each container on its own, before the job starts.
    grants = {r.name: r for r in ev.of_type("azure-native:authorization:RoleAssignment") if "nodes-" in r.name}
    roles_by_container = {r.inputs["scope"].rsplit("/", 1)[-1]: r.inputs["roleDefinitionId"].rsplit("/", 1)[-1]
                          for r in grants.values()}
    containers = {c: ev.one("azure-native:storage:BlobContainer", f"data-{c}").state["id"].rsplit("/", 1)[-1]
                  for c in ("data", "scripts", "outputs")}
    assert roles_by_container == {containers["scripts"]: roles.BLOB_DATA_READER,
                                  containers["data"]: roles.BLOB_DATA_READER,
                                  containers["outputs"]: roles.BLOB_DATA_CONTRIBUTOR}
    assert all("pull-id" in g.inputs["principalId"] for g in grants.values())  # the pool's identity


def test_launch_on_up_false_deploys_the_pool_without_a_job():
    cfg = dataclasses.replace(config.from_stack_file("dev"), training_launch_on_up=False)
    ev = offline.evaluate(cfg, now=NOW)
    assert ev.one(POOL)
    assert not [r for r in ev.of_type("pulumi-python:dynamic:Resource") if "batch_endpoint" in r.inputs]
    assert ev.outputs["trainingJobId"] == ""


@pytest.mark.parametrize("stack", ["dev"])
def test_no_key_returning_function_is_called_and_no_output_carries_a_key(stack):
    ev = evaluation_for(stack)
    from infra.core import security

    assert not {i.token for i in ev.invocations} & security.KEY_RETURNING_FUNCTIONS
    assert offline.MOCK_ACCOUNT_KEY not in repr(ev.outputs)


def test_up_and_submit_build_the_same_job_from_the_same_outputs(ev):
    """One mapping from stack config to job inputs: `pulumi up`'s job is what `infra submit` would send."""
    job = next(r for r in ev.of_type("pulumi-python:dynamic:Resource") if "batch_endpoint" in r.inputs)
    expected = dataclasses.asdict(batch_spec.job_inputs(ev.config, ev.outputs))
    expected["train_args"] = list(expected["train_args"])
    assert {name: job.inputs[name] for name in expected} == expected
