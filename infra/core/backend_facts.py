"""The backends' facts in one table: a row per stack `backend` key, read by name wherever a fact (not a behaviour)
of a backend matters: the config's allowed values and backend-only keys, the tag limit, the network's service
endpoints and the cost estimate (pure, like training/frameworks.py).

What a backend does (declare its resources, run its jobs, describe itself in plan) is its class in
infra/backends/<name>/; what the layers below it need to know about it is here, so they never import a backend.
A new backend is one row here plus its folder and its line in infra/backends/__init__.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Azure's general limit: 50 tags per resource.
# https://learn.microsoft.com/azure/azure-resource-manager/management/tag-resources#limitations
MAX_TAGS = 50
# The Batch pool nodes' OS disk (managed, premium SSD): the HPC image's own system, plus the training images Docker keeps
# there (a pull holds the downloaded layers and their unpacked copy), with room for the other framework's image
# and a rebuilt one beside the old. osDisk.diskSizeGB is "the initial disk size in GB when creating new OS disk"
# (https://learn.microsoft.com/rest/api/batchmanagement/pool/create#osdisk). The size is a judgment, not a
# measurement: no node has run here.
POOL_OS_DISK_GB = 256  # batch/cluster.py declares it, cost.py prices it
PRIVATE_ENDPOINT_PER_HOUR = 0.01  # USD, East US (cost.py's region)


@dataclass(frozen=True)
class BackendFacts:
    name: str  # the stack's `backend` key
    # Keys that mean something to this backend only; setting one for another backend is refused, not ignored.
    only_keys: tuple[str, ...]
    max_tags: int = MAX_TAGS  # the fewest tags any of its resources takes (Azure's per-type limits)
    key_vault_endpoint: bool = False  # whether its subnets need the Microsoft.KeyVault service endpoint
    fixed_costs: dict[str, float] = field(default_factory=dict)  # its always-on items, USD per hour
    node_os_disk_gb: int | None = None  # a premium OS disk billed with each node; None: the service sizes it


FACTS: dict[str, BackendFacts] = {f.name: f for f in (
    # The reference architecture: NFS server, Batch account and InfiniBand GPU pool. Every resource it declares
    # takes Azure's 50 tags. Its NFS server's cost follows the nfs* keys (cost.py).
    BackendFacts("batch", only_keys=("nfsKind", "nfsVmSize", "nfsDiskCount", "nfsDiskSizeGb", "nfsEncryptionAtHost",
                                     "dataLocalCache", "dataTier",
                                     "trainingDataWaitMinutes", "trainingRetries", "allocationTimeoutMinutes",
                                     "batchPoolAllocation", "batchServiceObjectId"),
                 fixed_costs={"Batch account": 0.0},  # Batch itself is free: only its nodes bill
                 node_os_disk_gb=POOL_OS_DISK_GB),
    # Its successor: an Azure ML workspace, compute cluster and command job.
    BackendFacts("azureml", only_keys=("amlDataMode", "amlIdleMinutes", "amlWorkspaceAccess"),
                 # The workspace's private DNS zones and their VNet links take at most 15 tags ("Azure Private DNS
                 # (Zone, A records, and virtual network link)" in the limitations above), and every one of them
                 # gets the stack's tags.
                 max_tags=15,
                 # Its Key Vault admits the VNet by a VNet rule, which needs the service endpoint on the subnet.
                 key_vault_endpoint=True,
                 fixed_costs={"Azure ML workspace private endpoint": PRIVATE_ENDPOINT_PER_HOUR,
                              # no hourly charge: the compute bills, Key Vault per operation
                              "Azure ML workspace, Key Vault": 0.0}),
)}
BACKENDS = tuple(FACTS)
BACKEND_ONLY_KEYS = {f.name: f.only_keys for f in FACTS.values()}


def facts(name: str) -> BackendFacts:
    """The row a stack's `backend` key names (the config has refused any other)."""
    return FACTS[name]


def applies(key: str, backend_name: str) -> bool:
    """Whether a config key means something to this backend (no other backend's only_keys holds it)."""
    return all(key not in keys for other, keys in BACKEND_ONLY_KEYS.items() if other != backend_name)
