"""Hourly cost estimate of a stack at its minimum and maximum node counts (pure).

GPU nodes dominate. Fixed parts are the always-on resources billed by the hour; usage-based charges
(storage capacity and transactions, log ingestion, egress) depend on the workload and are left out.
"""
from __future__ import annotations

from dataclasses import dataclass

from infra.config import StackConfig

# Approximate USD list prices per hour (East US, 2026).
NAT_GATEWAY_PER_HOUR = 0.045
PUBLIC_IP_PER_HOUR = 0.005
REGISTRY_PER_HOUR = {"Basic": 0.167 / 24, "Standard": 0.667 / 24, "Premium": 1.667 / 24}


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


def estimate(config: StackConfig) -> CostEstimate:
    fixed = {
        "NAT gateway": NAT_GATEWAY_PER_HOUR,
        "egress public IP": PUBLIC_IP_PER_HOUR,
        f"container registry ({config.registry_sku})": REGISTRY_PER_HOUR[config.registry_sku],
    }
    return CostEstimate(fixed, config.sku.price_per_hour, config.min_nodes, config.max_nodes)
