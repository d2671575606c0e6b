"""Typed, validated stack configuration.

Pulumi.yaml declares every key (type, default, description); this module turns a stack's values into a
`StackConfig` or refuses them with a `ConfigError` that names the key and the fix. A `StackConfig` holds one
frozen section per concern (network, nodes, storage, monitoring, registry, nfs, training, aml, access, tagging,
budget), each with its keys
and its own validation beside them; a component takes only its section. Bounds and allowed values are written
once, in RANGES and ALLOWED, which Pulumi.yaml's descriptions state (a test checks). The same `parse` serves the
real program (`from_pulumi`: the values the engine hands over) and the offline `plan` and job verbs
(`from_stack_file`: the same values, computed from the stack file by the engine's own merge in
engine_config.py), so both see every default merged in, every value as a string, and refuse exactly the same
configs.
"""
from __future__ import annotations

import difflib
import ipaddress
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from infra import REPO_ROOT
from infra.core import engine_config as engine
# From the backends table: the `backend` key's values and the keys that mean something to one backend only
# (setting one for another backend is refused, not ignored).
from infra.core.backend_facts import BACKEND_ONLY_KEYS, BACKENDS, facts
from infra.core.engine_config import EngineConfig
from infra.core.regions import REGIONS
from infra.core.skus import CATALOG, NFS_VM_SIZES, GpuSku
from training import frameworks

PROJECT = "azure-dl-training"

# From the frameworks table (training/frameworks.py): the frameworks key lists images (one per framework, or
# shared: keras runs in the tensorflow image); trainingFramework is a row.
IMAGES = tuple(image.name for image in frameworks.images())
IMAGE_OF_LOOP = {f.name: f.image.name for f in frameworks.FRAMEWORKS.values()}  # trainingFramework -> image
SHARED_IMAGES = "; ".join(f"{f.name} runs in the {f.image.name} image" for f in frameworks.FRAMEWORKS.values()
                          if f.name != f.image.name)
# Keys a stack file may still hold under an older name: the line that says what to write instead, and why.
RENAMED_KEYS = {
    # https://github.com/Azure/Batch/issues/196 (Low-Priority compute nodes migration to Spot-based compute nodes,
    # March 2026): Batch allocates low-priority nodes as Spot VMs, and the API's low-priority properties now mean
    # Spot; Azure ML retired low priority on 2026-03-31 and its low-priority clusters run on Spot VMs
    # (MicrosoftDocs/azure-ai-docs pull 806, how-to-manage-optimize-cost).
    "lowPriority": "renamed to spot: Azure now allocates low-priority nodes as Spot VMs (variable Spot rate, "
                   "evictable) on both backends (Azure/Batch issue 196); write spot: true or spot: false",
}
JOB_OWNED_FLAGS = ("--data", "--output-dir", "--resume", "--framework")  # the job sets these itself
# ARM principalType of whoever runs `pulumi up` (its data-plane grants): the client config cannot tell, and a
# wrong one is refused (UnmatchedPrincipalType); azure-native sends User when none is given.
DEPLOYER_PRINCIPAL_TYPES = ("User", "ServicePrincipal")


class Range(NamedTuple):
    """Inclusive bounds of a whole-number key; `unit` follows them in the error message."""
    low: int
    high: int
    unit: str = ""

    def __str__(self) -> str:
        return f"{self.low}-{self.high}"  # as the messages and Pulumi.yaml's descriptions write it


# Bounds and allowed values, written once: the validators below read them, and Pulumi.yaml's description of each
# key states them (its config schema cannot hold ranges); tests/infra/core/test_config_bounds.py checks they agree.
RANGES = {
    "team": Range(2, 12, " characters"),  # its length: it goes into storage account and registry names
    "maxNodes": Range(1, 100),  # Batch pools go higher, but beyond this a typo is likelier than a plan
    "sasExpiryHours": Range(1, 720, " hours"),  # bounded: a leaked SAS must die on its own within 30 days at most
    "logRetentionDays": Range(30, 730, " days"),  # what Log Analytics accepts on the PerGB2018 tier
    "nfsDiskCount": Range(1, 16),
    "trainingRetries": Range(0, 10),
    "trainingMaxHours": Range(1, 168, " hours"),  # Batch's task maxWallClockTime; a week at most
    "trainingDataWaitMinutes": Range(5, 1440, " minutes"),
    "amlIdleMinutes": Range(1, 1440, " minutes"),
    # US dollars a month (cents allowed): at least a dollar; above a million a typo is likelier than a plan.
    "monthlyBudgetUsd": Range(1, 1_000_000, " USD"),
}
NFS_DISK_SIZE_GB = {"vm": Range(32, 4096), "azure-files": Range(100, 102400)}  # azure-files: premium share quota
ALLOWED = {
    "backend": BACKENDS,
    "deployerPrincipalType": DEPLOYER_PRINCIPAL_TYPES,
    "registrySku": ("Basic", "Standard", "Premium"),
    "frameworks": IMAGES,
    "trainingFramework": tuple(IMAGE_OF_LOOP),
    "nfsKind": ("vm", "azure-files"),
    "amlDataMode": ("download", "mount"),
    "amlWorkspaceAccess": ("private", "public"),
}
SAS_EXPIRY_HOURS = RANGES["sasExpiryHours"]  # security.py checks issued SAS against its high end
MAX_NODES_LIMIT = RANGES["maxNodes"].high
AZURE_RESERVED_IPS_PER_SUBNET = 5
SMALLEST_SUBNET_PREFIX = 29  # Azure's smallest subnet (https://learn.microsoft.com/azure/virtual-network/virtual-networks-faq)
# allowedIpRanges placeholder in the example stacks: TEST-NET-3 (RFC 5737), documentation only, never routable.
# `plan` accepts it and says to replace it; the real program (`pulumi up`) refuses it.
PLACEHOLDER_RANGE = ipaddress.IPv4Network("203.0.113.0/24")
# Config namespaces a stack file may use besides this project's: the providers the program uses, and Pulumi's.
PROVIDER_NAMESPACES = ("azure-native", "docker-build", "pulumi")


class ConfigError(Exception):
    """A stack config value the program refuses; `str()` is the one line shown to the user."""

    def __init__(self, key: str | None, message: str):
        """`key`: a config key, a command-line flag standing in for one (`--args`), or None (the whole file)."""
        self.key = key
        prefix = "" if not key else f"{key}: " if key.startswith("--") else f"config key '{key}': "
        super().__init__(prefix + message)


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: str  # string | integer | boolean | array (of strings)
    default: Any
    description: str


def _field_name(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def _coerce(key: ConfigKey, value: Any) -> Any:
    """Pulumi hands every value over as a string (arrays as JSON); stack files give YAML types."""
    if key.type == "string":
        if not isinstance(value, str):
            raise ConfigError(key.name, f"expected a string, got {value!r}")
        return value
    if key.type == "integer":
        if isinstance(value, bool) or not isinstance(value, (int, str)) or not re.fullmatch(r"-?\d+", str(value)):
            raise ConfigError(key.name, f"expected a whole number, got {value!r}")
        return int(value)
    if key.type == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(key.name, f"expected true or false, got {value!r}")
    if key.type == "array":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ConfigError(key.name, f"expected a list such as [a, b], got {value!r}") from None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ConfigError(key.name, f"expected a list of strings, got {value!r}")
        return tuple(value)
    if key.type == "object":  # a map of names to text (tags); Pulumi hands it over as JSON
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ConfigError(key.name, f"expected a map such as {{costCenter: '1234'}}, got {value!r}") from None
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ConfigError(key.name, f"expected a map of names to text values (quote numbers: '00123'), "
                                        f"got {value!r}")
        return tuple((str(k), v) for k, v in value.items())
    raise ConfigError(key.name, f"Pulumi.yaml declares unsupported type {key.type!r}")


def _check_range(key: str, value: int, bounds: Range | None = None) -> int:
    bounds = bounds or RANGES[key]
    if not bounds.low <= value <= bounds.high:
        raise ConfigError(key, f"{value} is outside {bounds}{bounds.unit}")
    return value


def _check_one_of(key: str, value: str, why: str = "") -> str:
    if value not in ALLOWED[key]:
        raise ConfigError(key, f"{value!r} is not one of {', '.join(ALLOWED[key])}{why}")
    return value


def _cidr(key: str, value: str) -> ipaddress.IPv4Network:
    try:
        if "/" not in value:
            raise ValueError(value)  # a bare address would silently become a /32
        return ipaddress.IPv4Network(value, strict=True)
    except ValueError:
        raise ConfigError(key, f"{value!r} is not an IPv4 CIDR with its host bits zero, like 10.10.0.0/16") from None


# Each section: its keys (Pulumi.yaml key -> field), its frozen dataclass, and `parse`, which validates the keys
# from `values` (every declared key, coerced to its type) and refuses the first bad one naming it.

@dataclass(frozen=True, kw_only=True)
class NetworkConfig:
    KEYS = {"addressSpace": "address_space", "computeSubnet": "compute_subnet", "storageSubnet": "storage_subnet",
            "reservedAddressSpaces": "reserved_address_spaces", "allowedIpRanges": "allowed_ip_ranges"}
    address_space: ipaddress.IPv4Network
    compute_subnet: ipaddress.IPv4Network
    storage_subnet: ipaddress.IPv4Network
    reserved_address_spaces: tuple[ipaddress.IPv4Network, ...]
    allowed_ip_ranges: tuple[str, ...]  # the deployers' egress, admitted through the account firewalls

    @classmethod
    def parse(cls, values: Mapping[str, Any], placeholders_ok: bool) -> tuple[NetworkConfig, tuple[str, ...]]:
        """The section and the placeholders `plan` accepts (each with its fix); `pulumi up` refuses them."""
        vnet = _cidr("addressSpace", values["addressSpace"])
        if not vnet.is_private:
            raise ConfigError("addressSpace", f"{vnet} is not a private range; use one inside 10.0.0.0/8, "
                                              "172.16.0.0/12 or 192.168.0.0/16")
        if vnet.prefixlen > 24:
            raise ConfigError("addressSpace", f"{vnet} is too small for two subnets; use /24 or larger")
        reserved = tuple(_cidr("reservedAddressSpaces", cidr) for cidr in values["reservedAddressSpaces"])
        for other in reserved:
            if vnet.overlaps(other):
                raise ConfigError("addressSpace", f"{vnet} overlaps reserved {other}; pick a range that no other "
                                                  "team, hub or on-premises network uses")
        subnets = {}
        for key in ("computeSubnet", "storageSubnet"):
            subnet = _cidr(key, values[key])
            if not subnet.subnet_of(vnet):
                raise ConfigError(key, f"{subnet} is not inside addressSpace {vnet}")
            if subnet.prefixlen > SMALLEST_SUBNET_PREFIX:
                raise ConfigError(key, f"{subnet} is smaller than Azure's smallest subnet, /{SMALLEST_SUBNET_PREFIX} "
                                       f"(Azure reserves {AZURE_RESERVED_IPS_PER_SUBNET} addresses of each); use a "
                                       f"/{SMALLEST_SUBNET_PREFIX} or larger")
            subnets[key] = subnet
        if subnets["computeSubnet"].overlaps(subnets["storageSubnet"]):
            raise ConfigError("storageSubnet", f"{subnets['storageSubnet']} overlaps computeSubnet "
                                               f"{subnets['computeSubnet']}; give each its own range")

        allowed = values["allowedIpRanges"]
        # The storage and Batch accounts deny all but the VNet: without the deployers' address, `pulumi up` cannot
        # upload the training scripts and no job can be submitted. Each entry is a bare address or a CIDR range;
        # the firewalls get single addresses bare (storage refuses /31 and /32: security.firewall_ip_rules).
        if not allowed:
            raise ConfigError("allowedIpRanges", "is empty, so the storage and Batch accounts admit only the VNet "
                                                 "and `pulumi up` cannot upload the scripts nor submit the job: add "
                                                 "the address `curl -s https://ifconfig.me` prints, as it prints it "
                                                 "(a bare IPv4 address; a CIDR range of /16 or smaller works too)")
        placeholders = []
        for cidr in allowed:
            try:
                network = ipaddress.IPv4Network(cidr, strict=True)
            except ValueError:
                raise ConfigError("allowedIpRanges", f"{cidr!r} is not an IPv4 address, or a CIDR range with its "
                                                     "host bits zero") from None
            if network.subnet_of(PLACEHOLDER_RANGE):
                fix = (f"allowedIpRanges: {cidr} is the example stack's placeholder (a documentation range): replace "
                       "it with your deployers' egress IPs before `pulumi up`")
                if not placeholders_ok:
                    raise ConfigError("allowedIpRanges", f"{cidr} is a placeholder (a documentation range); put "
                                                         "your deployers' egress IPs there")
                placeholders.append(fix)
                continue
            if not network.is_global or network.prefixlen < 16:
                raise ConfigError("allowedIpRanges", f"{cidr} must be a public range of /16 or smaller "
                                                     "(the VNet is allowed already; private ranges do not apply)")
        return cls(address_space=vnet, compute_subnet=subnets["computeSubnet"],
                   storage_subnet=subnets["storageSubnet"], reserved_address_spaces=reserved,
                   allowed_ip_ranges=allowed), tuple(placeholders)


@dataclass(frozen=True, kw_only=True)
class NodesConfig:
    """The GPU nodes (Batch pool or Azure ML compute cluster)."""
    KEYS = {"gpuSku": "gpu_sku", "minNodes": "min_nodes", "maxNodes": "max_nodes", "spot": "spot"}
    gpu_sku: str
    min_nodes: int
    max_nodes: int
    spot: bool = False  # Spot nodes (evictable, billed at the variable Spot rate) on either backend

    @property
    def sku(self) -> GpuSku:
        return CATALOG[self.gpu_sku]

    @classmethod
    def parse(cls, values: Mapping[str, Any], network: NetworkConfig) -> NodesConfig:
        sku_name = values["gpuSku"]
        sku = CATALOG.get(sku_name)
        if sku is None:
            raise ConfigError("gpuSku", f"unknown size {sku_name!r}; known sizes: {', '.join(sorted(CATALOG))}")
        if sku.retired:
            raise ConfigError("gpuSku", f"{sku_name} was retired on {sku.retired_on}; use {sku.successor}")
        min_nodes, max_nodes = values["minNodes"], values["maxNodes"]
        if min_nodes < 0:
            raise ConfigError("minNodes", f"{min_nodes} is negative; use 0 to pay nothing while idle")
        if not RANGES["maxNodes"].low <= max_nodes <= RANGES["maxNodes"].high:
            raise ConfigError("maxNodes", f"{max_nodes} must be between {RANGES['maxNodes'].low} and "
                                          f"{RANGES['maxNodes'].high}")
        if min_nodes > max_nodes:
            raise ConfigError("minNodes", f"{min_nodes} is more than maxNodes {max_nodes}")
        if max_nodes > 1 and not sku.infiniband:
            ib_sizes = ", ".join(name for name, s in sorted(CATALOG.items()) if s.infiniband and not s.retired)
            raise ConfigError("maxNodes", f"{max_nodes} nodes of {sku_name}, which has no InfiniBand; multi-node "
                                          f"Horovod needs RDMA: set maxNodes: 1 or use {ib_sizes}")
        usable = network.compute_subnet.num_addresses - AZURE_RESERVED_IPS_PER_SUBNET
        if usable < max_nodes:
            raise ConfigError("computeSubnet", f"{network.compute_subnet} has {usable} usable addresses, fewer than "
                                               f"maxNodes {max_nodes}; use a larger prefix")
        return cls(gpu_sku=sku_name, min_nodes=min_nodes, max_nodes=max_nodes, spot=values["spot"])


@dataclass(frozen=True, kw_only=True)
class StorageConfig:
    """The storage account and the SAS it issues."""
    KEYS = {"sasExpiryHours": "sas_expiry_hours", "retainOutputs": "retain_outputs"}
    sas_expiry_hours: int
    retain_outputs: bool

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> StorageConfig:
        return cls(sas_expiry_hours=_check_range("sasExpiryHours", values["sasExpiryHours"]),
                   retain_outputs=values["retainOutputs"])


@dataclass(frozen=True, kw_only=True)
class MonitoringConfig:
    KEYS = {"logRetentionDays": "log_retention_days"}
    log_retention_days: int

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> MonitoringConfig:
        return cls(log_retention_days=_check_range("logRetentionDays", values["logRetentionDays"]))


@dataclass(frozen=True, kw_only=True)
class RegistryConfig:
    """The container registry and the training images built into it."""
    KEYS = {"frameworks": "frameworks", "registrySku": "registry_sku", "imageTag": "image_tag"}
    frameworks: tuple[str, ...]
    registry_sku: str
    image_tag: str

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> RegistryConfig:
        images = values["frameworks"]  # not `frameworks`: that name is the table's module here
        if not images:
            raise ConfigError("frameworks", f"is empty; list at least one of {', '.join(IMAGES)}")
        for framework in images:
            if framework not in IMAGES:
                raise ConfigError("frameworks", f"unknown framework {framework!r}; choose from {', '.join(IMAGES)} "
                                                f"({SHARED_IMAGES})")
        if len(set(images)) != len(images):
            raise ConfigError("frameworks", f"{list(images)} lists a framework twice")
        sku = _check_one_of("registrySku", values["registrySku"])
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", values["imageTag"]):
            raise ConfigError("imageTag", f"{values['imageTag']!r} is not a valid Docker tag (letters, digits, _ . -)")
        return cls(frameworks=images, registry_sku=sku, image_tag=values["imageTag"])


@dataclass(frozen=True, kw_only=True)
class NfsConfig:
    """backend batch: the NFS file server the nodes read the data from."""
    KEYS = {"nfsKind": "kind", "nfsVmSize": "vm_size", "nfsDiskCount": "disk_count", "nfsDiskSizeGb": "disk_size_gb",
            "dataLocalCache": "data_local_cache", "nfsEncryptionAtHost": "encryption_at_host"}
    kind: str  # vm | azure-files
    vm_size: str
    disk_count: int
    disk_size_gb: int  # each data disk (vm), or the share's quota (azure-files)
    data_local_cache: bool  # the nodes copy the data from NFS to their local disk before training
    # The VM's securityProfile.encryptionAtHost; needs the subscription feature Microsoft.Compute/EncryptionAtHost
    # (https://learn.microsoft.com/azure/virtual-machines/disks-enable-host-based-encryption-portal), hence a key.
    encryption_at_host: bool = False

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> NfsConfig:
        kind = _check_one_of("nfsKind", values["nfsKind"])
        if values["nfsVmSize"] not in NFS_VM_SIZES:
            raise ConfigError("nfsVmSize", f"unknown size {values['nfsVmSize']!r}; known sizes: "
                                           f"{', '.join(NFS_VM_SIZES)}")
        if values["dataLocalCache"] and kind == "azure-files":
            raise ConfigError("dataLocalCache", "needs nfsKind vm: with azure-files the job stages the data after "
                                                "the nodes start, so there is nothing to cache yet; use nfsKind: vm")
        if values["nfsEncryptionAtHost"] and kind == "azure-files":
            raise ConfigError("nfsEncryptionAtHost", "needs nfsKind vm: it is a VM's setting, and azure-files has no "
                                                     "VM (its share is encrypted by the storage service)")
        size, bounds = values["nfsDiskSizeGb"], NFS_DISK_SIZE_GB[kind]
        if not bounds.low <= size <= bounds.high:
            raise ConfigError("nfsDiskSizeGb", f"{size} GiB is outside {bounds} for nfsKind {kind}")
        return cls(kind=kind, vm_size=values["nfsVmSize"], disk_count=_check_range("nfsDiskCount",
                                                                                   values["nfsDiskCount"]),
                   disk_size_gb=size, data_local_cache=values["dataLocalCache"],
                   encryption_at_host=values["nfsEncryptionAtHost"])


@dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    """The training job: what `pulumi up` launches and `python -m infra submit` submits."""
    KEYS = {"trainingLaunchOnUp": "launch_on_up", "trainingFramework": "framework", "trainingArgs": "args",
            "trainingRetries": "retries", "trainingMaxHours": "max_hours",
            "trainingDataWaitMinutes": "data_wait_minutes"}
    launch_on_up: bool
    framework: str  # pytorch | tensorflow | keras
    args: tuple[str, ...]  # extra `python -m training train` flags
    retries: int
    max_hours: int
    data_wait_minutes: int

    @property
    def image(self) -> str:
        """The image (one per framework) the training job runs in."""
        return IMAGE_OF_LOOP[self.framework]

    @classmethod
    def parse(cls, values: Mapping[str, Any], registry: RegistryConfig) -> TrainingConfig:
        retries = _check_range("trainingRetries", values["trainingRetries"])
        max_hours = _check_range("trainingMaxHours", values["trainingMaxHours"])
        data_wait = _check_range("trainingDataWaitMinutes", values["trainingDataWaitMinutes"])
        framework = _check_one_of("trainingFramework", values["trainingFramework"])
        if IMAGE_OF_LOOP[framework] not in registry.frameworks:
            raise ConfigError("trainingFramework", f"{framework} runs in the {IMAGE_OF_LOOP[framework]} image, "
                                                   f"which frameworks {list(registry.frameworks)} does not build; "
                                                   "add it there")
        return cls(launch_on_up=values["trainingLaunchOnUp"], framework=framework,
                   args=parse_training_args(framework, values["trainingArgs"]), retries=retries, max_hours=max_hours,
                   data_wait_minutes=data_wait)


@dataclass(frozen=True, kw_only=True)
class AmlConfig:
    """backend azureml: the workspace and its compute cluster."""
    KEYS = {"amlDataMode": "data_mode", "amlIdleMinutes": "idle_minutes", "amlWorkspaceAccess": "workspace_access"}
    data_mode: str  # download | mount
    idle_minutes: int
    workspace_access: str  # private | public

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> AmlConfig:
        return cls(data_mode=_check_one_of("amlDataMode", values["amlDataMode"]),
                   workspace_access=_check_one_of("amlWorkspaceAccess", values["amlWorkspaceAccess"]),
                   idle_minutes=_check_range("amlIdleMinutes", values["amlIdleMinutes"]))


GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


@dataclass(frozen=True, kw_only=True)
class AccessConfig:
    """The team's Entra groups, by object ID: what each gets is infra/components/access.py's."""
    KEYS = {"teamAdmins": "admins", "teamMembers": "members"}
    admins: tuple[str, ...] = ()
    members: tuple[str, ...] = ()

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> AccessConfig:
        seen: dict[str, str] = {}
        for key in cls.KEYS:
            for group in values[key]:
                if not GUID.fullmatch(group):
                    raise ConfigError(key, f"{group!r} is not a group object ID (a GUID such as "
                                           "0b1c2d3e-4f50-4617-8283-94a5b6c7d8e9): `az ad group show --group NAME "
                                           "--query id -o tsv` prints it")
                if group.lower() in seen:
                    # Admins get everything members get: one list per group keeps one grant per role and scope.
                    raise ConfigError(key, f"{group} is listed in {seen[group.lower()]} already; keep it once "
                                           "(in teamAdmins if it runs `pulumi up`: admins get what members get)")
                seen[group.lower()] = key
        return cls(admins=tuple(g.lower() for g in values["teamAdmins"]),
                   members=tuple(g.lower() for g in values["teamMembers"]))


# Azure's tag limits (https://learn.microsoft.com/azure/azure-resource-manager/management/tag-resources#limitations):
# 50 name/value pairs per resource; a name of at most 512 characters, 128 on storage accounts (every tag here lands
# on one), a value of at most 256; no <, >, %, &, \, ? or / in a name. The stack's own tags (StackConfig.tags, and
# security.PUBLIC_ACCESS_TAG on an open Azure ML workspace) are not the stack file's to set and count in the 50.
MAX_TAGS, MAX_TAG_NAME, MAX_TAG_VALUE = 50, 128, 256
TAG_NAME_REFUSED = set('<>%&\\?/')
OWN_TAGS = ("team", "stack", "project", "managed-by", "network-access")


@dataclass(frozen=True, kw_only=True)
class TaggingConfig:
    """Extra tags (cost centre, owner...) merged with the stack's own on every resource that takes tags."""
    KEYS = {"tags": "extra"}
    extra: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, values: Mapping[str, Any], backend_name: str) -> TaggingConfig:
        extra = values["tags"]
        limit = min(MAX_TAGS, facts(backend_name).max_tags)
        room = limit - len(OWN_TAGS)
        if len(extra) > room:
            where = "per resource" if limit == MAX_TAGS else f"on some of backend {backend_name}'s resources"
            raise ConfigError("tags", f"{len(extra)} tags; Azure takes {limit} {where} and the stack sets "
                                      f"up to {len(OWN_TAGS)} itself, so give at most {room}")
        for name, value in extra:
            if name.lower() in OWN_TAGS:  # Azure's tag names are case-insensitive
                raise ConfigError("tags", f"{name!r} is set by the stack itself ({', '.join(OWN_TAGS)}); remove it")
            refused = sorted(set(name) & TAG_NAME_REFUSED)
            if not name.strip() or len(name) > MAX_TAG_NAME or refused:
                raise ConfigError("tags", f"tag name {name!r} must be 1 to {MAX_TAG_NAME} characters without "
                                          f"{' '.join(sorted(TAG_NAME_REFUSED))} (Azure's limits)")
            if len(value) > MAX_TAG_VALUE:
                raise ConfigError("tags", f"the value of {name!r} is {len(value)} characters; Azure takes at most "
                                          f"{MAX_TAG_VALUE}")
        return cls(extra=extra)


# An address as Azure's budget notifications take it (contactEmails): one @, a dotted domain, no spaces. The
# Budgets API documents no pattern (https://learn.microsoft.com/rest/api/consumption/budgets/create-or-update):
# this catches typos and pasted names, not every address a mail server refuses.
EMAIL = re.compile(r"[^@\s,;<>]+@[^@\s,;<>]+\.[A-Za-z]{2,}")


@dataclass(frozen=True, kw_only=True)
class BudgetConfig:
    """The team's monthly budget and who hears of it (infra/components/budget.py: the budget and its guard)."""
    KEYS = {"monthlyBudgetUsd": "monthly_usd", "budgetContacts": "contacts"}
    monthly_usd: float | None = None  # None: no budget
    contacts: tuple[str, ...] = ()

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> BudgetConfig:
        text, contacts = values["monthlyBudgetUsd"].strip(), values["budgetContacts"]
        if not text:
            if contacts:
                raise ConfigError("budgetContacts", "is set but monthlyBudgetUsd is not; set monthlyBudgetUsd "
                                                    "(e.g. 1500) or remove budgetContacts")
            return cls()
        bounds = RANGES["monthlyBudgetUsd"]
        if not re.fullmatch(r"\d+(\.\d{1,2})?", text):
            raise ConfigError("monthlyBudgetUsd", f"{text!r} is not an amount in US dollars; write {bounds} "
                                                  "without sign or currency, such as 1500 or 1500.50")
        amount = float(text)
        if not bounds.low <= amount <= bounds.high:
            raise ConfigError("monthlyBudgetUsd", f"{text} is outside {bounds}{bounds.unit}; give a budget above "
                                                  "zero (leave the key out for no budget)")
        if not contacts:
            raise ConfigError("budgetContacts", "is empty; a budget needs at least one email address to notify, "
                                                "e.g. [ml-platform@example.com]")
        for contact in contacts:
            if not EMAIL.fullmatch(contact):
                raise ConfigError("budgetContacts", f"{contact!r} is not an email address; write one address "
                                                    "per item, like name@example.com")
        return cls(monthly_usd=amount, contacts=contacts)


SECTIONS = {"network": NetworkConfig, "nodes": NodesConfig, "storage": StorageConfig, "monitoring": MonitoringConfig,
            "registry": RegistryConfig, "nfs": NfsConfig, "training": TrainingConfig, "aml": AmlConfig,
            "access": AccessConfig, "tagging": TaggingConfig, "budget": BudgetConfig}
TOP_KEYS = ("team", "location", "backend", "deployerPrincipalType")  # StackConfig's own fields
# Every key Pulumi.yaml declares -> where it lands ("section.field", or the StackConfig field). A new key: its
# Pulumi.yaml entry, its field in one section's KEYS and class, its check in that section's `parse`.
KEYS = {**{key: _field_name(key) for key in TOP_KEYS},
        **{key: f"{section}.{field}" for section, cls in SECTIONS.items() for key, field in cls.KEYS.items()}}


@dataclass(frozen=True, kw_only=True)
class StackConfig:
    stack: str
    team: str
    location: str
    backend: str  # batch | azureml
    deployer_principal_type: str  # User | ServicePrincipal: who runs `pulumi up`, for its own role assignments
    network: NetworkConfig
    nodes: NodesConfig
    storage: StorageConfig
    monitoring: MonitoringConfig
    registry: RegistryConfig
    nfs: NfsConfig
    training: TrainingConfig
    aml: AmlConfig
    access: AccessConfig = AccessConfig()
    tagging: TaggingConfig = TaggingConfig()
    budget: BudgetConfig = BudgetConfig()
    placeholders: tuple[str, ...] = ()  # values `plan` accepts but `pulumi up` refuses, each with its fix

    @property
    def tags(self) -> dict[str, str]:
        """Tags on every taggable resource: who owns it and what made it."""
        return {**dict(self.tagging.extra), "team": self.team, "stack": self.stack, "project": PROJECT,
                "managed-by": "pulumi"}


def load_project(root: Path = REPO_ROOT) -> dict[str, Any]:
    """Pulumi.yaml of the project in `root`, parsed: read once per command, however many stacks it serves."""
    return yaml.load((root / "Pulumi.yaml").read_text(), Loader=_FAST_LOADER)


def schema_of(project: Mapping[str, Any]) -> dict[str, ConfigKey]:
    """The config keys a parsed Pulumi.yaml declares."""
    return {
        name: ConfigKey(name, spec["type"], spec.get("default"), spec.get("description", ""))
        for name, spec in project["config"].items()
    }


def load_schema(project_file: Path = REPO_ROOT / "Pulumi.yaml") -> dict[str, ConfigKey]:
    return schema_of(yaml.load(project_file.read_text(), Loader=_FAST_LOADER))


def check_team(team: str) -> str:
    """The team name's rules (`team`, and `new-team NAME`, whose stack file and team are both NAME)."""
    low, high = RANGES["team"].low, RANGES["team"].high
    if not re.fullmatch(rf"[a-z][a-z0-9]{{{low - 1},{high - 1}}}", team):
        raise ConfigError("team", f"{team!r} must be {RANGES['team']} lowercase letters or digits, starting with a "
                                  "letter (it goes into storage account and registry names)")
    return team


def parse(stack: str, values: Mapping[str, Any], schema: Mapping[str, ConfigKey] | None = None, *,
          placeholders_ok: bool = False) -> StackConfig:
    """Defaults from the schema, overridden by `values` (unqualified keys), then validated section by section.
    With `placeholders_ok` (offline: plan, job verbs) the example stacks' placeholders pass, listed in
    `placeholders`."""
    schema = schema if schema is not None else load_schema()
    for name in values:
        if name in RENAMED_KEYS and name not in schema:
            raise ConfigError(name, RENAMED_KEYS[name])
        if name not in schema:
            close = difflib.get_close_matches(name, list(schema), n=1)
            hint = f"did you mean '{close[0]}'?" if close else "Pulumi.yaml declares every key the program reads"
            raise ConfigError(name, f"unknown key; {hint}")
    merged = {name: _coerce(key, values.get(name, key.default)) for name, key in schema.items()}
    missing, unread = set(KEYS) - set(merged), set(merged) - set(KEYS)
    if missing:
        raise ConfigError(_field_name(sorted(missing)[0]), "not declared in Pulumi.yaml's config schema")
    if unread:  # a key Pulumi.yaml declares that the program would never read
        raise ConfigError(_field_name(sorted(unread)[0]), "declared in Pulumi.yaml but not a StackConfig field")

    backend = _check_one_of("backend", merged["backend"])
    for other, keys in BACKEND_ONLY_KEYS.items():
        for key in keys:
            # The engine gives every stack Pulumi.yaml's default for each key it leaves unset
            # (engine_config.py), so "set by the stack" cannot be told from "default": only a value other than
            # the default means someone asked for something this backend would ignore.
            if other != backend and merged[key] != _coerce(schema[key], schema[key].default):
                raise ConfigError(key, f"applies to backend {other} only, and this stack's backend is {backend}; "
                                       "remove it")
    team = check_team(merged["team"])
    location = merged["location"]
    if location not in REGIONS:
        close = difflib.get_close_matches(str(location).lower().replace(" ", ""), sorted(REGIONS), n=1)
        hint = f"did you mean '{close[0]}'?" if close else "use a region name such as westeurope or eastus"
        raise ConfigError("location", f"{location!r} is not an Azure region; {hint} "
                                      "(`az account list-locations -o table` lists them)")
    deployer = _check_one_of("deployerPrincipalType", merged["deployerPrincipalType"],
                             " (User for `az login` as a person, ServicePrincipal for a service principal or "
                             "managed identity running `pulumi up`)")
    # Section by section, in the order the keys were always checked (the first bad key is the one named).
    network, placeholders = NetworkConfig.parse(merged, placeholders_ok)
    nodes = NodesConfig.parse(merged, network)
    storage, monitoring = StorageConfig.parse(merged), MonitoringConfig.parse(merged)
    registry = RegistryConfig.parse(merged)
    nfs = NfsConfig.parse(merged)
    training = TrainingConfig.parse(merged, registry)
    return StackConfig(stack=stack, team=team, location=location, backend=backend, deployer_principal_type=deployer,
                       network=network, nodes=nodes, storage=storage, monitoring=monitoring, registry=registry,
                       nfs=nfs, training=training, aml=AmlConfig.parse(merged), access=AccessConfig.parse(merged),
                       tagging=TaggingConfig.parse(merged, backend), budget=BudgetConfig.parse(merged),
                       placeholders=placeholders)


def parse_training_args(framework: str, text: str, key: str = "trainingArgs") -> tuple[str, ...]:
    """The job's extra train flags from `text`, refused (naming `key`) where the job sets the flag itself or
    where `python -m training train` would refuse it on the node, with its own parser."""
    from training.config import check_args
    from training.errors import UsageError

    try:
        args = tuple(shlex.split(text))
    except ValueError as err:
        raise ConfigError(key, f"cannot be split like a shell command line ({err})") from None
    for arg in args:
        if arg.split("=", 1)[0] in JOB_OWNED_FLAGS:
            raise ConfigError(key, f"{arg.split('=', 1)[0]} is set by the job itself; remove it "
                                   "(trainingFramework picks the framework)")
    try:
        check_args(["--framework", framework, "--data", "x", "--output-dir", "x", *args])
    except UsageError as err:
        raise ConfigError(key, f"{err} (the flags of `python -m training train --help`)") from None
    return args


def stack_names(root: Path = REPO_ROOT) -> list[str]:
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


class _UniqueKeys:
    """YAML that refuses a key given twice in one mapping (plain YAML keeps the last value silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                mark = key_node.start_mark
                raise ConfigError(str(key), f"given twice (line {mark.line + 1}); keep one")
            seen.add(key)
        return super().construct_mapping(node, deep)


class _UniqueKeyLoader(_UniqueKeys, yaml.SafeLoader):
    """PyYAML's own parser: its error messages are the ones users see."""


# libyaml's parser (PyYAML's C extension, ~15x faster here) with the same constructor and resolver, so the same
# values: a fleet of stack files is read with it, and a file it refuses is read again with the Python parser for
# the message (libyaml words its errors differently).
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_FastUniqueKeyLoader = type("_FastUniqueKeyLoader", (_UniqueKeys, _FAST_LOADER), {})


def _stack_document_config(stack: str, root: Path) -> dict[str, Any]:
    """The stack file's `config:` mapping (qualified keys), after the checks Pulumi would not make: a key given
    twice, a key of another project's namespace (the program would never see it). A key without a namespace is
    this project's: the CLI qualifies it with the project's name (pulumi/pulumi sdk/go/common/workspace/loaders.go,
    stackConfigNamespacedWithProject)."""
    path = root / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise ConfigError(None, f"--stack {stack}: no {path.name} in {root}; stacks here: "
                                f"{', '.join(stack_names(root)) or 'none'}")
    text = path.read_text()
    try:
        try:
            document = yaml.load(text, Loader=_FastUniqueKeyLoader) or {}
        except yaml.YAMLError:
            document = yaml.load(text, Loader=_UniqueKeyLoader) or {}  # refuses it too, in PyYAML's words
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise ConfigError(None, f"not valid YAML at {where}: {err.problem or err.context}") from None
    except yaml.YAMLError as err:
        raise ConfigError(None, f"not valid YAML: {str(err).splitlines()[0]}") from None
    if isinstance(document, dict) and document.get("environment"):
        raise ConfigError(None, f"{path.name} imports a Pulumi ESC environment, which only the Pulumi CLI can "
                                "resolve; put the values in the stack file to plan offline")
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        return {}
    qualified: dict[str, Any] = {}
    for key, value in config.items():
        namespace, _, name = str(key).rpartition(":")
        if namespace and namespace != PROJECT and namespace not in PROVIDER_NAMESPACES:
            raise ConfigError(str(key), f"namespace '{namespace}' is neither this project's ({PROJECT}) nor a "
                                        f"provider's ({', '.join(PROVIDER_NAMESPACES)}); did you mean "
                                        f"{PROJECT}:{name}?")
        full = f"{namespace or PROJECT}:{name}"
        if full in qualified:
            # Both spellings of one key: the CLI keeps whichever its map iteration gives last (Go maps have no
            # order), so which value `up` would see is left to chance.
            raise ConfigError(full, f"given twice, as {name} and as {PROJECT}:{name} (the same key); keep one")
        qualified[full] = value
    return qualified


def read_stack_file(stack: str, root: Path = REPO_ROOT) -> dict[str, Any]:
    """The stack's own values for this project, unqualified, as written in the file (YAML types, no defaults).
    Keys of the providers' namespaces (azure-native:...) are left to Pulumi."""
    prefix = f"{PROJECT}:"
    return {key[len(prefix):]: value for key, value in _stack_document_config(stack, root).items()
            if key.startswith(prefix)}


def engine_config(stack: str, root: Path = REPO_ROOT, project: Mapping[str, Any] | None = None) -> EngineConfig:
    """What the Pulumi CLI gives the program for this stack: Pulumi.yaml's defaults merged in, every value a
    string (infra/core/engine_config.py has the rules and their source). `project`: Pulumi.yaml already parsed
    (load_project), when the caller reads several stacks."""
    project = project if project is not None else load_project(root)
    try:
        return engine.merge(project, stack, _stack_document_config(stack, root))
    except engine.EngineConfigError as err:
        raise ConfigError(None, str(err)) from None


def from_engine_config(stack: str, engine_values: EngineConfig, project: Mapping[str, Any]) -> StackConfig:
    """A stack's merged config (engine_config) validated as the program validates it; placeholders allowed."""
    return parse(stack, engine_values.of_project(PROJECT), schema_of(project), placeholders_ok=True)


def from_stack_file(stack: str, root: Path = REPO_ROOT, project: Mapping[str, Any] | None = None) -> StackConfig:
    """A stack file's config as `pulumi up` would receive it (the engine's merge), validated as the program
    validates it; placeholders are allowed and listed (plan, job verbs). Pulumi.yaml is read once (or given)."""
    project = project if project is not None else load_project(root)
    return from_engine_config(stack, engine_config(stack, root, project), project)


def from_pulumi() -> StackConfig:
    """The running program's config. The engine has merged Pulumi.yaml's defaults in already: every declared key
    has a value (a string), whether the stack set it or not."""
    import pulumi

    config = pulumi.Config()
    schema = load_schema()
    values = {name: config.get(name) for name in schema}
    # A key the stack sets that Pulumi.yaml does not declare reaches the program too (the language host passes
    # the whole map as PULUMI_CONFIG); name it, as plan does, instead of ignoring it.
    prefix = f"{PROJECT}:"
    for key, text in pulumi.runtime.get_config_env().items():
        if key.startswith(prefix) and key[len(prefix):] not in schema:
            values[key[len(prefix):]] = text
    return parse(pulumi.get_stack(), {k: v for k, v in values.items() if v is not None}, schema)
