"""Hourly cost estimate of a stack at its minimum and maximum node counts, a month idle, the ceiling of one job,
and what the NFS file server costs idle (pure).

GPU nodes dominate. Fixed parts are the always-on resources billed by the hour; usage-based charges
(storage capacity and transactions, log ingestion, egress) depend on the workload and are left out.
Every price here (and in skus.py) is an East US list price: prices differ by region, and this module has no
per-region table, so `plan` and `teams` label them with the region they are for instead of applying them to the
stack's region unlabelled. Per-region figures would come from the Azure Retail Prices API
(https://learn.microsoft.com/rest/api/cost-management/retail-prices/azure-retail-prices: filter by armRegionName
and armSkuName), which needs the network; none is fetched here.
"""
from __future__ import annotations

from dataclasses import dataclass

from infra.core.backend_facts import applies, facts
from infra.core.config.stack import StackConfig
from infra.core.skus import NFS_VM_SIZES

PRICES_REGION = "eastus"  # the region every price below and in skus.py is for
# Approximate USD list prices per hour (East US, 2026).
NAT_GATEWAY_PER_HOUR = 0.045
PUBLIC_IP_PER_HOUR = 0.005
REGISTRY_PER_HOUR = {"Basic": 0.167 / 24, "Standard": 0.667 / 24, "Premium": 1.667 / 24}
HOURS_PER_MONTH = 730  # 365 x 24 / 12: the month Azure's pricing pages quote monthly prices for
# Premium SSD v1 tiers: (largest size in GiB, USD per month); a disk bills at the tier its size fits in.
PREMIUM_SSD_TIERS = ((32, 5.28), (64, 10.21), (128, 19.71), (256, 38.01), (512, 73.22), (1024, 135.17),
                     (2048, 259.05), (4096, 495.57))
AZURE_FILES_PREMIUM_PER_GIB_MONTH = 0.16


@dataclass(frozen=True)
class CostEstimate:
    fixed: dict[str, float]  # item -> USD/hour, billed whatever the node count
    node_price: float  # USD/hour per GPU node
    min_nodes: int
    max_nodes: int

    @property
    def fixed_total(self) -> float:
        return sum(self.fixed.values())

    def at(self, nodes: int) -> float:
        return self.fixed_total + nodes * self.node_price


def premium_disk_per_hour(size_gib: int) -> float:
    return next(price for limit, price in PREMIUM_SSD_TIERS if size_gib <= limit) / HOURS_PER_MONTH


def nfs_per_hour(config: StackConfig) -> dict[str, float]:
    if config.nfs.kind == "azure-files":
        return {f"NFS share (premium Azure Files, {config.nfs.disk_size_gb} GiB)":
                config.nfs.disk_size_gb * AZURE_FILES_PREMIUM_PER_GIB_MONTH / HOURS_PER_MONTH}
    return {f"NFS server VM ({config.nfs.vm_size})": NFS_VM_SIZES[config.nfs.vm_size],
            f"NFS data disks ({config.nfs.disk_count}x {config.nfs.disk_size_gb} GiB premium SSD)":
            config.nfs.disk_count * premium_disk_per_hour(config.nfs.disk_size_gb),
            "NFS OS disk": premium_disk_per_hour(30)}


def estimate(config: StackConfig) -> CostEstimate:
    fixed = {
        "NAT gateway": NAT_GATEWAY_PER_HOUR,
        "egress public IP": PUBLIC_IP_PER_HOUR,
        f"container registry ({config.registry.registry_sku})": REGISTRY_PER_HOUR[config.registry.registry_sku],
    }
    if applies("nfsKind", config.backend):  # the backend's NFS server, priced by the nfs* keys
        fixed.update(nfs_per_hour(config))
    fixed.update(facts(config.backend).fixed_costs)
    # Spot nodes (spot: true) bill the variable Spot rate, at most the pay-as-you-go price (plan.py, _spot_lines):
    # the pay-as-you-go price is the estimate's upper bound, never a fixed discount.
    node_price = config.nodes.sku.price_per_hour + node_extra(config)[0]
    return CostEstimate(fixed, node_price, config.nodes.min_nodes, config.nodes.max_nodes)


def node_extra(config: StackConfig) -> tuple[float, str]:
    """What each node bills beside its VM (USD per hour), and how plan says so ("" when nothing)."""
    disk_gb = facts(config.backend).node_os_disk_gb
    if disk_gb is None:
        return 0.0, ""  # the service sizes the nodes' OS disk itself (Azure ML): not priced
    return premium_disk_per_hour(disk_gb), f" (with its {disk_gb} GiB premium OS disk)"


def price_label(location: str | None) -> str:
    """Which region the prices are for, said beside them."""
    if location == PRICES_REGION:
        return "East US list prices"
    return f"East US list prices; {location} may differ" if location else "East US list prices; other regions differ"


def monthly(per_hour: float) -> float:
    return per_hour * HOURS_PER_MONTH


@dataclass(frozen=True)
class JobCeiling:
    """The most one job's GPU nodes can bill: every attempt running on maxNodes until trainingMaxHours."""
    nodes: int
    node_price: float
    max_hours: int
    attempts: int  # trainingRetries + 1 where the backend retries (Batch's maxTaskRetryCount), else 1

    @property
    def total(self) -> float:
        return self.nodes * self.node_price * self.max_hours * self.attempts


def job_ceiling(config: StackConfig) -> JobCeiling:
    # Batch: maxWallClockTime bounds each attempt and maxTaskRetryCount the attempts (batch/spec.py); Azure ML: the
    # command job's timeout, and it sets no retries (azureml/job.py), so one attempt.
    attempts = config.training.retries + 1 if applies("trainingRetries", config.backend) else 1
    return JobCeiling(config.nodes.max_nodes, estimate(config).node_price, config.training.max_hours, attempts)


@dataclass(frozen=True)
class NfsIdle:
    """The NFS file server's monthly cost, billed whether or not a job reads it, beside the other nfsKind's."""
    kind: str  # the stack's nfsKind
    per_month: float  # what the stack's file server bills a month, jobs or not
    capacity_gib: int  # the data capacity it gives (the VM's data disks, or the share's quota)
    other_per_month: float  # vm: a premium Azure Files share of that capacity; azure-files: the VM and OS disk alone
    break_even_gib: int  # vm: below this share size, azure-files bills less per month than this server


def nfs_idle(config: StackConfig) -> NfsIdle | None:
    """None where the backend has no NFS server (nfsKind applies to batch only)."""
    if not applies("nfsKind", config.backend):
        return None
    nfs = config.nfs
    per_month = monthly(sum(nfs_per_hour(config).values()))
    if nfs.kind == "azure-files":
        vm_alone = monthly(NFS_VM_SIZES[nfs.vm_size] + premium_disk_per_hour(30))
        return NfsIdle(nfs.kind, per_month, nfs.disk_size_gb, vm_alone, 0)
    capacity = nfs.disk_count * nfs.disk_size_gb
    return NfsIdle(nfs.kind, per_month, capacity, capacity * AZURE_FILES_PREMIUM_PER_GIB_MONTH,
                   int(per_month / AZURE_FILES_PREMIUM_PER_GIB_MONTH))
