import ipaddress
import itertools
import operator

import pytest
import yaml

from infra import REPO_ROOT
from infra.core.config import stack as config
from infra.core.config.stack import parse
from infra.core.config.schema import ConfigError
from tests.infra.conftest import STACKS

# What every stack must set (the deployers' egress IP); the cases below add their own values to it.
BASE = {"allowedIpRanges": ["20.50.1.7/32"]}


def test_repo_has_dev_and_a_second_team_stack():
    assert "dev" in STACKS and len(STACKS) >= 2


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_file_is_valid(stack):
    cfg = config.from_stack_file(stack)
    assert cfg.stack == stack and cfg.team


def test_team_stacks_differ_where_teams_differ():
    a, b = (config.from_stack_file(s) for s in ("dev", "vision"))
    for attr in ("team", "location", "nodes.gpu_sku", "nodes.max_nodes", "network.address_space",
                 "storage.retain_outputs"):
        assert operator.attrgetter(attr)(a) != operator.attrgetter(attr)(b), attr


def test_team_address_spaces_do_not_overlap_so_they_can_be_peered():
    spaces = {s: config.from_stack_file(s).network.address_space for s in STACKS}
    for (s1, n1), (s2, n2) in itertools.combinations(spaces.items(), 2):
        assert not n1.overlaps(n2), f"{s1} {n1} overlaps {s2} {n2}"


def test_a_new_key_needs_its_schema_entry_and_one_field(tmp_path):
    """Adding a key: Pulumi.yaml and a StackConfig field; a schema entry without a field is refused at once."""
    project = yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())
    project["config"]["gpuCountHint"] = {"type": "integer", "default": 1, "description": "not a field"}
    (tmp_path / "Pulumi.yaml").write_text(yaml.safe_dump(project))
    with pytest.raises(ConfigError, match="gpu_count_hint.*not a StackConfig field"):
        config.parse("dev", {}, config.load_schema(tmp_path / "Pulumi.yaml"))


def test_schema_declares_type_default_and_description_for_every_field():
    schema = config.load_schema()
    assert set(schema) == set(config.KEYS)  # each key lands in one section field (or a StackConfig one)
    for key in schema.values():
        assert key.type in ("string", "integer", "boolean", "array", "object"), key.name
        assert key.default is not None, key.name
        assert len(key.description) > 20, key.name


def test_defaults_need_only_the_deployers_address():
    with pytest.raises(ConfigError, match="allowedIpRanges.*is empty.*cannot upload the scripts"):
        parse("x", {})
    cfg = parse("x", BASE)
    assert cfg.team == "dev" and cfg.nodes.max_nodes == 2 and cfg.network.address_space == ipaddress.IPv4Network("10.10.0.0/16")


def test_values_as_pulumi_passes_them_are_strings():
    cfg = parse("x", {"maxNodes": "4", "retainOutputs": "true", "frameworks": '["pytorch"]',
                      "allowedIpRanges": '["20.50.1.7/32"]'})
    assert (cfg.nodes.max_nodes, cfg.storage.retain_outputs, cfg.registry.frameworks) == (4, True, ("pytorch",))


BAD_CONFIGS = [
    # (values, key named in the error, words of the fix)
    ({"team": "Vision"}, "team", "lowercase"),
    ({"team": "a"}, "team", "2-12"),
    ({"team": "averyveryverylongteam"}, "team", "2-12"),
    ({"location": "West Europe"}, "location", "region"),
    ({"addressSpace": "10.10.0.0"}, "addressSpace", "CIDR"),
    ({"addressSpace": "10.10.0.1/16"}, "addressSpace", "host bits"),
    ({"addressSpace": "52.10.0.0/16"}, "addressSpace", "private"),
    ({"addressSpace": "10.10.0.0/28"}, "addressSpace", "too small"),
    ({"reservedAddressSpaces": ["10.10.128.0/17"]}, "addressSpace", "overlaps reserved"),
    ({"reservedAddressSpaces": ["hub"]}, "reservedAddressSpaces", "CIDR"),
    ({"computeSubnet": "10.11.0.0/20"}, "computeSubnet", "not inside"),
    ({"storageSubnet": "192.168.0.0/24"}, "storageSubnet", "not inside"),
    ({"storageSubnet": "10.10.8.0/24"}, "storageSubnet", "overlaps computeSubnet"),
    ({"computeSubnet": "10.10.0.0/29", "maxNodes": 8}, "computeSubnet", "usable addresses"),
    ({"allowedIpRanges": ["10.1.2.3/32"]}, "allowedIpRanges", "public"),
    ({"allowedIpRanges": ["0.0.0.0/0"]}, "allowedIpRanges", "/16 or smaller"),
    ({"gpuSku": "Standard_XYZ"}, "gpuSku", "known sizes"),
    ({"gpuSku": "Standard_NC24rs_v3"}, "gpuSku", "use Standard_ND96asr_v4"),
    ({"gpuSku": "Standard_NC6s_v3", "maxNodes": 1}, "gpuSku", "retired on 2025-09-30"),
    ({"gpuSku": "Standard_NC24ads_A100_v4", "maxNodes": 2}, "maxNodes", "InfiniBand"),
    ({"minNodes": -1}, "minNodes", "negative"),
    ({"maxNodes": 0}, "maxNodes", "between 1"),
    ({"maxNodes": 500}, "maxNodes", "between 1"),
    ({"minNodes": 3, "maxNodes": 2}, "minNodes", "more than maxNodes"),
    ({"maxNodes": "two"}, "maxNodes", "whole number"),
    ({"maxNodes": True}, "maxNodes", "whole number"),
    ({"sasExpiryHours": 0}, "sasExpiryHours", "1-168"),
    ({"sasExpiryHours": 169}, "sasExpiryHours", "7 day maximum validity"),
    ({"sasExpiryHours": 24 * 365}, "sasExpiryHours", "set 168 or less"),
    ({"logRetentionDays": 7}, "logRetentionDays", "30-730"),
    ({"retainOutputs": "maybe"}, "retainOutputs", "true or false"),
    ({"frameworks": []}, "frameworks", "at least one"),
    ({"frameworks": ["keras"]}, "frameworks", "tensorflow image"),
    ({"frameworks": ["pytorch", "pytorch"]}, "frameworks", "twice"),
    ({"frameworks": "pytorch"}, "frameworks", "list"),
    ({"registrySku": "Gold"}, "registrySku", "Premium"),
    ({"imageTag": "v1:latest"}, "imageTag", "Docker tag"),
    ({"team": 42}, "team", "string"),
    ({"maxNode": 4}, "maxNode", "did you mean 'maxNodes'"),
    ({"nfsKind": "nas"}, "nfsKind", "azure-files"),
    ({"nfsVmSize": "Standard_B1s"}, "nfsVmSize", "known sizes"),
    ({"nfsDiskCount": 0}, "nfsDiskCount", "1-16"),
    ({"nfsDiskSizeGb": 8000}, "nfsDiskSizeGb", "32-4096"),
    ({"nfsKind": "azure-files", "nfsDiskSizeGb": 50}, "nfsDiskSizeGb", "100-102400"),
    ({"nfsKind": "azure-files", "dataTier": "nfs", "dataLocalCache": True}, "dataLocalCache", "nfsKind vm"),
    ({"dataTier": "nvme"}, "dataTier", "not one of node-local, nfs"),
    ({"dataLocalCache": True}, "dataLocalCache", "needs dataTier nfs"),
    ({"backend": "azureml", "dataTier": "nfs"}, "dataTier", "applies to backend batch only"),
    ({"nfsKind": "azure-files", "nfsEncryptionAtHost": True}, "nfsEncryptionAtHost", "needs nfsKind vm"),
    ({"nfsEncryptionAtHost": "yes"}, "nfsEncryptionAtHost", "true or false"),
    ({"trainingFramework": "jax"}, "trainingFramework", "keras"),
    ({"frameworks": ["pytorch"], "trainingFramework": "keras"}, "trainingFramework", "add it there"),
    ({"trainingArgs": "--epochs 1 --data /tmp"}, "trainingArgs", "set by the job"),
    ({"trainingArgs": "--output-dir=/x"}, "trainingArgs", "set by the job"),
    ({"trainingArgs": "--epochs 'unterminated"}, "trainingArgs", "shell command line"),
    ({"trainingRetries": 11}, "trainingRetries", "0-10"),
    ({"trainingLaunchOnUp": "later"}, "trainingLaunchOnUp", "true or false"),
    # Refused at plan, not on a GPU node: the training command line's own parser and checks.
    ({"trainingArgs": "--epochs 1 --bacth-size 8"}, "trainingArgs", "unrecognized arguments: --bacth-size"),
    ({"trainingArgs": "--batch-size many"}, "trainingArgs", "invalid int value: 'many'"),
    ({"trainingArgs": "--precision fp8"}, "trainingArgs", "invalid choice: 'fp8'"),
    ({"trainingArgs": "--image-size 16"}, "trainingArgs", "too small for ResNet50"),
    ({"trainingArgs": "--xla"}, "trainingArgs", "--xla applies to --framework tensorflow only"),
    ({"trainingArgs": "--seed $(id)"}, "trainingArgs", "invalid int value"),
    ({"location": "westeurop"}, "location", "did you mean 'westeurope'"),
    ({"location": "moon"}, "location", "az account list-locations"),
    ({"storageSubnet": "10.10.16.0/30"}, "storageSubnet", "smallest subnet, /29"),
    ({"allowedIpRanges": []}, "allowedIpRanges", "is empty"),
    ({"lowPriority": True}, "lowPriority", "renamed to spot: Azure now allocates low-priority nodes as Spot VMs"),
    ({"lowPriority": False}, "lowPriority", "write spot: true or spot: false"),
    ({"spot": "yes"}, "spot", "true or false"),
    ({"backend": "aml"}, "backend", "not one of batch, azureml"),
    # A key of the other backend is refused, not ignored: it would silently mean nothing.
    ({"backend": "azureml", "nfsKind": "azure-files"}, "nfsKind", "applies to backend batch only"),
    ({"backend": "azureml", "trainingRetries": 2}, "trainingRetries", "applies to backend batch only"),
    ({"backend": "azureml", "dataLocalCache": True}, "dataLocalCache", "applies to backend batch only"),
    ({"backend": "azureml", "nfsEncryptionAtHost": True}, "nfsEncryptionAtHost", "applies to backend batch only"),
    ({"amlDataMode": "mount"}, "amlDataMode", "applies to backend azureml only, and this stack's backend is batch"),
    ({"backend": "azureml", "amlDataMode": "stream"}, "amlDataMode", "not one of download, mount"),
    ({"backend": "azureml", "amlIdleMinutes": 0}, "amlIdleMinutes", "outside 1-1440 minutes"),
    ({"backend": "azureml", "amlWorkspaceAccess": "open"}, "amlWorkspaceAccess", "not one of private, public"),
    ({"amlWorkspaceAccess": "public"}, "amlWorkspaceAccess", "applies to backend azureml only"),
    ({"trainingMaxHours": 0}, "trainingMaxHours", "1-168 hours"),
    ({"trainingDataWaitMinutes": 1}, "trainingDataWaitMinutes", "5-1440 minutes"),
]


@pytest.mark.parametrize("values,key,fix", BAD_CONFIGS, ids=[f"{k}-{i}" for i, (_, k, _) in enumerate(BAD_CONFIGS)])
def test_bad_config_is_refused_naming_its_key_and_fix(values, key, fix):
    with pytest.raises(ConfigError) as raised:
        parse("x", {**BASE, **values})
    assert raised.value.key == key
    message = str(raised.value)
    assert f"'{key}'" in message and fix in message
    assert "\n" not in message


def test_missing_stack_file_names_the_stacks_there(tmp_path):
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.a.yaml").write_text("config: {}\n")
    with pytest.raises(ConfigError, match="no Pulumi.b.yaml .*stacks here: a"):
        config.from_stack_file("b", tmp_path)


def test_invalid_yaml_stack_file_is_one_line(tmp_path):
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.a.yaml").write_text("config:\n  x: [\n")
    with pytest.raises(ConfigError, match="not valid YAML") as raised:
        config.from_stack_file("a", tmp_path)
    assert "\n" not in str(raised.value)


def test_the_example_placeholder_passes_plan_but_not_pulumi_up():
    values = {"allowedIpRanges": ["203.0.113.0/24"]}
    cfg = parse("x", values, placeholders_ok=True)  # plan, job verbs
    assert len(cfg.placeholders) == 1 and "replace it with your deployers' egress IPs" in cfg.placeholders[0]
    with pytest.raises(ConfigError, match="203.0.113.0/24 is a placeholder") as raised:
        parse("x", values)  # what `pulumi up` runs (from_pulumi)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("stack", STACKS)
def test_example_stacks_name_their_placeholder(stack):
    assert config.from_stack_file(stack).placeholders


def _stack_file(tmp_path, body):
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.a.yaml").write_text(body)


@pytest.mark.parametrize("body,words", [
    ("config:\n  maxNodes: 4\n  azure-dl-training:maxNodes: 8\n",
     "config key 'azure-dl-training:maxNodes': given twice, as maxNodes and as azure-dl-training:maxNodes"),
    ("config:\n  other-project:maxNodes: 4\n", "namespace 'other-project' is neither this project's"),
    ("config:\n  azure-dl-training:maxNodes: 4\n  azure-dl-training:maxNodes: 8\n",
     "config key 'azure-dl-training:maxNodes': given twice (line 3); keep one"),
])
def test_stack_file_keys_the_program_would_ignore_are_refused(tmp_path, body, words):
    _stack_file(tmp_path, body)
    with pytest.raises(ConfigError) as raised:
        config.from_stack_file("a", tmp_path)
    assert words in str(raised.value)


def test_provider_keys_are_left_to_pulumi(tmp_path):
    _stack_file(tmp_path, "config:\n  azure-native:location: westeurope\n  azure-dl-training:allowedIpRanges: "
                          "[20.50.1.7/32]\n")
    assert config.from_stack_file("a", tmp_path).location == "westeurope"


def test_yaml_errors_keep_their_line_and_column(tmp_path):
    _stack_file(tmp_path, "config:\n  azure-dl-training:team: dev\n  azure-dl-training:maxNodes: [2\n")
    with pytest.raises(ConfigError) as raised:
        config.from_stack_file("a", tmp_path)
    message = str(raised.value)
    assert message.startswith("not valid YAML at line 4, column 1") and "--stack" not in message


def test_azureml_takes_spot_nodes_and_its_own_keys():
    cfg = parse("x", {**BASE, "backend": "azureml", "spot": True, "amlDataMode": "mount", "amlIdleMinutes": 30})
    assert (cfg.backend, cfg.nodes.spot, cfg.aml.data_mode, cfg.aml.idle_minutes) == ("azureml", True, "mount", 30)
    assert parse("x", BASE).backend == "batch" and not parse("x", BASE).nodes.spot


def test_batch_takes_spot_nodes():
    """Azure/Batch issue 196: a Batch-managed account's low-priority target is allocated as Spot VMs."""
    assert parse("x", {**BASE, "spot": True}).nodes.spot


def test_the_renamed_key_is_refused_in_one_line_from_a_stack_file(tmp_path):
    _stack_file(tmp_path, "config:\n  azure-dl-training:team: dev\n  azure-dl-training:lowPriority: true\n")
    with pytest.raises(ConfigError) as raised:
        config.from_stack_file("a", tmp_path)
    assert "renamed to spot" in str(raised.value) and "\n" not in str(raised.value)


def test_a_key_without_namespace_is_this_projects_as_the_cli_reads_it(tmp_path):
    """pulumi/pulumi sdk/go/common/workspace/loaders.go qualifies a stack key without a namespace with the
    project's name (TestLoadingStackConfigWithoutNamespacingTheProject)."""
    _stack_file(tmp_path, "config:\n  maxNodes: 4\n  azure-dl-training:allowedIpRanges: [20.50.1.7/32]\n")
    assert config.from_stack_file("a", tmp_path).nodes.max_nodes == 4


def test_nfs_encryption_at_host_is_off_unless_the_stack_says_its_subscription_has_the_feature():
    """Encryption at host needs Microsoft.Compute/EncryptionAtHost registered on the subscription
    (https://learn.microsoft.com/azure/virtual-machines/disks-enable-host-based-encryption-portal): a stack key."""
    key = config.load_schema()["nfsEncryptionAtHost"]
    assert key.type == "boolean" and key.default is False and "Microsoft.Compute/EncryptionAtHost" in key.description
    assert parse("x", BASE).nfs.encryption_at_host is False
    assert parse("x", {**BASE, "nfsEncryptionAtHost": True}).nfs.encryption_at_host is True
    assert parse("x", {**BASE, "nfsEncryptionAtHost": "true"}).nfs.encryption_at_host is True  # as Pulumi passes it


def test_the_data_tier_is_node_local_unless_the_stack_asks_for_nfs():
    """Issue 56: the ranks read a node-local copy by default; dataTier nfs keeps the NFS share's path, and
    dataLocalCache (an rsync of that share) means something only there."""
    assert config.load_schema()["dataTier"].default == "node-local"
    assert parse("x", BASE).nfs.data_tier == "node-local"
    nfs = parse("x", {**BASE, "dataTier": "nfs", "dataLocalCache": "true"}).nfs
    assert (nfs.data_tier, nfs.data_local_cache) == ("nfs", True)


def test_the_subscription_is_the_providers_own_key_from_the_stack_file(tmp_path):
    """`azure-native:subscriptionId` (the provider's key) is StackConfig.subscription_id, lowercased; None unset."""
    body = "config:\n  azure-dl-training:allowedIpRanges: [20.50.1.7/32]\n"
    _stack_file(tmp_path, body)
    assert config.from_stack_file("a", tmp_path).subscription_id is None
    _stack_file(tmp_path, body + "  azure-native:subscriptionId: 0A1B2C3D-0000-4000-8000-00000000ABCD\n")
    assert config.from_stack_file("a", tmp_path).subscription_id == "0a1b2c3d-0000-4000-8000-00000000abcd"
    _stack_file(tmp_path, body + "  azure-native:subscriptionId: my-sub\n")
    with pytest.raises(ConfigError) as raised:
        config.from_stack_file("a", tmp_path)
    assert "azure-native:subscriptionId" in str(raised.value) and "az account show" in str(raised.value)
    assert parse("x", BASE).subscription_id is None
