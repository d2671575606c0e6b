"""Catalog of the GPU VM sizes a stack may ask for.

'r' in a size name means RDMA: an InfiniBand NIC, which multi-node Horovod (NCCL over IB) needs.
Prices are approximate pay-as-you-go Linux list prices in USD per hour (East US, 2026); `plan` uses
them for an order-of-magnitude estimate only, so check the Azure pricing page before budgeting.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSku:
    name: str
    gpus: int  # GPUs per node: Horovod starts one process per GPU
    gpu_model: str
    infiniband: bool
    price_per_hour: float
    vcpus: int  # what the Batch account's core quota counts
    nccl_topo_file: str = ""  # the NCCL topology file the HPC image ships for this size (InfiniBand sizes)
    retired_on: str | None = None  # ISO date Azure retired the size
    successor: str | None = None  # what to use instead of a retired size

    @property
    def retired(self) -> bool:
        return self.retired_on is not None


CATALOG: dict[str, GpuSku] = {
    sku.name: sku
    for sku in [
        # NCv3 (V100): the reference architecture's sizes, retired on 2025-09-30.
        GpuSku("Standard_NC24rs_v3", 4, "V100 16GB", True, 13.46, 24, "", "2025-09-30", "Standard_ND96asr_v4"),
        GpuSku("Standard_NC24s_v3", 4, "V100 16GB", False, 12.24, 24, "", "2025-09-30", "Standard_NC24ads_A100_v4"),
        GpuSku("Standard_NC6s_v3", 1, "V100 16GB", False, 3.06, 6, "", "2025-09-30", "Standard_NC24ads_A100_v4"),
        # Single-node sizes, no InfiniBand: good for one-node jobs and trials.
        GpuSku("Standard_NC4as_T4_v3", 1, "T4 16GB", False, 0.53, 4),
        GpuSku("Standard_NC24ads_A100_v4", 1, "A100 80GB", False, 3.67, 24),
        GpuSku("Standard_NC40ads_H100_v5", 1, "H100 NVL 94GB", False, 6.98, 40),
        # InfiniBand sizes: 8 GPUs per node, NVLink inside, 200-400 Gb/s IB per GPU between nodes.
        # Topology files: the Ubuntu HPC image ships one per ND family under /opt/microsoft
        # (https://learn.microsoft.com/azure/virtual-machines/workloads/hpc/configure, "NCCL topology").
        GpuSku("Standard_ND96asr_v4", 8, "A100 40GB", True, 27.20, 96, "/opt/microsoft/ndv4-topo.xml"),
        GpuSku("Standard_ND96amsr_A100_v4", 8, "A100 80GB", True, 32.77, 96, "/opt/microsoft/ndv4-topo.xml"),
        GpuSku("Standard_ND96isr_H100_v5", 8, "H100 80GB", True, 98.32, 96, "/opt/microsoft/ndv5-topo.xml"),
    ]
}

# VM sizes offered for the NFS file server: USD per hour (East US, 2026). Network bandwidth is what feeds
# the GPU nodes, so general-purpose sizes with 12.5+ Gb/s are listed.
NFS_VM_SIZES: dict[str, float] = {
    "Standard_D8s_v5": 0.384,  # 12.5 Gb/s
    "Standard_D16s_v5": 0.768,  # 12.5 Gb/s
    "Standard_D32s_v5": 1.536,  # 16 Gb/s
    "Standard_D64s_v5": 3.072,  # 30 Gb/s
    "Standard_E16s_v5": 1.008,  # 12.5 Gb/s, more page cache for hot files
    "Standard_L16s_v3": 1.248,  # local NVMe as well
}
