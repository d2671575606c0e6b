"""The interconnect check: all-reduce bus bandwidth over the job's real process group, before training, on every
multi-node run. The job runs it inside `train` (`--interconnect-check`), in the training processes themselves, right
after they bind to their GPUs and join their group: Azure ML's MPI distribution wraps the job's whole command in one
mpirun, and a second MPI program in the same rank is refused ("MPI_Init() cannot be invoked twice by the same MPI
rank (even if done via two distinct processes)": open-mpi/ompi issues 7025 and 10940), so the check cannot be a
program of its own there; Batch's job runs it the same way (one launch, one way). `python -m training
interconnect-check` runs the same measurement as a program of its own, for a person at a node.

It measures the path the gradients will take (NCCL on GPUs, Gloo on CPU in the rehearsal). Bus bandwidth is
nccl-tests' figure: algbw = bytes / time, busbw = algbw * 2(n-1)/n for an all-reduce over n ranks, which makes it
comparable across rank counts and with the hardware's link speed
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md, "AllReduce").

With a floor (the job builder passes the node size's figure from infra/core/skus.py; sizes without InfiniBand and
the rehearsal pass none) a figure below it stops the job in one line before training, unless
--allow-slow-interconnect. Rank 0 writes the figure (JSON) so the run's summary.json carries it.

Examples:
  horovodrun -np 2 -H localhost:2 python -m training interconnect-check --output /tmp/run/interconnect.json
  torchrun --standalone --nproc-per-node 2 -m training interconnect-check --dist ddp --floor-gbps 400
  horovodrun -np 16 -H 10.0.0.4:8,10.0.0.5:8 python -m training train --interconnect-check \\
      --interconnect-floor-gbps 400 ...   # what a job runs
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from training.cluster.launch import dist_of, set_horovod_cycle
from training.errors import UsageError

LIKELY_CAUSES = ("NCCL_IB_DISABLE set (NCCL on TCP instead of InfiniBand), a wrong NCCL_SOCKET_IFNAME or "
                 "interface, or a missing NCCL topology file (NCCL_TOPO_FILE)")
ALLOW_SLOW = "--allow-slow-interconnect"
CHECK, FLOOR = "--interconnect-check", "--interconnect-floor-gbps"  # train's flags for the in-run check
# Defaults: nccl-tests' large-message range, where busbw levels off, on GPUs; seconds, not minutes, on CPU (Gloo in
# the rehearsal).
SIZE_MB = {True: 256.0, False: 4.0}
ITERS = {True: 20, False: 3}


def job_train_args(train_args: list[str], *, nodes: int, floor_gbps: float | None) -> list[str]:
    """For a job builder (pure): train's flags with the in-run check asked for where it runs: multi-node runs only
    (one node's all-reduce never leaves it), Horovod and DDP ones (--dist native's TensorFlow collectives are not
    measured yet), with the size's floor where it has one. --allow-slow-interconnect stays a train flag."""
    if nodes < 2 or dist_of(train_args) == "native" or CHECK in train_args:
        return list(train_args)
    return [*train_args, CHECK, *([FLOOR, f"{floor_gbps:g}"] if floor_gbps is not None else [])]


def bus_bandwidth_gbps(nbytes: int, seconds: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth in GB/s (1e9 bytes/s): algbw * 2(n-1)/n."""
    if seconds <= 0 or ranks < 1:
        raise ValueError("seconds must be > 0 and ranks >= 1")
    return nbytes / seconds / 1e9 * 2 * (ranks - 1) / ranks


def infiniband_ceiling_gbps(rails: int, rail_gbit_s: float) -> float:
    """The all-reduce bus bandwidth a node's InfiniBand can carry across nodes (pure), GB/s: NCCL runs one ring
    channel per NIC, each carrying its share of every message, and nccl-tests' busbw is the rate of one ring's link
    times the channels (PERFORMANCE.md above), so the ceiling is the node's rails x their rate: ND H100 v5 and H200 v5,
    8 x 400 Gb/s NDR (https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/nd-h100-v5-series):
    400 GB/s."""
    return rails * rail_gbit_s / 8


def infiniband_floor_gbps(rails: int, rail_gbit_s: float, share: float = 0.25) -> float:
    """A floor for one InfiniBand size (pure), from its ceiling. The channels run side by side and a message is done
    when its slowest channel is, so one rail at a quarter of its rate (or a NIC dropped to a lower link width) pulls
    the whole all-reduce to about a quarter of the ceiling, and NCCL on TCP reaches 10 GB/s at most on these sizes.
    A quarter: 100 GB/s on 8 x NDR. NOT YET IN THE CATALOG (infra/core/skus.py keeps 20 GB/s, the TCP fallback's
    ceiling x 2): what this check reaches on healthy nodes (torch's or Horovod's all-reduce of 256 MB over 16 ranks,
    not nccl-tests) has not been measured, and a floor above it would stop every healthy job; calibrate with
    `python -m training interconnect-check` on two healthy nodes first (docs/training.md)."""
    return infiniband_ceiling_gbps(rails, rail_gbit_s) * share


def verdict(figure: float, floor: float | None, allow_slow: bool) -> str | None:
    """The line that stops the job, or None (no floor, at or above it, or allowed). Pure."""
    if floor is None or figure >= floor or allow_slow:
        return None
    return (f"interconnect-check: all-reduce bus bandwidth {figure:.1f} GB/s is below this size's floor "
            f"{floor:.1f} GB/s; likely causes: {LIKELY_CAUSES}; --allow-slow-interconnect trains anyway")


def torch_allreduce_seconds(torch, group, device, count: int, iters: int) -> float:
    """Mean seconds of an all-reduce of `count` float32s over a PyTorch group (training.pytorch.distributed's
    Horovod or Ddp), after one untimed warm-up (connections, NCCL's rings); every rank gets the same figure, so the
    same verdict."""
    buffer = torch.ones(count, dtype=torch.float32, device=device)
    timed = 0.0
    for i in range(iters + 1):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        if group.name == "horovod":
            group.hvd.allreduce_(buffer, op=group.hvd.Sum, name="interconnect_check")
        else:
            group.dist.all_reduce(buffer)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i:
            timed += time.perf_counter() - start
    return group.mean(timed / iters)


def tf_allreduce_seconds(tf, hvd, count: int, iters: int) -> float:
    """As torch_allreduce_seconds, over Horovod's TensorFlow ranks. Each all-reduce is waited for by reading one
    element of its result back (not the whole buffer: copying 256 MB to the host each time would be timed too)."""
    buffer = tf.ones([count], dtype=tf.float32)
    timed = 0.0
    for i in range(iters + 1):
        start = time.perf_counter()
        reduced = hvd.allreduce(buffer, op=hvd.Sum, name="interconnect_check")
        reduced[:1].numpy()  # waits for the all-reduce
        if i:
            timed += time.perf_counter() - start
    return float(hvd.allreduce(tf.constant(timed / iters), op=hvd.Average, name="interconnect_time"))


def measure(seconds_of: Callable[[int, int], float], *, rank: int, size: int, gpu: bool, size_mb: float | None = None,
            iters: int | None = None, floor_gbps: float | None = None, allow_slow: bool = False,
            output: Path | None = None) -> str | None:
    """Run the check with `seconds_of(count, iters)` (an all-reduce timer of the run's group); rank 0 prints the
    figure and writes `output`. Returns the line that stops the job (rank 0 prints it), or None."""
    count = max(1, int((size_mb or SIZE_MB[gpu]) * 1e6) // 4)
    figure = bus_bandwidth_gbps(count * 4, seconds_of(count, iters or ITERS[gpu]), size)
    stop = verdict(figure, floor_gbps, allow_slow)
    if rank == 0:
        floor = f", floor {floor_gbps:.1f} GB/s" if floor_gbps is not None else ", no floor for this size"
        print(f"interconnect-check: all-reduce bus bandwidth {figure:.2f} GB/s over {size} ranks "
              f"({count * 4 / 1e6:.0f} MB){floor}", flush=True)
        if floor_gbps is not None and figure < floor_gbps and allow_slow:
            print(f"warning: below the floor ({LIKELY_CAUSES}); --allow-slow-interconnect: training anyway",
                  file=sys.stderr, flush=True)
        if output:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(json.dumps({"interconnect_busbw_gbps": round(figure, 3), "interconnect_ranks": size,
                                          "interconnect_bytes": count * 4, "interconnect_floor_gbps": floor_gbps})
                              + "\n")
        if stop:  # one line for the job, not one per rank
            print(stop, file=sys.stderr, flush=True)
    return stop


def _torch_timer(dist: str):
    """(rank, size, timer, shutdown, gpu) of a PyTorch group, bound as training binds (distributed.init)."""
    import torch

    from training.pytorch import distributed

    group = distributed.init(dist)
    return (group.rank, group.size,
            lambda count, iters: torch_allreduce_seconds(torch, group, group.device, count, iters),
            group.shutdown, group.device.type == "cuda")


def _tf_timer(dist: str):
    """As _torch_timer, for Horovod's TensorFlow ranks, bound as training binds (training.tensorflow.device)."""
    if dist != "horovod":
        raise UsageError(f"interconnect-check: --dist {dist} with TensorFlow is not measured yet; use horovod")
    import horovod.tensorflow as hvd
    import tensorflow as tf

    from training.tensorflow.device import bind_gpu

    set_horovod_cycle(gpu=bool(tf.config.list_physical_devices("GPU")))  # the cycle training runs with
    hvd.init()
    gpu = bind_gpu(tf, hvd.local_rank(), hvd.local_size())  # before the first collective, as training does
    return (hvd.rank(), hvd.size(), lambda count, iters: tf_allreduce_seconds(tf, hvd, count, iters),
            hvd.shutdown, gpu)


def main(argv: list[str]) -> int:
    from training import frameworks

    parser = argparse.ArgumentParser(prog="python -m training interconnect-check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", default=frameworks.names()[0], choices=frameworks.names())
    parser.add_argument("--dist", default="horovod", help="horovod or ddp, as train's --dist (default: horovod)")
    parser.add_argument("--size-mb", type=float, default=None,
                        help=f"all-reduce buffer in MB (default: {SIZE_MB[True]:g} on GPUs, nccl-tests' "
                             f"large-message range where busbw levels off; {SIZE_MB[False]:g} on CPU)")
    parser.add_argument("--iters", type=int, default=None,
                        help=f"timed all-reduces after one warm-up (default: {ITERS[True]} on GPUs, "
                             f"{ITERS[False]} on CPU)")
    parser.add_argument("--floor-gbps", type=float, default=None,
                        help="the node size's expected bus bandwidth; none: print the figure, no verdict")
    parser.add_argument(ALLOW_SLOW, action="store_true", help="below the floor, warn and go on")
    parser.add_argument("--output", type=Path, default=None, help="rank 0 writes the figure here (JSON)")
    args = parser.parse_args(argv)
    if (args.size_mb is not None and args.size_mb <= 0) or (args.iters is not None and args.iters < 1):
        raise UsageError("interconnect-check: --size-mb must be > 0 and --iters >= 1")
    framework = frameworks.get(args.framework)
    timer = _torch_timer if framework.image.package == "torch" else _tf_timer
    rank, size, seconds_of, shutdown, gpu = timer(args.dist)
    stop = measure(seconds_of, rank=rank, size=size, gpu=gpu, size_mb=args.size_mb, iters=args.iters,
                   floor_gbps=args.floor_gbps, allow_slow=args.allow_slow_interconnect, output=args.output)
    shutdown()
    return 1 if stop else 0
