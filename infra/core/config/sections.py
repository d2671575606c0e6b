"""The stack config's sections, one frozen dataclass per concern (network, nodes, storage, monitoring, registry,
nfs, training, aml, access, tagging, budget), each with its keys and its own validation beside them; a component
takes only its section. The loader (stack.py) builds them into a StackConfig, in the order the keys were always
checked.
"""
from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.core.backend_facts import facts
from infra.core.config.schema import (IMAGE_OF_LOOP, IMAGES, NFS_DISK_SIZE_GB, RANGES, SHARED_IMAGES, ConfigError,
                                      check_one_of, check_range)
from infra.core import skus
from infra.core.config import shared_images as platform_images
from infra.core.skus import CATALOG, NFS_VM_SIZES, GpuSku

AZURE_RESERVED_IPS_PER_SUBNET = 5
SMALLEST_SUBNET_PREFIX = 29  # Azure's smallest subnet (https://learn.microsoft.com/azure/virtual-network/virtual-networks-faq)
# allowedIpRanges placeholder in the example stacks: TEST-NET-3 (RFC 5737), documentation only, never routable.
# `plan` accepts it and says to replace it; the real program (`pulumi up`) refuses it.
PLACEHOLDER_RANGE = ipaddress.IPv4Network("203.0.113.0/24")


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
        # the firewalls get single addresses bare (storage refuses /31 and /32: security/firewalls.py).
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
    KEYS = {"gpuSku": "gpu_sku", "minNodes": "min_nodes", "maxNodes": "max_nodes", "spot": "spot",
            "batchPoolAllocation": "pool_allocation", "batchServiceObjectId": "batch_service_object_id"}
    gpu_sku: str
    min_nodes: int
    max_nodes: int
    spot: bool = False  # Spot nodes (evictable, billed at the variable Spot rate) on either backend
    pool_allocation: str = "batch-service"  # the Batch account's pool allocation mode (Pulumi.yaml says why)
    # user-subscription: the "Microsoft Azure Batch" service principal's object ID in the tenant (its grant on the
    # account's Key Vault names it; infra/backends/batch/cluster.py)
    batch_service_object_id: str = ""

    @property
    def sku(self) -> GpuSku:
        return CATALOG[self.gpu_sku]

    @classmethod
    def parse(cls, values: Mapping[str, Any], network: NetworkConfig) -> NodesConfig:
        sku = skus.find(values["gpuSku"])  # without case: the catalog's spelling from here on
        if sku is None:
            raise ConfigError("gpuSku", skus.unknown_size(values["gpuSku"]))
        sku_name = sku.name
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
        allocation = check_one_of("batchPoolAllocation", values["batchPoolAllocation"])
        batch_service = str(values.get("batchServiceObjectId") or "")
        if allocation == "user-subscription" and batch_service.lower() == BATCH_SERVICE_APP_ID:
            # The app ID is a valid GUID, and `plan` prints it; a role assignment to it fails at `up` with
            # PrincipalNotFound, after the vault and before the account.
            raise ConfigError("batchServiceObjectId", f"{batch_service} is the application (client) ID of \"Microsoft "
                              "Azure Batch\", the same in every tenant, not its service principal's object ID in "
                              f"yours: set the value `az ad sp show --id {BATCH_SERVICE_APP_ID} --query id -o tsv` "
                              "prints")
        if allocation == "user-subscription" and not GUID.fullmatch(batch_service):
            # The Key Vault grant the mode needs names the service principal by its object ID, which differs per
            # tenant (infra/backends/batch/cluster.py: USER_SUBSCRIPTION_DOC).
            raise ConfigError("batchServiceObjectId", f"{batch_service or 'unset'}: batchPoolAllocation "
                              "user-subscription needs the object ID of the \"Microsoft Azure Batch\" service principal "
                              f"in your tenant: `az ad sp show --id {BATCH_SERVICE_APP_ID} --query id -o tsv`")
        return cls(gpu_sku=sku_name, min_nodes=min_nodes, max_nodes=max_nodes, spot=values["spot"],
                   pool_allocation=allocation,
                   batch_service_object_id=batch_service if allocation == "user-subscription" else "")


# "Microsoft Azure Batch", the application whose service principal user-subscription mode grants the vault to; its app
# (client) ID is the same in every tenant, its service principal's object ID is not
# (https://learn.microsoft.com/azure/batch/batch-account-create-portal, user subscription mode).
BATCH_SERVICE_APP_ID = "ddbf3205-c6bd-46ae-8127-60eb93363864"


@dataclass(frozen=True, kw_only=True)
class StorageConfig:
    """The storage account and the SAS it issues."""
    KEYS = {"sasExpiryHours": "sas_expiry_hours", "retainOutputs": "retain_outputs"}
    sas_expiry_hours: int
    retain_outputs: bool

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> StorageConfig:
        return cls(sas_expiry_hours=check_range("sasExpiryHours", values["sasExpiryHours"]),
                   retain_outputs=values["retainOutputs"])


@dataclass(frozen=True, kw_only=True)
class MonitoringConfig:
    KEYS = {"logRetentionDays": "log_retention_days"}
    log_retention_days: int

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> MonitoringConfig:
        return cls(log_retention_days=check_range("logRetentionDays", values["logRetentionDays"]))


@dataclass(frozen=True, kw_only=True)
class RegistryConfig:
    """The container registry and the training images built into it (or imported: sharedImages)."""
    KEYS = {"frameworks": "frameworks", "registrySku": "registry_sku", "imageTag": "image_tag",
            "sharedImages": "shared_images"}
    frameworks: tuple[str, ...]
    registry_sku: str
    image_tag: str
    shared_images: platform_images.SharedImages | None = None  # the platform's images, imported by digest

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
        sku = check_one_of("registrySku", values["registrySku"])
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", values["imageTag"]):
            raise ConfigError("imageTag", f"{values['imageTag']!r} is not a valid Docker tag (letters, digits, _ . -)")
        return cls(frameworks=images, registry_sku=sku, image_tag=values["imageTag"],
                   shared_images=platform_images.parse(values["sharedImages"], images))


@dataclass(frozen=True, kw_only=True)
class NfsConfig:
    """backend batch: the NFS file server the nodes read the data from."""
    KEYS = {"nfsKind": "kind", "nfsVmSize": "vm_size", "nfsDiskCount": "disk_count", "nfsDiskSizeGb": "disk_size_gb",
            "dataLocalCache": "data_local_cache", "nfsEncryptionAtHost": "encryption_at_host",
            "dataTier": "data_tier"}
    kind: str  # vm | azure-files
    vm_size: str
    disk_count: int
    disk_size_gb: int  # each data disk (vm), or the share's quota (azure-files)
    data_local_cache: bool  # the nodes copy the data from NFS to their local disk before training
    # The VM's securityProfile.encryptionAtHost; needs the subscription feature Microsoft.Compute/EncryptionAtHost
    # (https://learn.microsoft.com/azure/virtual-machines/disks-enable-host-based-encryption-portal), hence a key.
    encryption_at_host: bool = False
    # Where the ranks read the dataset (issue 56): node-local (each node's start task makes a local volume and the
    # job stages the dataset onto it from Blob; the NFS share keeps checkpoints and outputs) or nfs (the NFS share).
    data_tier: str = "node-local"

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> NfsConfig:
        kind = check_one_of("nfsKind", values["nfsKind"])
        if values["nfsVmSize"] not in NFS_VM_SIZES:
            raise ConfigError("nfsVmSize", f"unknown size {values['nfsVmSize']!r}; known sizes: "
                                           f"{', '.join(NFS_VM_SIZES)}")
        if values["dataLocalCache"] and kind == "azure-files":
            raise ConfigError("dataLocalCache", "needs nfsKind vm: with azure-files the job stages the data after "
                                                "the nodes start, so there is nothing to cache yet; use nfsKind: vm")
        data_tier = check_one_of("dataTier", values.get("dataTier", "node-local"))
        if values["dataLocalCache"] and data_tier != "nfs":
            raise ConfigError("dataLocalCache", f"needs dataTier nfs (this stack's is {data_tier}, which already "
                                                "stages the dataset onto each node's local disk); remove dataLocalCache")
        if values["nfsEncryptionAtHost"] and kind == "azure-files":
            raise ConfigError("nfsEncryptionAtHost", "needs nfsKind vm: it is a VM's setting, and azure-files has no "
                                                     "VM (its share is encrypted by the storage service)")
        size, bounds = values["nfsDiskSizeGb"], NFS_DISK_SIZE_GB[kind]
        if not bounds.low <= size <= bounds.high:
            raise ConfigError("nfsDiskSizeGb", f"{size} GiB is outside {bounds} for nfsKind {kind}")
        return cls(kind=kind, vm_size=values["nfsVmSize"], disk_count=check_range("nfsDiskCount",
                                                                                   values["nfsDiskCount"]),
                   disk_size_gb=size, data_local_cache=values["dataLocalCache"],
                   encryption_at_host=values["nfsEncryptionAtHost"], data_tier=data_tier)


@dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    """The training job: what `pulumi up` launches and `python -m infra submit` submits."""
    KEYS = {"trainingLaunchOnUp": "launch_on_up", "trainingFramework": "framework", "trainingArgs": "args",
            "trainingRetries": "retries", "trainingMaxHours": "max_hours",
            "trainingDataWaitMinutes": "data_wait_minutes", "allocationTimeoutMinutes": "allocation_timeout_minutes"}
    launch_on_up: bool
    framework: str  # pytorch | tensorflow | keras
    args: tuple[str, ...]  # extra `python -m training train` flags
    retries: int
    max_hours: int
    data_wait_minutes: int
    allocation_timeout_minutes: int = 30  # how long a Batch job waits for all its nodes (Pulumi.yaml)

    @property
    def image(self) -> str:
        """The image (one per framework) the training job runs in."""
        return IMAGE_OF_LOOP[self.framework]

    @classmethod
    def parse(cls, values: Mapping[str, Any], registry: RegistryConfig) -> TrainingConfig:
        retries = check_range("trainingRetries", values["trainingRetries"])
        max_hours = check_range("trainingMaxHours", values["trainingMaxHours"])
        data_wait = check_range("trainingDataWaitMinutes", values["trainingDataWaitMinutes"])
        allocation = check_range("allocationTimeoutMinutes", values["allocationTimeoutMinutes"])
        framework = check_one_of("trainingFramework", values["trainingFramework"])
        if IMAGE_OF_LOOP[framework] not in registry.frameworks:
            raise ConfigError("trainingFramework", f"{framework} runs in the {IMAGE_OF_LOOP[framework]} image, "
                                                   f"which frameworks {list(registry.frameworks)} does not build; "
                                                   "add it there")
        return cls(launch_on_up=values["trainingLaunchOnUp"], framework=framework,
                   args=parse_training_args(framework, values["trainingArgs"]), retries=retries, max_hours=max_hours,
                   data_wait_minutes=data_wait, allocation_timeout_minutes=allocation)


JOB_OWNED_FLAGS = ("--data", "--output-dir", "--resume", "--framework")  # the job sets these itself


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


@dataclass(frozen=True, kw_only=True)
class AmlConfig:
    """backend azureml: the workspace and its compute cluster."""
    KEYS = {"amlDataMode": "data_mode", "amlIdleMinutes": "idle_minutes", "amlWorkspaceAccess": "workspace_access"}
    data_mode: str  # download | mount
    idle_minutes: int
    workspace_access: str  # private | public

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> AmlConfig:
        return cls(data_mode=check_one_of("amlDataMode", values["amlDataMode"]),
                   workspace_access=check_one_of("amlWorkspaceAccess", values["amlWorkspaceAccess"]),
                   idle_minutes=check_range("amlIdleMinutes", values["amlIdleMinutes"]))


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
# security/invariants.py's PUBLIC_ACCESS_TAG on an open Azure ML workspace) are not the stack file's to set and count
# in the 50.
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

