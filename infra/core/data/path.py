"""Will the stack's GPUs be fed? What the GPUs need at maxNodes against what the configured data path delivers, and
what staging the dataset costs at each job start: `plan`'s `data path:` line and `submit`'s first-line warning.

Pure: published figures only (each with its link beside it), no network. The dataset is declared, not read: plan
runs offline and the dataset's manifest (dataset.json in the `data` container) is only reachable with a sign-in, so
the estimate is for ImageNet's train set (DATASET below), the dataset the stacks are sized for; the functions take
another Dataset for anything else. Every stage is the whole cluster's images per second; the path delivers its
slowest stage's figure. A stage without a published figure is named as such and left out of the minimum, never
guessed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from infra.core import cost
from infra.core.skus import NFS_VM_FACTS, GpuSku

FED_SHARE = 0.95  # below this share of the need, plan and submit say the GPUs will wait for data

# ImageNet-1k's train set (ILSVRC2012, https://www.image-net.org/challenges/LSVRC/2012/): 1,281,167 JPEGs, 147.9 GB
# as ILSVRC2012_img_train.tar, so 115.4 KB on average. Plan assumes it (docs/data.md, "Feeding the GPUs", says why).


@dataclass(frozen=True)
class Dataset:
    name: str
    bytes: float
    images: int

    @property
    def image_bytes(self) -> float:
        return self.bytes / self.images


IMAGENET = Dataset("ImageNet's train set", 147.9e9, 1_281_167)
DATASET = IMAGENET

# NVIDIA's MLPerf Training v4.0 ResNet-50 on one 8-GPU DGX H100 node: 57.2k img/s end to end, its input pipeline
# DALI over a local copy with the GPUs' hardware JPEG decoders (hw_decoder_load 0.99): the demonstrated decode figure
# for an H100 node, a floor of what its decoders do, since the pipeline kept up with training
# (https://github.com/mlcommons/training_results_v4.0/tree/main/NVIDIA/results, the single-node dgxh100 ResNet result
# logs; config_DGXH100.sh under NVIDIA/benchmarks/resnet/implementations). No other GPU in the catalog has such a
# figure here: plan says so instead of inventing one.
DECODE_IMG_PER_SEC_PER_GPU = {"H100 80GB": 57_200 / 8}
DECODE_SOURCE = "MLPerf v4.0 NVIDIA DGX H100, DALI hardware decode, 57.2k img/s per 8-GPU node"

# Standard storage accounts' default egress (https://learn.microsoft.com/azure/storage/common/scalability-targets-
# standard-account, include dated 11/12/2025): 200 Gbps for GPv2 accounts in the regions listed below, 50 Gbps
# elsewhere; 40,000 requests/s in the same regions, 20,000 elsewhere (higher by request to Azure Support).
# Older versions of the page said 120 Gbps (the figure azureml-examples' data-loading guide quotes).
HIGH_TARGET_REGIONS = frozenset({
    "southafricanorth", "brazilsouth", "canadacentral", "centralus", "eastus", "eastus2", "northcentralus",
    "southcentralus", "westus", "westus2", "westus3", "australiaeast", "centralindia", "chinaeast2", "chinanorth3",
    "eastasia", "japaneast", "jioindiawest", "koreacentral", "southeastasia", "francecentral", "germanywestcentral",
    "northeurope", "norwayeast", "swedencentral", "uksouth", "westeurope", "usgovarizona", "usgovvirginia"})
STORAGE_DOC = "https://learn.microsoft.com/azure/storage/common/scalability-targets-standard-account"

# Premium SSD (v1) per disk, by provisioned size: (max GiB, IOPS, MB/s); an IO of up to 256 KiB counts as one, so one
# 115 KB JPEG read is one IO (https://learn.microsoft.com/azure/virtual-machines/disks-types#premium-ssd-size).
PREMIUM_SSD = ((32, 120, 25), (64, 240, 50), (128, 500, 100), (256, 1100, 125), (512, 2300, 150),
               (1024, 5000, 200), (2048, 7500, 250), (4096, 7500, 250))


def premium_ssd(size_gib: int) -> tuple[int, int]:
    """(IOPS, MB/s) of one Premium SSD of `size_gib` (its tier: the smallest that holds it)."""
    return next((iops, mbps) for top, iops, mbps in PREMIUM_SSD if size_gib <= top) if size_gib <= 4096 else (7500, 250)


def azure_files_premium(quota_gib: int) -> tuple[int, float]:
    """(IOPS, MB/s) of a premium (provisioned v1) NFS share of `quota_gib`: baseline IOPS MIN(3000 + GiB, 102400),
    throughput (ingress + egress) 100 + CEILING(0.04 GiB) + CEILING(0.06 GiB) MiB/s
    (https://learn.microsoft.com/azure/storage/files/understanding-billing#provisioned-v1-model)."""
    mib_s = 100 + math.ceil(0.04 * quota_gib) + math.ceil(0.06 * quota_gib)
    return min(3000 + quota_gib, 102_400), mib_s * 1.048576


@dataclass(frozen=True)
class Stage:
    name: str  # source, node network, local disk, decode
    img_per_sec: float | None  # the whole cluster's; None: no published figure
    basis: str  # the figure and where it comes from, or why there is none

    def text(self) -> str:
        return f"{self.name} {_n(self.img_per_sec)} img/s ({self.basis})" if self.img_per_sec is not None \
            else f"{self.name}: no published figure ({self.basis})"


@dataclass(frozen=True)
class Staging:
    seconds: float | None  # per job start, all nodes in parallel; None: unknown; 0: nothing is staged
    basis: str
    node_hours: float | None = None
    cost: float | None = None  # node_hours x the node price


@dataclass(frozen=True)
class Need:
    img_per_sec: float | None  # the cluster's, at maxNodes; None: no benchmark for this size or framework
    basis: str


@dataclass(frozen=True)
class DataPath:
    tier: str  # what the line calls the path: node-local, nfs, nfs + dataLocalCache, azureml download|mount
    need: Need
    stages: tuple[Stage, ...]
    staging: Staging
    fix: str  # what to change when the path falls short ("" when nothing would help from config)
    nodes: int

    @property
    def slowest(self) -> Stage | None:
        known = [s for s in self.stages if s.img_per_sec is not None]
        return min(known, key=lambda s: s.img_per_sec) if known else None

    @property
    def delivered(self) -> float | None:
        return self.slowest.img_per_sec if self.slowest else None

    @property
    def share(self) -> float | None:
        if self.need.img_per_sec is None or self.delivered is None:
            return None
        return self.delivered / self.need.img_per_sec

    @property
    def short(self) -> bool:
        return self.share is not None and self.share < FED_SHARE

    def verdict(self) -> str:
        if self.share is None:
            return "no verdict: " + ("the need is unknown" if self.need.img_per_sec is None
                                     else "no stage has a published figure")
        if self.short:
            fix = self.fix or "no stack key raises it (docs/data.md, Feeding the GPUs)"
            return f"{_share(self.share)} of the need, below {FED_SHARE}: the GPUs will wait for data; fix: {fix}"
        return f"{_share(self.share)} of the need: fed"

    def line(self) -> str:
        """plan's `data path:` line: need, delivered (slowest stage named, every stage's figure), verdict, staging."""
        slowest = self.slowest
        delivered = (f"{_n(self.delivered)} img/s, slowest stage {slowest.name}" if slowest
                     else "unknown img/s")
        staging = self.staging
        if staging.seconds is None:
            stage_text = f"staging per job start unknown ({staging.basis})"
        elif staging.seconds == 0:
            stage_text = f"staging per job start: none ({staging.basis})"
        else:
            price = f"{staging.cost:,.0f}" if staging.cost >= 10 else f"{staging.cost:.2f}"
            stage_text = (f"staging {_duration(staging.seconds)} per job start ({staging.basis}), "
                          f"{price} USD ({staging.node_hours:.2f} node-hours at maxNodes)")
        return (f"data path: need {_n(self.need.img_per_sec)} img/s at maxNodes={self.nodes} ({self.need.basis}); "
                f"{self.tier} delivers {delivered} [{'; '.join(s.text() for s in self.stages)}]; {self.verdict()}; "
                f"{stage_text}")

    def warning(self) -> str | None:
        """submit's first line when the path falls short, else None."""
        if not self.short:
            return None
        return (f"warning: data path: the {self.tier} data path delivers {_n(self.delivered)} img/s ({self.slowest.name}), "
                f"{_share(self.share)} of the {_n(self.need.img_per_sec)} img/s the GPUs need at maxNodes={self.nodes}: "
                f"they will wait for data; fix: {self.fix or 'no stack key raises it (docs/data.md, Feeding the GPUs)'}")


def _share(share: float) -> str:
    return f"{share:.2f}" if share >= 0.1 else f"{share:.3f}"


def _n(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.0f}"


def _nodes(count: int) -> str:
    return f"{count} node{'s' if count != 1 else ''}"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def gb_per_sec_of_mbps(mbps: float) -> float:
    return mbps * 1e6 / 8 / 1e9


def need(sku: GpuSku, nodes: int, per_gpu: float | None, basis: str) -> Need:
    """The images per second the cluster's GPUs take at `nodes`: `per_gpu` x GPUs."""
    gpus = sku.gpus * nodes
    if per_gpu is None:
        return Need(None, basis)
    return Need(per_gpu * gpus, f"{gpus} GPUs x {per_gpu:,.0f}, {basis}")


def decode_stage(sku: GpuSku, nodes: int, loader: str = "dali") -> Stage:
    """The GPUs' decode with the ranks' loader: the published figure is DALI's hardware decode, so another loader
    (nvjpeg, pil, tf.data: per image on the GPU or on the host's cores) has none here and never borrows it."""
    if loader != "dali":
        return Stage("decode", None, f"--loader {loader}: no published figure (the one there is, {DECODE_SOURCE}, "
                                     "is --loader dali's, the PyTorch image's auto)")
    per_gpu = DECODE_IMG_PER_SEC_PER_GPU.get(sku.gpu_model)
    if per_gpu is None:
        return Stage("decode", None, f"no published DALI decode figure for {sku.gpu_model}")
    return Stage("decode", per_gpu * sku.gpus * nodes, f"{per_gpu * sku.gpus:,.0f}/node: {DECODE_SOURCE}")


def local_disk_stage(sku: GpuSku, nodes: int, data: Dataset) -> Stage:
    kind = "NVMe" if sku.local_nvme else "temp disk"
    if sku.local_read_mbps is None:
        size = f"{sku.local_disk_gib:,} GiB {kind}, " if sku.local_disk_gib else ""
        return Stage("local disk", None, f"{size}Azure's size page publishes no read speed")
    return Stage("local disk", sku.local_read_mbps * 1e6 / data.image_bytes * nodes,
                 f"{sku.local_read_mbps:,.0f} MB/s per node")


def node_network_stage(sku: GpuSku, nodes: int, data: Dataset) -> Stage:
    if sku.nic_mbps is None:
        return Stage("node network", None, f"{sku.name}'s network figure was not read here")
    return Stage("node network", sku.nic_mbps * 1e6 / 8 / data.image_bytes * nodes,
                 f"{sku.nic_mbps / 1000:g} Gb/s per node")


def egress_gbps(location: str) -> float:
    return 200.0 if location.lower().replace(" ", "") in HIGH_TARGET_REGIONS else 50.0


def nfs_source(kind: str, vm_size: str, disk_count: int, disk_size_gb: int, data: Dataset) -> Stage:
    """The NFS server's images per second for per-file JPEGs: its NIC, its disks' throughput and IOPS (one IO a
    file at least); the page cache is left out (64 GiB on D16s_v5 against a 138 GiB train set read in random order)."""
    if kind == "azure-files":
        iops, mbs = azure_files_premium(disk_size_gb)
        by_bytes = mbs * 1e6 / data.image_bytes
        return Stage("source", min(iops, by_bytes),
                     f"azure-files premium share of {disk_size_gb} GiB: {mbs:,.0f} MB/s = {by_bytes:,.0f} img/s, "
                     f"{iops:,} IOPS = {iops:,} files/s")
    facts = NFS_VM_FACTS.get(vm_size)
    if facts is None:
        return Stage("source", None, f"NFS VM {vm_size}: no figures in the catalog")
    disk_iops, disk_mbs = premium_ssd(disk_size_gb)
    iops = min(facts.disk_iops, disk_count * disk_iops)
    mbs = min(facts.disk_mbps, disk_count * disk_mbs)
    parts = {"NIC": facts.nic_mbps * 1e6 / 8 / data.image_bytes, "disks": mbs * 1e6 / data.image_bytes,
             "disk IOPS": float(iops)}
    limit = min(parts, key=parts.get)
    return Stage("source", parts[limit],
                 f"NFS VM {vm_size}, bound by its {limit}: NIC {facts.nic_mbps / 1000:g} Gb/s = {parts['NIC']:,.0f}, "
                 f"{disk_count} x {disk_size_gb} GiB Premium SSD {mbs:,} MB/s = {parts['disks']:,.0f}, {iops:,} IOPS")


def blob_staging(sku: GpuSku, nodes: int, location: str, data: Dataset, node_price: float, how: str) -> Staging:
    """Every node copies the dataset from Blob at once: the account's egress shared by all, each node's NIC."""
    account = egress_gbps(location)
    limits = {f"the account's {account:g} Gb/s egress ({location})": nodes * data.bytes / (account / 8 * 1e9)}
    if sku.nic_mbps:
        limits[f"each node's {sku.nic_mbps / 1000:g} Gb/s NIC"] = data.bytes / (gb_per_sec_of_mbps(sku.nic_mbps) * 1e9)
    bound = max(limits, key=limits.get)
    seconds = limits[bound]
    return _priced(seconds, f"{data.bytes / 1e9:.1f} GB x {_nodes(nodes)} {how}, bound by {bound}; local disk "
                            "write speed not published", nodes, node_price)


def _priced(seconds: float, basis: str, nodes: int, node_price: float) -> Staging:
    node_hours = nodes * seconds / 3600
    return Staging(seconds, basis, node_hours, node_hours * node_price)


def assess(*, sku: GpuSku, nodes: int, location: str, backend: str, tier: str, nfs_kind: str, nfs_vm_size: str,
           nfs_disk_count: int, nfs_disk_size_gb: int, data_local_cache: bool, aml_data_mode: str,
           per_gpu: float | None, need_basis: str, node_price: float, data: Dataset = DATASET,
           loader: str = "dali") -> DataPath:
    """The stack's data path at `nodes` (its maxNodes), from its config's values (pure); `loader`: the ranks' loader
    on the GPU nodes (node_loader)."""
    wanted = need(sku, nodes, per_gpu, need_basis)
    decode = decode_stage(sku, nodes, loader)
    local = local_disk_stage(sku, nodes, data)
    fits = _fits(sku, data)
    to_local = "set dataTier node-local (each node reads its own copy from local disk)"
    if backend == "azureml":
        if aml_data_mode == "mount":
            source = Stage("source", egress_gbps(location) / 8 * 1e9 / data.image_bytes,
                           f"the storage account's {egress_gbps(location):g} Gb/s egress, {STORAGE_DOC}")
            return DataPath("azureml mount", wanted, (source, node_network_stage(sku, nodes, data), decode),
                            Staging(0, "mount streams during training"),
                            "amlDataMode download (the shards reach each node's local disk first)", nodes)
        return DataPath("azureml download", wanted, (local, decode),
                        blob_staging(sku, nodes, location, data, node_price, "downloaded as shards") if fits is None
                        else Staging(None, fits), _decode_fix(sku), nodes)
    if tier == "node-local":
        staging = (blob_staging(sku, nodes, location, data, node_price, "staged from Blob as shards")
                   if fits is None else Staging(None, fits))
        return DataPath("node-local", wanted, (local, decode), staging, _decode_fix(sku), nodes)
    source = nfs_source(nfs_kind, nfs_vm_size, nfs_disk_count, nfs_disk_size_gb, data)
    if data_local_cache:
        if source.img_per_sec is None or fits is not None:
            staging = Staging(None, fits or source.basis)
        else:  # every node rsyncs the whole set through the one server at once
            seconds = nodes * data.images / source.img_per_sec
            staging = _priced(seconds, f"{data.bytes / 1e9:.1f} GB x {_nodes(nodes)} copied from the NFS server, "
                                       f"{_n(source.img_per_sec)} files/s", nodes, node_price)
        return DataPath("nfs + dataLocalCache", wanted, (local, decode), staging, to_local, nodes)
    return DataPath("nfs", wanted, (source, node_network_stage(sku, nodes, data), decode),
                    Staging(0, "the NFS server stages `data` when it boots"), to_local, nodes)


def _fits(sku: GpuSku, data: Dataset) -> str | None:
    """Why the dataset cannot be staged onto the node's local disk, or None."""
    if sku.local_disk_gib is not None and data.bytes > sku.local_disk_gib * 2**30:
        return (f"{data.bytes / 1e9:.1f} GB does not fit {sku.name}'s {sku.local_disk_gib} GiB local disk: choose a "
                "larger gpuSku or dataTier nfs")
    return None


def _decode_fix(sku: GpuSku) -> str:
    """node-local: its stages are the node's own disk and decoders, which no stack key raises."""
    return ""


# --- from a stack's config ---------------------------------------------------------------------------------------

NO_BF16 = ("V100", "T4")  # GPUs without bf16 units (training/config.py: auto_precision)
# What `--loader auto` is on a GPU node: the PyTorch image installs DALI (training/requirements-torch.txt, which
# images/pytorch.Dockerfile installs), so auto is dali there whatever the machine running plan has installed.
NODE_AUTO_LOADER = "dali"


def _node_run(cfg):
    """The stack's trainingArgs resolved as a GPU node of its size resolves them (training/config.py)."""
    from dataclasses import replace

    from training.config import parse_args, resolve_for_device

    argv = ["--framework", cfg.training.framework, "--data", "x", "--output-dir", "x", *cfg.training.args]
    parsed = parse_args(argv)
    run = resolve_for_device(parsed, True, bf16=not any(g in cfg.nodes.sku.gpu_model for g in NO_BF16))
    if parsed.loader == "auto" and run.loader in ("dali", "nvjpeg"):  # the deployer's DALI decided it: the node's
        run = replace(run, loader=NODE_AUTO_LOADER)
    return run


def node_loader(cfg) -> str:
    """The loader the stack's ranks read with on its GPU nodes (pil: the host's cores, as tf.data does)."""
    return _node_run(cfg).loader


def expected_per_gpu(cfg) -> tuple[float | None, str]:
    """The size's expected img/s per GPU for the stack's own training recipe (training/efficiency.py), and its
    basis. The catalog's figure (skus.py benchmark_img_per_sec) was measured under one recipe; a stack whose
    trainingArgs resolve to another gets the figure as its ceiling, said so, rather than no need at all: the data
    path must feed the GPUs at the pace they can reach."""
    from training import efficiency

    sku = cfg.nodes.sku
    figure = sku.benchmark_img_per_sec
    if figure is None or cfg.training.framework != "pytorch":
        return None, f"no benchmark for {sku.name} with {cfg.training.framework} (skus.py benchmark_img_per_sec)"
    run = _node_run(cfg)
    recipe = efficiency.Recipe.of(run)
    if recipe in efficiency.MEASURED_RECIPES:
        return figure, f"the size's benchmark for this recipe ({recipe.text()})"
    measured = efficiency.nearest_measured(recipe)
    return figure, (f"the size's benchmark, measured as {measured.text()}; this stack's recipe ({recipe.text()}) is "
                    "not measured, so this is its ceiling")


def of_stack(cfg, data: Dataset = DATASET) -> DataPath:
    """The stack's data path at maxNodes."""
    per_gpu, basis = expected_per_gpu(cfg)
    return assess(sku=cfg.nodes.sku, nodes=cfg.nodes.max_nodes, location=cfg.location, backend=cfg.backend,
                  tier=cfg.nfs.data_tier, nfs_kind=cfg.nfs.kind, nfs_vm_size=cfg.nfs.vm_size,
                  nfs_disk_count=cfg.nfs.disk_count, nfs_disk_size_gb=cfg.nfs.disk_size_gb,
                  data_local_cache=cfg.nfs.data_local_cache, aml_data_mode=cfg.aml.data_mode, per_gpu=per_gpu,
                  need_basis=basis, node_price=cost.estimate(cfg).node_price, data=data, loader=node_loader(cfg))
