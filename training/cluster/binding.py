"""Each rank on the CPUs of its GPU's NUMA node, from the size's NCCL topology file.

On an 8-GPU node every rank feeds one GPU (local rank i drives GPU i), and its data loading, its Python and its host
copies belong on the CPUs next to that GPU's PCIe root: the topology file the HPC image ships for the size
(NCCL_TOPO_FILE: /opt/microsoft/ndv5-topo.xml on ND H100 v5, the image's copy in images/nccl-topology) puts every
GPU (PCI class 0x0302xx, "3D controller") under the `<cpu numaid=.. affinity=..>` of its NUMA node, the affinity a
Linux cpumask (32-bit hex words, most significant first: https://docs.kernel.org/core-api/printk-formats.html,
"bitmap"). GPU i is the i-th GPU by PCI bus id, the order CUDA numbers them in with CUDA_DEVICE_ORDER=PCI_BUS_ID
(https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#env-vars), which `launch` sets where it binds.
The order is not the NUMA order: on ND A100 v4 GPUs 0-1 are on NUMA node 1 and 2-3 on node 0, so a `--map-by
ppr:2:numa` placement would put rank 0 beside the wrong GPU; this binds by the file instead.

How: `launch` puts `python -m training.cluster.binding --cpus LIST/LIST/... --` before every rank's command (the same
under mpirun and Horovod's Gloo launcher); the rank's process takes its local rank from its launcher (Open MPI's
OMPI_COMM_WORLD_LOCAL_RANK, Horovod's HOROVOD_LOCAL_RANK), restricts itself to that rank's CPUs (sched_setaffinity,
inherited through exec) and execs the command. Memory follows by first touch (Linux's default policy allocates on
the node of the CPU that touches a page); no memory policy is set. CPUs this process may not use (a container's
cpuset) are left out; if none is left, the rank runs unbound and says so in one line.

Example (the dry run shows the binding):
  python -m training launch --hosts 10.0.0.4:8,10.0.0.5:8 --topology images/nccl-topology/ndv5-topo.xml --dry-run \\
      -- --epochs 90
"""
from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from dataclasses import dataclass

GPU_CLASS = "0x0302"  # PCI class "3D controller": the data-center GPUs of the ND sizes (0x0300, VGA, on others)
LOCAL_RANK_VARIABLES = ("OMPI_COMM_WORLD_LOCAL_RANK", "HOROVOD_LOCAL_RANK", "LOCAL_RANK")


@dataclass(frozen=True)
class Gpu:
    bus_id: str
    numa: int
    cpus: tuple[int, ...]


def cpus_of_mask(mask: str) -> tuple[int, ...]:
    """The CPUs of a Linux cpumask such as '00000000,0000ffff,ffffffff' (pure)."""
    value = int(mask.replace(",", ""), 16)
    return tuple(cpu for cpu in range(value.bit_length()) if value >> cpu & 1)


def cpu_list(cpus: tuple[int, ...] | list[int]) -> str:
    """CPUs as a Linux cpu list ('0-47,96'), the form taskset and /sys use (pure)."""
    ranges, start = [], None
    ordered = sorted(set(cpus))
    for i, cpu in enumerate(ordered):
        if start is None:
            start = cpu
        if i + 1 == len(ordered) or ordered[i + 1] != cpu + 1:
            ranges.append(str(start) if start == cpu else f"{start}-{cpu}")
            start = None
    return ",".join(ranges)


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """The inverse of cpu_list (pure); ValueError on anything else."""
    cpus = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    if not cpus:
        raise ValueError(f"{text!r} is not a cpu list")
    return tuple(cpus)


def gpus(topology_xml: str) -> list[Gpu]:
    """The GPUs of an NCCL topology file, in PCI bus id order (CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID), each with
    its NUMA node and that node's CPUs (pure)."""
    root = ElementTree.fromstring(topology_xml)
    found = []
    for cpu in root.iter("cpu"):
        cpus = cpus_of_mask(cpu.get("affinity", "0"))
        for pci in cpu.iter("pci"):
            if pci.get("class", "").startswith(GPU_CLASS):
                found.append(Gpu(pci.get("busid", "").lower(), int(cpu.get("numaid", "-1")), cpus))
    return sorted(found, key=lambda gpu: gpu.bus_id)


def plan(topology_xml: str, slots: int) -> list[Gpu]:
    """The GPU of each local rank 0..slots-1 (pure); ValueError when the file has fewer GPUs than slots."""
    found = gpus(topology_xml)
    if len(found) < slots:
        raise ValueError(f"the topology file has {len(found)} GPU(s) for {slots} rank(s) per node")
    return found[:slots]


def describe(ranks: list[Gpu]) -> str:
    """'local rank 0-3 -> NUMA 0 (CPUs 0-47), 4-7 -> NUMA 1 (CPUs 48-95)': runs of ranks on one node (pure)."""
    runs: list[list] = []
    for rank, gpu in enumerate(ranks):
        if runs and runs[-1][1] == rank - 1 and runs[-1][2] == gpu.numa:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank, gpu.numa, gpu.cpus])
    parts = [f"{first if first == last else f'{first}-{last}'} -> NUMA {numa} (CPUs {cpu_list(cpus)})"
             for first, last, numa, cpus in runs]
    return "local rank " + ", ".join(parts)


def wrapper(ranks: list[Gpu], python: str) -> list[str]:
    """The words `launch` puts before each rank's command (pure): this module with every local rank's CPUs."""
    return [python, "-m", "training.cluster.binding", "--cpus", "/".join(cpu_list(gpu.cpus) for gpu in ranks), "--"]


def local_rank(env: Mapping[str, str]) -> int:
    for name in LOCAL_RANK_VARIABLES:
        if env.get(name, "").isdigit():
            return int(env[name])
    raise ValueError(f"no local rank from the launcher ({', '.join(LOCAL_RANK_VARIABLES)})")


def chosen(per_rank: list[tuple[int, ...]], rank: int, allowed: set[int]) -> tuple[int, ...]:
    """The CPUs local rank `rank` runs on: its list, without those this process may not use (pure)."""
    if rank >= len(per_rank):
        raise ValueError(f"local rank {rank}, but CPUs are given for {len(per_rank)} rank(s)")
    return tuple(cpu for cpu in per_rank[rank] if cpu in allowed)


def main(argv: list[str]) -> int:
    """`python -m training.cluster.binding --cpus L0/L1/... -- COMMAND...`: bind, then exec COMMAND."""
    if len(argv) < 4 or argv[0] != "--cpus" or argv[2] != "--":
        print("usage: python -m training.cluster.binding --cpus CPULIST/CPULIST/... -- COMMAND ...", file=sys.stderr)
        return 2
    try:
        per_rank = [parse_cpu_list(part) for part in argv[1].split("/")]
        rank = local_rank(os.environ)
        cpus = chosen(per_rank, rank, os.sched_getaffinity(0))
    except ValueError as err:
        print(f"binding: {err}; the rank runs unbound", file=sys.stderr, flush=True)
        cpus = ()
        rank = -1
    if cpus:
        os.sched_setaffinity(0, cpus)
    elif rank >= 0:
        print(f"binding: local rank {rank}: none of CPUs {cpu_list(per_rank[rank])} is allowed here "
              f"({cpu_list(sorted(os.sched_getaffinity(0)))}); the rank runs unbound", file=sys.stderr, flush=True)
    command = argv[3:]
    os.execvp(command[0], command)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
