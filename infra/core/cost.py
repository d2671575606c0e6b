"""Hourly cost estimate of a stack at its minimum and maximum node counts (pure).

GPU nodes dominate. Fixed parts are the always-on resources billed by the hour; usage-based charges
(storage capacity and transactions, log ingestion, egress) depend on the workload and are left out.
"""
from __future__ import annotations

from dataclasses import dataclass

from infra.backends import backend
from infra.core.config import StackConfig
from infra.core.skus import NFS_VM_SIZES

# Approximate USD list prices per hour (East US, 2026).
NAT_GATEWAY_PER_HOUR = 0.045
PUBLIC_IP_PER_HOUR = 0.005
REGISTRY_PER_HOUR = {"Basic": 0.167 / 24, "Standard": 0.667 / 24, "Premium": 1.667 / 24}
HOURS_PER_MONTH = 730
# Premium SSD v1 tiers: (largest size in GiB, USD per month); a disk bills at the tier its size fits in.
PREMIUM_SSD_TIERS = ((32, 5.28), (64, 10.21), (128, 19.71), (256, 38.01), (512, 73.22), (1024, 135.17),
                     (2048, 259.05), (4096, 495.57))
AZURE_FILES_PREMIUM_PER_GIB_MONTH = 0.16
PRIVATE_ENDPOINT_PER_HOUR = 0.01


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
    chosen = backend(config.backend)
    fixed.update(chosen.fixed_costs(config))
    # Low-priority AML nodes bill less than the dedicated list price (the discount varies by region and is not in
    # the catalog): the dedicated price is the estimate's upper bound.
    node_price = config.nodes.sku.price_per_hour + chosen.node_extra(config)[0]
    return CostEstimate(fixed, node_price, config.nodes.min_nodes, config.nodes.max_nodes)
