"""Catalog of the GPU VM sizes a stack may ask for.

'r' in a size name means RDMA: an InfiniBand NIC, which multi-node Horovod (NCCL over IB) needs.
Prices are approximate pay-as-you-go Linux list prices in USD per hour (East US, 2026); `plan` uses
them for an order-of-magnitude estimate only, so check the Azure pricing page before budgeting.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from datetime import date


# Where the catalog's facts come from (each row below cites these by name).
# Quota families: the name.value `az vm list-usage --location X` reports per VM family, which Azure's size pages do
# not print; taken from the family table of Red Hat's OpenShift "Installing on Azure" guide (tested instance types,
# GPU accelerated), the NDm A100 v4 one from `az vm list-usage` output quoted in public repos: compare them
# case-insensitively (Azure's own casing varies between families).
# Batch: https://learn.microsoft.com/azure/batch/batch-pool-vm-sizes (supported VM series table: NCv3, NCasT4_v3,
# NDv4 "all sizes"; silent on the others) and https://github.com/Azure/Batch/issues/173 (ND H100 v5 "supported in
# select regions": `az batch location list-skus` is the authority per region).
# Azure ML: https://learn.microsoft.com/azure/machine-learning/concept-compute-target#supported-vm-series-and-sizes
# (lists NCv3, NCasT4_v3, NDasrA100_v4; silent on the others; `az ml compute list-sizes` per region).
BATCH_SIZES_DOC = "https://learn.microsoft.com/azure/batch/batch-pool-vm-sizes"
AML_SIZES_DOC = "https://learn.microsoft.com/azure/machine-learning/concept-compute-target#supported-vm-series-and-sizes"
RETIREMENT_WARNING_DAYS = 365  # plan warns when a size retires within this many days


# The same topology files inside the training images (images/nccl-topology, copied from Azure/azhpc-images'
# topology/ folder, MIT): Azure ML's containers do not see the host's /opt/microsoft (Batch mounts it), so an Azure ML
# job names the image's copy (Microsoft's own Azure ML NCCL examples copy the file into the image too).
IMAGE_TOPOLOGY_DIR = "/opt/dltrain/nccl-topology"


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
    successor: str | None = None  # what to use instead of a retired (or retiring) size
    quota_family: str = ""  # the vCPU quota family the size counts against (dedicated quota; Spot: one for all)
    batch_listed: bool | None = None  # Batch's supported-size docs list its series (None: the docs are silent)
    aml_listed: bool | None = None  # Azure ML's supported-series table lists it (None: silent)
    retiring_on: str | None = None  # ISO date of an announced retirement that has not happened yet
    price_checked: bool = True  # False: no East US pay-as-you-go price was seen for it here (plan says so)
    price_basis: str = ""  # how an unchecked price was estimated (plan prints it with price_note)
    # NCCL all-reduce bus bandwidth (GB/s, nccl-tests' busbw) below which `python -m training interconnect-check`
    # stops a multi-node job before training; None: measured and printed, no verdict (no InfiniBand, or no figure).
    # What it catches is NCCL falling back to TCP. Such a run crosses nodes over the VM's Ethernet NICs, whose
    # "maximum aggregated bandwidth ... across all NICs" is 80000 Mbps = 10 GB/s on ND H100 v5 (sizes page, Network
    # tab: https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/nd-h100-v5-series), so its bus
    # bandwidth cannot pass 10 GB/s; InfiniBand gives 8 x 400 Gb/s = 400 GB/s per node. The floor is twice the
    # Ethernet ceiling (20 GB/s): every TCP fallback stops, no healthy InfiniBand run does.
    # Not the health checks' figures (https://github.com/Azure/azurehpc-health-checks conf/nd96isr_h100_v5.conf
    # `check_nccl_allreduce 460.0 1 16G`, nd96isr_h200_v5.conf `431.0`): those are an 8-GPU all-reduce on ONE node
    # over NVLink, and they publish no multi-node figure, so as a floor for a job across nodes they would stop
    # healthy runs. ND H200 v5's network table was not found here: its floor assumes H100 v5's Ethernet figure.
    # The A100 sizes: no floor set (not checked here).
    allreduce_floor_gbps: float | None = None
    # ResNet50 img/s per GPU this size should reach with PyTorch at 224 px, from a measured benchmark (None: not
    # measured on this GPU): jobs pass it to train (--expected-img-per-sec), whose progress lines and summary give the
    # run's share of it and what bounds the run; `infra status` prices the shortfall. Measured (docs/training.md,
    # "Lever by lever on one H100", 2026-11-26): one H100 80 GB HBM3 (ND H100 v5's GPU), the trainer itself on
    # synthetic data (DDP, bf16, channels-last, torch.compile, batch 256, the fused SGD step) 5,363 img/s; before the
    # fused step, 2026-11-24, 4,996-5,155. Not the H100 NVL (NC H100 v5), nor H200, A100, V100 or T4: none measured.
    benchmark_img_per_sec: float | None = None
    # The azurehpc-health-checks configuration of this size (conf/<name>.conf, https://github.com/Azure/azurehpc-health-checks,
    # the name its run-health-checks.sh derives from the VM size: lower case, without "standard_"), which the Batch
    # pool's start task runs before a node takes a task (infra/core/node_health.py); "": no check, the start task says
    # so in one line. Set on the InfiniBand sizes, each name checked against the confs of v0.4.5, the release the
    # pinned HPC image installs (tests/infra/core/test_node_health.py). The NC A100/H100 v5 sizes have confs upstream
    # too, not wired here.
    health_conf: str = ""
    # What feeds the GPUs data (infra/core/data/path.py), from the size's page on learn.microsoft.com (linked per row):
    # the "Max network bandwidth" across all NICs in Mbps (Ethernet, which Blob and NFS traffic use; not InfiniBand),
    # the local (temp) storage in GiB and whether it is NVMe, and its published read speed in MB/s (None: the page
    # leaves the column blank, so no figure is used). None: the page was not read here.
    nic_mbps: int | None = None
    local_disk_gib: int | None = None
    local_nvme: bool = False
    local_read_mbps: float | None = None

    @property
    def retired(self) -> bool:
        return self.retired_on is not None


def price_note(sku: GpuSku) -> str:
    """What plan adds beside a node price that no published figure backs ("" when one does)."""
    if sku.price_checked:
        return ""
    basis = f"an estimate, {sku.price_basis}" if sku.price_basis else "a rough figure"
    return (f" ({basis}: no published East US pay-as-you-go price was found for this size; ask the Azure Retail "
            f"Prices API, https://prices.azure.com/api/retail/prices?$filter=armSkuName eq '{sku.name}' and "
            "armRegionName eq 'eastus', before budgeting)")


def retirement_warning(sku: GpuSku, today: date) -> str | None:
    """The line plan prints for a size whose announced retirement is near (within RETIREMENT_WARNING_DAYS)."""
    if not sku.retiring_on:
        return None
    days = (date.fromisoformat(sku.retiring_on) - today).days
    if days > RETIREMENT_WARNING_DAYS:
        return None
    instead = f"; move to {sku.successor}" if sku.successor else ""
    return (f"gpuSku {sku.name} retires on {sku.retiring_on} (in {max(days, 0)} days): pools and clusters of it "
            f"stop getting nodes then{instead}")


CATALOG: dict[str, GpuSku] = {
    sku.name: sku
    for sku in [
        # NCv3 (V100): the reference architecture's sizes, all retired on 2025-09-30
        # (https://learn.microsoft.com/azure/virtual-machines/ncv3-retirement). NC24rs_v3 too: its own page, first
        # dated March 31, 2025, now reads "Migrate your Standard_NC24rs_v3 virtual machine size by September 30,
        # 2025" and "All the NCv3-series VM sizes, including Standard_NC24rs_v3, will be retired on September 30,
        # 2025" (https://learn.microsoft.com/azure/virtual-machines/ncv3-nc24rs-retirement). That page recommends
        # NCadsH100_v5 (no InfiniBand); NC24rs_v3 was the reference's RDMA size for multi-node jobs, so its
        # successor here is the InfiniBand ND A100 v4.
        GpuSku("Standard_NC24rs_v3", 4, "V100 16GB", True, 13.46, 24, "", "2025-09-30", "Standard_ND96asr_v4",
               quota_family="standardNCSv3Family", batch_listed=True, aml_listed=True, health_conf="nc24rs_v3"),
        GpuSku("Standard_NC24s_v3", 4, "V100 16GB", False, 12.24, 24, "", "2025-09-30", "Standard_NC24ads_A100_v4",
               quota_family="standardNCSv3Family", batch_listed=True, aml_listed=True),
        GpuSku("Standard_NC6s_v3", 1, "V100 16GB", False, 3.06, 6, "", "2025-09-30", "Standard_NC24ads_A100_v4",
               quota_family="standardNCSv3Family", batch_listed=True, aml_listed=True),
        # Single-node sizes, no InfiniBand: good for one-node jobs and trials.
        # Network 8000 Mbps, temp disk 176 GiB (SCSI, read speed left blank):
        # https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/ncast4v3-series
        GpuSku("Standard_NC4as_T4_v3", 1, "T4 16GB", False, 0.53, 4,
               quota_family="StandardNCASv3_T4Family", batch_listed=True, aml_listed=True,
               nic_mbps=8000, local_disk_gib=176),
        GpuSku("Standard_NC24ads_A100_v4", 1, "A100 80GB", False, 3.67, 24,
               quota_family="StandardNCADSA100v4Family"),
        # NC H100 v5 (https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/ncadsh100v5-series):
        # H100 NVL 94 GB PCIe, no InfiniBand; the 2-GPU size's pair is joined by NVLink.
        GpuSku("Standard_NC40ads_H100_v5", 1, "H100 NVL 94GB", False, 6.98, 40,
               quota_family="StandardNCadsH100v5Family"),
        GpuSku("Standard_NC80adis_H100_v5", 2, "H100 NVL 94GB", False, 13.96, 80,
               quota_family="StandardNCadsH100v5Family", price_checked=False,
               price_basis="twice NC40ads H100 v5's price"),
        # InfiniBand sizes: 8 GPUs per node, NVLink inside, 200-400 Gb/s IB per GPU between nodes.
        # Topology files: the Ubuntu HPC image ships one per ND family under /opt/microsoft
        # (https://learn.microsoft.com/azure/virtual-machines/workloads/hpc/configure, "NCCL topology").
        # ND A100 v4: network 24000 Mbps, local storage "1 Disk, 6000 GiB" (read speed not published):
        # https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/ndasra100v4-series
        GpuSku("Standard_ND96asr_v4", 8, "A100 40GB", True, 27.20, 96, "/opt/microsoft/ndv4-topo.xml",
               quota_family="StandardNDASv4_A100Family", batch_listed=True, aml_listed=True, health_conf="nd96asr_v4",
               nic_mbps=24000, local_disk_gib=6000),
        GpuSku("Standard_ND96amsr_A100_v4", 8, "A100 80GB", True, 32.77, 96, "/opt/microsoft/ndv4-topo.xml",
               quota_family="standardNDAMSv4_A100Family", health_conf="nd96amsr_a100_v4"),
        GpuSku("Standard_ND96isr_H100_v5", 8, "H100 80GB", True, 98.32, 96, "/opt/microsoft/ndv5-topo.xml",
               quota_family="standardNDSH100v5Family", batch_listed=True, allreduce_floor_gbps=20.0,
               benchmark_img_per_sec=5363.0, health_conf="nd96isr_h100_v5",
               # Network 80000 Mbps; local storage "1 Disk, 28000 GiB" of NVMe, its read and write columns blank:
               # Azure publishes no throughput for it, and no vendor figure for its drives was found here
               # (https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/ndh100v5-series, Local
               # storage and Network tabs). How many NVMe devices the guest sees the docs do not say: the start task
               # finds them.
               nic_mbps=80000, local_disk_gib=28000, local_nvme=True),
        # ND H200 v5 (https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/nd-h200-v5-series):
        # 8x H200 141 GB, NVLink 4 inside, one 400 Gb/s NDR InfiniBand link per GPU (3.2 Tb/s per VM). Topology
        # file: ND H100 v5's, assumed (same 8-GPU, 8-NIC host layout; the docs seen here do not name one for H200,
        # and the HPC image writes /etc/nccl.conf per size at boot). Price: no published East US pay-as-you-go
        # figure was found here (checked 2026-11-23: Azure's pricing pages and the Retail Prices API,
        # https://learn.microsoft.com/rest/api/cost-management/retail-prices/azure-retail-prices, are not reachable
        # from here and no stored copy of either names the size; one third-party table lists "~$84.80" in West US 3,
        # not East US and not Azure's own), so ND H100 v5's x 1.12 stays, flagged (price_checked False: plan says so).
        GpuSku("Standard_ND96isr_H200_v5", 8, "H200 141GB", True, 110.12, 96, "/opt/microsoft/ndv5-topo.xml",
               quota_family="standardNDISRH200V5Family", price_checked=False,
               price_basis="ND H100 v5's price x 1.12", allreduce_floor_gbps=20.0, health_conf="nd96isr_h200_v5"),
    ]
}

# VM sizes offered for the NFS file server: USD per hour (East US, 2026). Network bandwidth is what feeds
# the GPU nodes, so general-purpose sizes with 12.5+ Gb/s are listed; NFS_VM_FACTS below gives each one's figures.
NFS_VM_SIZES: dict[str, float] = {
    "Standard_D8s_v5": 0.384,  # 12.5 Gb/s
    "Standard_D16s_v5": 0.768,  # 12.5 Gb/s
    "Standard_D32s_v5": 1.536,  # 16 Gb/s
    "Standard_D64s_v5": 3.072,  # 30 Gb/s
    "Standard_E16s_v5": 1.008,  # 12.5 Gb/s, more page cache for hot files
    "Standard_L16s_v3": 1.248,  # local NVMe as well
}


@dataclass(frozen=True)
class NfsVmFacts:
    """What an NFS server VM can serve (infra/core/data/path.py): its NIC and its uncached data-disk limits."""
    nic_mbps: int  # "Max network bandwidth", all NICs
    disk_iops: int  # "Max uncached disk throughput" IOPS: the VM's cap over all its data disks
    disk_mbps: int  # the same row's MBps (10^6 bytes/s)


# Dsv5: https://learn.microsoft.com/azure/virtual-machines/dv5-dsv5-series (Dsv5 table: uncached IOPS/MBps, network).
# Lsv3: https://learn.microsoft.com/azure/virtual-machines/sizes/storage-optimized/lsv3-series (Remote storage and
# Network tabs; its 2 local NVMe drives, 4,000 MBps, are not what the NFS server exports: its data disks are).
# Esv5: the network figure from the sizes overview (12500 Mbps); its disk caps were not read here, so E16s_v5 is
# given D16s_v5's (same vCPUs, same generation), marked as an assumption.
NFS_VM_FACTS: dict[str, NfsVmFacts] = {
    "Standard_D8s_v5": NfsVmFacts(12500, 12800, 290),
    "Standard_D16s_v5": NfsVmFacts(12500, 25600, 600),
    "Standard_D32s_v5": NfsVmFacts(16000, 51200, 865),
    "Standard_D64s_v5": NfsVmFacts(30000, 80000, 1735),
    "Standard_E16s_v5": NfsVmFacts(12500, 25600, 600),  # disk caps assumed as D16s_v5's (see above)
    "Standard_L16s_v3": NfsVmFacts(12500, 25600, 600),
}


def _short(name: str) -> str:
    key = str(name).strip().lower()
    return key[len("standard_"):] if key.startswith("standard_") else key


_BY_SHORT = {_short(sku): sku for sku in CATALOG}  # "nd96asr_v4" -> "Standard_ND96asr_v4"


def find(name: str) -> GpuSku | None:
    """The catalog's size `name` names, compared without case and with or without its "Standard_" prefix
    ("nd96asr_v4"). Whether Azure compares vmSize without case its docs do not say: the stack goes on with the
    catalog's spelling, so what Azure receives is the catalog's, whatever the stack file wrote."""
    sku = _BY_SHORT.get(_short(name))
    return CATALOG[sku] if sku else None


def unknown_size(name: str) -> str:
    """gpuSku's refusal of a size the catalog lacks: the closest names first ("did you mean"), then them all; only
    sizes a stack can still deploy (a retired one is refused in turn, so it is never offered)."""
    current = {short: sku for short, sku in _BY_SHORT.items() if not CATALOG[sku].retired}
    close = [current[m] for m in difflib.get_close_matches(_short(name), current, n=2, cutoff=0.75)]
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return f"unknown size {name!r}; {hint}known sizes: {', '.join(sorted(current.values()))}"
