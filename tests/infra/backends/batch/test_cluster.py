"""NFS server, Batch account, GPU pool and the TrainingJob resource, as the program declares them (mocks)."""
import base64
import dataclasses
import shlex

import pytest

from infra import REPO_ROOT
from infra.preview import offline
from infra.components import roles
from infra.backends.batch import nfs_user_data
from infra.backends.batch import spec as batch_spec
from infra.core.config import stack as config, schema as config_schema
from infra.backends.batch.cluster import HPC_IMAGE_VERSION, REPLACE_ON_CHANGES
from infra.backends.shared import StackOutputs
from infra.core.backend_facts import POOL_OS_DISK_GB
from tests.infra.conftest import BATCH_STACKS, NOW, evaluation_for
from infra.core.security.role_ids import role_key

POOL = "azure-native:batch:Pool"
_NFS_TIER: dict[str, offline.Evaluation] = {}


def nfs_tier(stack: str = "dev") -> offline.Evaluation:
    """The stack with dataTier nfs (the NFS server stages `data`, the ranks read the share), evaluated once."""
    if stack not in _NFS_TIER:
        cfg = config.from_stack_file(stack)
        _NFS_TIER[stack] = offline.evaluate(dataclasses.replace(cfg, nfs=dataclasses.replace(cfg.nfs, data_tier="nfs")),
                                            now=NOW)
    return _NFS_TIER[stack]


def stages_on_nfs(ev) -> bool:
    """Whether the stack's NFS server stages `data` and reports to `status` (nfsKind vm, dataTier nfs)."""
    return ev.config.nfs.kind == "vm" and ev.config.nfs.data_tier == "nfs"


@pytest.fixture(params=BATCH_STACKS)
def ev(request) -> offline.Evaluation:
    """Every stack of the Batch backend: this module's resources exist only there."""
    return evaluation_for(request.param)


def test_pool_is_an_infiniband_gpu_pool_in_the_compute_subnet_without_public_ips(ev):
    pool = ev.one(POOL).inputs
    sku = ev.config.nodes.sku
    # InfiniBand wherever a job may span nodes (the trial stack is one single-GPU node).
    assert pool["vmSize"] == ev.config.nodes.gpu_sku and (sku.infiniband or ev.config.nodes.max_nodes == 1)
    assert pool["interNodeCommunication"] == "Enabled"
    assert pool["taskSlotsPerNode"] == 1
    network = pool["networkConfiguration"]
    assert network["subnetId"] == ev.outputs["computeSubnetId"]
    assert network["publicIPAddressConfiguration"] == {"provision": "NoPublicIPAddresses"}
    vm = pool["deploymentConfiguration"]["virtualMachineConfiguration"]
    assert vm["imageReference"]["offer"] == "ubuntu-hpc"  # InfiniBand and GPU drivers come with the image
    # Ubuntu 24.04 and its agent: Batch's Ubuntu 22.04 support is on its retirement list (Azure/Batch issue 140).
    assert (vm["imageReference"]["sku"], vm["nodeAgentSkuId"]) == ("2404", "batch.node.ubuntu 24.04")
    # Pinned: every node of the pool boots the same image and NVIDIA driver (R580 in this release, for CUDA 13).
    assert vm["imageReference"]["version"] == HPC_IMAGE_VERSION == "24.04.2026072901"


def test_the_batch_api_version_is_the_sdks_and_plan_warns_while_batch_retires_it():
    """The account and pool go out with the API version pulumi-azure-native's batch module calls: read from the
    SDK itself, so a release that moves it fails here until cluster.py follows (and the warning goes)."""
    import inspect
    import re

    from infra.backends.batch import cluster
    from infra.cli import plan
    from pulumi_azure_native.batch import batch_account, pool

    for module in (pool, batch_account):
        assert set(re.findall(r"Uses Azure REST API version (\S+)\.", inspect.getsource(module))) == {
            cluster.BATCH_API_VERSION}, module.__name__
    warning = cluster.api_version_warning()
    assert cluster.BATCH_API_VERSION < cluster.BATCH_API_KEPT_FROM == "2025-06-01" and warning
    assert "Microsoft.Batch API 2024-07-01" in warning and "Azure/Batch/issues/140" in warning
    assert warning in plan.before_up(evaluation_for(BATCH_STACKS[0]).config)


def test_pool_pulls_images_with_the_managed_identity_not_a_password(ev):
    pool = ev.one(POOL).inputs
    identity_id = ev.one("azure-native:managedidentity:UserAssignedIdentity", "pull-id").state["id"]
    containers = pool["deploymentConfiguration"]["virtualMachineConfiguration"]["containerConfiguration"]
    assert containers["type"] == "DockerCompatible"
    # By tag: a digest in this replace-on-change property would redeploy the pool on every image rebuild.
    # Only the launched job's image is prefetched: the HPC image keeps Docker's images on the OS disk.
    assert containers["containerImageNames"] == [ev.outputs["imageRefs"][ev.config.training.image].split("@")[0]]
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
    nodes = ev.config.nodes
    assert formula == batch_spec.autoscale_formula(nodes.min_nodes, nodes.max_nodes, nodes.spot,
                                                   ev.config.training.allocation_timeout_minutes)
    assert f"$Target{'LowPriority' if nodes.spot else 'Dedicated'}Nodes = $target;" in formula
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
    # The deployers' addresses, and the NAT gateway's: a node keeping a failed node out calls the account from there.
    egress = ev.one("azure-native:network:PublicIPAddress", "egress").state["ipAddress"]
    assert [rule["value"] for rule in access.get("ipRules", [])] == [*ev.config.network.allowed_ip_ranges, egress]


def test_nfs_vm_is_private_keyless_and_exports_to_the_compute_subnet_only(ev):
    if ev.config.nfs.kind != "vm":
        pytest.skip("nfsKind azure-files: no file server VM (test_azure_files_kind_is_an_nfs_share_...)")
    vm = ev.one("azure-native:compute:VirtualMachine")
    nic = ev.one("azure-native:network:NetworkInterface").inputs
    assert nic["ipConfigurations"][0]["subnet"]["id"] == ev.outputs["storageSubnetId"]
    assert "publicIPAddress" not in nic["ipConfigurations"][0]
    linux = vm.inputs["osProfile"]["linuxConfiguration"]
    assert linux["disablePasswordAuthentication"] is True and "adminPassword" not in vm.inputs["osProfile"]
    assert len(vm.inputs["storageProfile"]["dataDisks"]) == ev.config.nfs.disk_count
    assert vm.ignore_changes == ["osProfile"]  # a new throwaway key must not replace the data server
    script = nfs_user_data.setup_script(str(ev.config.network.compute_subnet), ev.config.nfs.disk_count)
    exports = [line.strip() for line in script.splitlines() if "/etc/exports.d/" in line and "echo" in line]
    assert exports == [f'echo "/data {ev.config.network.compute_subnet}(rw,sync,no_subtree_check,no_root_squash)" '
                       '> /etc/exports.d/dltrain.exports']
    assert f"--raid-devices={ev.config.nfs.disk_count}" in script
    stage = nfs_user_data.stage_script()
    assert "python -m training stage env:DATA_CONTAINER_URL /data/imagenet --mark" in stage  # marks what it staged
    # The stager's own pins, as in .venv and the images.
    lines = (REPO_ROOT / "training" / "requirements-stage.txt").read_text().splitlines()
    pins = [pin for pin in (line.split("#")[0].strip() for line in lines) if pin]
    assert any(pin.startswith("azure-storage-blob==") for pin in pins)  # the stager's own pins, all of them
    assert f'pins="{" ".join(pins)}"' in stage and "pip install --quiet $pins" in stage


def test_nfs_vm_under_node_local_stages_nothing_and_holds_no_storage_role(ev):
    """dataTier node-local (the stacks' default): the nodes stage the dataset; the server only builds and exports
    /data (checkpoints, outputs), with no staging unit, stager or role on storage."""
    if ev.config.nfs.kind != "vm" or ev.config.nfs.data_tier != "node-local":
        pytest.skip("not an NFS VM under dataTier node-local")
    vm = ev.one("azure-native:compute:VirtualMachine")
    assert not [r for r in ev.of_type("azure-native:authorization:RoleAssignment") if "nfs" in r.name]
    user_data = base64.b64decode(vm.inputs["osProfile"]["customData"]).decode()
    assert "dltrain-nfs-setup" in user_data and "exportfs -ra" in user_data
    assert nfs_user_data.STAGE_UNIT not in user_data and "AZURE_CLIENT_ID" not in user_data
    assert "training stage" not in user_data and "sig=" not in user_data


def test_nfs_vm_reads_storage_with_its_own_identity_and_its_user_data_holds_no_sas():
    ev = nfs_tier()  # dataTier nfs: the server stages `data`
    vm = ev.one("azure-native:compute:VirtualMachine")
    identity_id = ev.one("azure-native:managedidentity:UserAssignedIdentity", "nfs-id").state["id"]
    assert vm.inputs["identity"]["type"] == "SystemAssigned, UserAssigned"  # Entra login + storage
    assert vm.inputs["identity"]["userAssignedIdentities"] == [identity_id]
    grants = [r.inputs for r in ev.of_type("azure-native:authorization:RoleAssignment") if "nfs" in r.name]
    container = {ev.one("azure-native:storage:BlobContainer", f"data-{c}").state["id"]: c
                 for c in ("data", "scripts", "status")}
    assert {container[g["scope"]]: role_key(g["roleDefinitionId"], g["scope"]) for g in grants} == {
        "data": roles.BLOB_DATA_READER, "scripts": roles.BLOB_DATA_READER, "status": roles.BLOB_DATA_WRITER}
    user_data = base64.b64decode(vm.inputs["osProfile"]["customData"]).decode()
    assert "sig=" not in user_data and "?sv=" not in user_data
    assert f"AZURE_CLIENT_ID={ev.one('azure-native:managedidentity:UserAssignedIdentity', 'nfs-id').state['clientId']}" \
        in user_data


def test_one_nfs_disk_needs_no_raid():
    script = nfs_user_data.setup_script("10.10.0.0/20", 1)
    assert "mdadm" not in script and 'device="${disks[0]}"' in script


def test_azure_files_kind_is_an_nfs_share_reachable_from_the_vnet_without_keys():
    dev = config.from_stack_file("dev")
    cfg = dataclasses.replace(dev, nfs=dataclasses.replace(dev.nfs, kind="azure-files", disk_size_gb=1024))
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
    assert job.inputs["nodes"] == ev.config.nodes.max_nodes and job.inputs["gpu_sku"] == ev.config.nodes.gpu_sku
    assert job.inputs["image"] == ev.outputs["imageRefs"][ev.config.training.image]
    assert job.inputs["pool_id"] == ev.outputs["poolId"]
    assert job.inputs["node_identity_id"] == ev.outputs["pullIdentityId"]
    assert job.inputs["scripts_url"] == ev.outputs["containerUrls"]["scripts"]
    assert "sig=" not in repr(job.inputs)
    # Submitted only once `data` holds the dataset and the NFS server reports it staged (vm kind; azure-files
    # stages at the job's start).
    # With dataTier node-local every node stages the dataset itself: `data` alone is checked.
    assert job.inputs["data_status_url"] == (ev.outputs["containerUrls"]["status"] if stages_on_nfs(ev) else "")
    assert job.inputs["data_container_url"] == ev.outputs["containerUrls"]["data"]
    assert job.inputs["max_hours"] == ev.config.training.max_hours
    assert ev.outputs["trainingJobId"].startswith(f"train-{ev.config.stack}-")
    # The nodes may read scripts and data and write outputs, each container on its own, before the job starts.
    grants = {r.name: r for r in ev.of_type("azure-native:authorization:RoleAssignment") if "nodes-" in r.name}
    roles_by_container = {r.inputs["scope"].rsplit("/", 1)[-1]: role_key(r.inputs["roleDefinitionId"], r.inputs["scope"])
                          for r in grants.values()}
    containers = {c: ev.one("azure-native:storage:BlobContainer", f"data-{c}").state["id"].rsplit("/", 1)[-1]
                  for c in ("data", "scripts", "outputs")}
    assert roles_by_container == {containers["scripts"]: roles.BLOB_DATA_READER,
                                  containers["data"]: roles.BLOB_DATA_READER,
                                  containers["outputs"]: roles.BLOB_DATA_WRITER}
    assert all("pull-id" in g.inputs["principalId"] for g in grants.values())  # the pool's identity


def test_launch_on_up_false_deploys_the_pool_without_a_job():
    dev = config.from_stack_file("dev")
    cfg = dataclasses.replace(dev, training=dataclasses.replace(dev.training, launch_on_up=False))
    ev = offline.evaluate(cfg, now=NOW)
    assert ev.one(POOL)
    assert not [r for r in ev.of_type("pulumi-python:dynamic:Resource") if "batch_endpoint" in r.inputs]
    assert ev.outputs["trainingJobId"] == ""


@pytest.mark.parametrize("stack", ["dev"])
def test_no_key_returning_function_is_called_and_no_output_carries_a_key(stack):
    ev = evaluation_for(stack)
    from infra.core.security import resources as security

    assert not {i.token for i in ev.invocations} & security.KEY_RETURNING_FUNCTIONS
    assert offline.MOCK_ACCOUNT_KEY not in repr(ev.outputs)


def test_up_and_submit_build_the_same_job_from_the_same_outputs(ev):
    """One mapping from stack config to job inputs: `pulumi up`'s job is what `infra submit` would send."""
    job = next(r for r in ev.of_type("pulumi-python:dynamic:Resource") if "batch_endpoint" in r.inputs)
    expected = dataclasses.asdict(batch_spec.job_inputs(ev.config, StackOutputs.from_json(ev.outputs)))
    expected["train_args"] = list(expected["train_args"])
    assert {name: job.inputs[name] for name in expected} == expected


def test_the_os_disk_holds_the_images_and_the_pool_waits_for_them(ev):
    """The HPC image keeps Docker's data root on the OS disk: it is sized for CUDA devel images, and the nodes
    (which prefetch the image when they start) are created only once the images are pushed."""
    pool = ev.one(POOL)
    os_disk = pool.inputs["deploymentConfiguration"]["virtualMachineConfiguration"]["osDisk"]
    assert os_disk == {"diskSizeGB": POOL_OS_DISK_GB, "caching": "ReadWrite", "managedDisk": {"storageAccountType": "Premium_LRS"}}
    images = {image.urn for image in ev.of_type("docker-build:index:Image")}
    assert images and images <= set(pool.dependencies)


def test_a_keras_job_prefetches_the_tensorflow_image_only():
    dev = config.from_stack_file("dev")
    cfg = dataclasses.replace(dev, training=dataclasses.replace(dev.training, framework="keras"))
    pool = offline.evaluate(cfg, now=NOW).one(POOL).inputs
    [name] = pool["deploymentConfiguration"]["virtualMachineConfiguration"]["containerConfiguration"][
        "containerImageNames"]
    assert name.endswith(f"/tensorflow:{cfg.registry.image_tag}")


def test_up_grants_the_deployer_what_up_itself_does_on_the_data_plane(ev):
    """Owner/Contributor carry no data actions: the staging check reads `status`, the job resource calls Batch."""
    deployer = {(g.inputs["scope"], role_key(g.inputs["roleDefinitionId"], g.inputs["scope"])): g
                for g in ev.of_type("azure-native:authorization:RoleAssignment") if g.inputs["principalId"] == "deployer"}
    data, status = (ev.one("azure-native:storage:BlobContainer", f"data-{c}").state["id"] for c in ("data", "status"))
    account = ev.one("azure-native:batch:BatchAccount").state["id"]
    # The staging report is read with nfsKind vm only (azure-files has no file server to report).
    assert set(deployer) == {(data, roles.BLOB_DATA_READER), (account, roles.BATCH_JOB_SUBMITTER),
                             *([(status, roles.BLOB_DATA_READER)] if stages_on_nfs(ev) else [])}
    assert {g.inputs["principalType"] for g in deployer.values()} == {ev.config.deployer_principal_type}
    assert all(g.inputs["description"].startswith(roles.DEPLOYER) for g in deployer.values())
    # The job is submitted (and deleted on destroy) while the grants exist.
    job = next(r for r in ev.of_type("pulumi-python:dynamic:Resource") if "batch_endpoint" in r.inputs)
    assert {g.urn for g in deployer.values()} <= set(job.dependencies)


def test_a_service_principal_deployer_is_granted_as_one_and_no_job_needs_no_grant():
    cfg = dataclasses.replace(config.from_stack_file("dev"), deployer_principal_type="ServicePrincipal")
    grants = [g.inputs for g in offline.evaluate(cfg, now=NOW).of_type("azure-native:authorization:RoleAssignment")
              if g.inputs["principalId"] == "deployer"]
    # `data` and the Batch account (dataTier node-local: no NFS staging report to read in `status`)
    assert len(grants) == 2 and {g["principalType"] for g in grants} == {"ServicePrincipal"}
    cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, launch_on_up=False))
    assert not [g for g in offline.evaluate(cfg, now=NOW).of_type("azure-native:authorization:RoleAssignment")
                if g.inputs["principalId"] == "deployer"]
    with pytest.raises(config_schema.ConfigError,
                       match="deployerPrincipalType.*'Group' is not one of User, ServicePrincipal"):
        config.parse("x", {"allowedIpRanges": ["20.50.1.7"], "deployerPrincipalType": "Group"})


# --- The autoscale formula, evaluated as Batch evaluates it ------------------------------------------------------

class Samples:
    """A Batch metric: its samples over the last 5 minutes, newest first, and what share of them exist."""

    def __init__(self, *values, percent=100):
        self.values, self.percent = list(values), percent

    def GetSample(self, arg):  # noqa: N802 - Batch's name
        return self.values[:int(arg)] if not isinstance(arg, Interval) else self.values

    def GetSamplePercent(self, _interval):  # noqa: N802
        return self.percent


# Interval and the formula evaluator (Batch's documented semantics) live with the rehearsal, which plays the same
# arithmetic when a node leaves the pool (devtools/rehearsal/autoscale.py).
from devtools.rehearsal.autoscale import Interval, evaluate_formula  # noqa: E402


@pytest.mark.parametrize("min_nodes,max_nodes,active,running,current,expected", [
    (0, 8, Samples(1, 1), Samples(0, 0), 0, 1),  # `submit --nodes 1`: one node, not 8
    (0, 8, Samples(2, 0), Samples(0, 0), 0, 2),  # a 2-node job queued within the last 5 minutes
    (0, 8, Samples(0, 0), Samples(1, 1), 2, 2),  # a job runs: its nodes stay
    (0, 8, Samples(1, 0), Samples(1, 1), 2, 3),  # a job runs on 2, another waits for 1
    (0, 2, Samples(4, 4), Samples(0, 0), 0, 2),  # never beyond maxNodes
    (0, 8, Samples(0, 0), Samples(0, 0), 3, 0),  # idle for 5 minutes: back to minNodes
    (1, 8, Samples(0, 0), Samples(0, 0), 3, 1),
    (0, 8, Samples(0, 2, percent=50), Samples(0, 0, percent=50), 0, 0),  # samples missing: the newest counts
    # The job has just started on its node: a minute ago it was still active. Its node, and no idle one more.
    (0, 8, Samples(0, 1), Samples(1, 0), 1, 1),
    (0, 8, Samples(0, 2, 2), Samples(1, 0, 0), 2, 2),
])
@pytest.mark.parametrize("spot", [False, True])
def test_the_pool_is_sized_from_the_nodes_its_jobs_ask_for(min_nodes, max_nodes, active, running, current, expected,
                                                           spot):
    """The same scenarios on dedicated and on Spot nodes (spot: true): the count goes to the kind the stack asks
    for, the other kind stays 0, and the nodes a running job holds are read from that kind."""
    pending = Samples(*(a + r for a, r in zip(active.values, running.values)), percent=active.percent)
    kind, other = ("LowPriority", "Dedicated") if spot else ("Dedicated", "LowPriority")
    env = evaluate_formula(batch_spec.autoscale_formula(min_nodes, max_nodes, spot), **{
        "$ActiveTasks": active, "$RunningTasks": running, "$PendingTasks": pending,
        f"$Current{kind}Nodes": float(current), f"$Current{other}Nodes": 0.0})
    assert env[f"$Target{kind}Nodes"] == expected
    assert env[f"$Target{other}Nodes"] == 0 and env["$NodeDeallocationOption"] == "taskcompletion"


@pytest.mark.parametrize("spot", [False, True])
def test_an_evicted_job_gets_its_nodes_back(spot):
    """A Spot node of a running 2-node job is evicted: Batch requeues the task (its 2 instances count as active
    again, https://learn.microsoft.com/azure/batch/batch-spot-vms), nothing runs, and the pool asks for 2 nodes of
    the same kind again, not 0 and not more."""
    kind = "LowPriority" if spot else "Dedicated"
    env = evaluate_formula(batch_spec.autoscale_formula(0, 8, spot), **{
        "$ActiveTasks": Samples(2, 0), "$RunningTasks": Samples(0, 1), "$PendingTasks": Samples(2, 1),
        "$CurrentDedicatedNodes": 0.0, "$CurrentLowPriorityNodes": 0.0, f"$Current{kind}Nodes": 1.0})
    assert env[f"$Target{kind}Nodes"] == 2


def test_the_pools_start_task_checks_node_health_and_a_node_that_fails_takes_no_task(ev):
    """BatchStartTask.waitForSuccess (Batch REST spec 2025-06-01): a start task that still fails after its retries
    leaves the node unusable, and no task is scheduled to it. The checks: infra/core/node_health.py."""
    from infra.core import node_health

    start = ev.one(POOL).inputs["startTask"]
    sku = ev.config.nodes.sku
    assert start["waitForSuccess"] is True
    assert start["userIdentity"]["autoUser"]["elevationLevel"] == "Admin"  # run-health-checks.sh runs docker
    if sku.health_conf:
        assert node_health.conf_path(sku) in start["commandLine"] and node_health.RUN_HEALTH_CHECKS in start["commandLine"]
    else:
        assert f"no configuration for {sku.name}" in start["commandLine"]


# --- dataTier node-local under Pulumi's mocks (issue 56) -----------------------------------------------------------

def test_node_local_pool_makes_the_volume_and_the_job_stages_its_dataset_with_the_pools_identity(batch_ev):
    """The pool's start task runs the local-volume script (its text, after the health checks) for
    $AZ_BATCH_NODE_SHARED_DIR/local-data; the job `up` launches runs node-stage for its dataset on every node in the
    coordination command, as the pool's identity, with the `data` URL and no SAS; the ranks read that folder."""
    ev = batch_ev
    assert ev.config.nfs.data_tier == "node-local"
    start = ev.one(POOL).inputs["startTask"]
    assert start["userIdentity"]["autoUser"]["elevationLevel"] == "Admin" and start["waitForSuccess"] is True
    [script] = shlex.split(start["commandLine"].removeprefix("/bin/bash -c "))  # what bash runs
    assert batch_spec.local_volume_command() in script
    assert script.index("node health") < script.index('local_volume.sh "$AZ_BATCH_NODE_SHARED_DIR"/local-data')
    job = next(r for r in ev.of_type("pulumi-python:dynamic:Resource") if "batch_endpoint" in r.inputs)
    inputs = batch_spec.job_inputs(ev.config, StackOutputs.from_json(ev.outputs))
    assert job.inputs["data_tier"] == "node-local" and job.inputs["data_url"] == ev.outputs["containerUrls"]["data"]
    task = batch_spec.task_spec(inputs, ev.outputs["trainingJobId"])
    coordination = task["multiInstanceSettings"]["coordinationCommandLine"]
    assert (f"AZURE_CLIENT_ID={ev.outputs['pullIdentityClientId']} python -m training node-stage "
            f"{ev.outputs['containerUrls']['data']} --dataset default") in coordination
    assert coordination.index("node-stage") < coordination.index("node-ssh")
    assert "local-data/datasets/default" in task["commandLine"] and "sig=" not in coordination + task["commandLine"]


def test_nfs_tier_keeps_the_share_as_the_data_path():
    ev = nfs_tier()
    start = ev.one(POOL).inputs["startTask"]["commandLine"]
    assert "local_volume" not in start
    job = next(r for r in ev.of_type("pulumi-python:dynamic:Resource") if "batch_endpoint" in r.inputs)
    assert job.inputs["data_tier"] == "nfs" and job.inputs["data_url"] == ""
    assert job.inputs["data_status_url"] == ev.outputs["containerUrls"]["status"]
    deployer = {g.inputs["scope"].rsplit("/", 1)[-1] for g in ev.of_type("azure-native:authorization:RoleAssignment")
                if g.inputs["principalId"] == "deployer"}
    assert "status" in deployer  # it reads the NFS server's staging report before submitting


def test_plan_says_where_the_ranks_read_and_which_commands_put_the_data_there():
    """Beside the job's launch line: the start task's volume and the coordination command's node-stage (node-local),
    or the NFS share's copy (nfs)."""
    from infra.backends import backend

    cfg = config.from_stack_file("dev")
    lines = backend("batch").launch_lines(cfg)
    [data] = [line for line in lines if line.startswith("  data (dataTier")]
    assert "start task makes each node's local volume after the health checks (local_volume.sh" in data
    assert "coordination command stages its dataset onto it on every node before the job's sshd" in data
    assert "node-stage <data URL> --dataset NAME`, the pool's identity, no SAS" in data
    nfs = dataclasses.replace(cfg, nfs=dataclasses.replace(cfg.nfs, data_tier="nfs", data_local_cache=True))
    [data] = [line for line in backend("batch").launch_lines(nfs) if line.startswith("  data (dataTier")]
    assert data == ("  data (dataTier nfs): the ranks read the NFS share's copy of `data`, copied to each node's disk "
                    "by the start task (dataLocalCache); the NFS server stages it")
