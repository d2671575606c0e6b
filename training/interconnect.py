"""`python -m training interconnect-check`: all-reduce bus bandwidth over the job's real process group, before
training, on every multi-node run. It runs under the same launcher as `train` (horovodrun/mpirun for Horovod,
torchrun or Azure ML's per-process launch for DDP) with the framework's own binding, so it measures the path the
gradients will take (NCCL on GPUs, Gloo on CPU in the rehearsal).

Bus bandwidth is nccl-tests' figure: algbw = bytes / time, busbw = algbw * 2(n-1)/n for an all-reduce over n
ranks, which makes it comparable across rank counts and with the hardware's link speed
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md, "AllReduce").

With --floor-gbps (the job builder passes the node size's figure from infra/core/skus.py; sizes without
InfiniBand and the rehearsal pass none) a figure below the floor stops the job in one line before training,
unless --allow-slow-interconnect. Rank 0 writes --output (JSON) so the run's summary.json carries the figure.

Examples:
  horovodrun -np 2 -H localhost:2 python -m training interconnect-check --output /tmp/run/interconnect.json
  torchrun --standalone --nproc-per-node 2 -m training interconnect-check --dist ddp --floor-gbps 400
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from training.cluster.launch import set_horovod_cycle
from training.errors import UsageError

LIKELY_CAUSES = ("NCCL_IB_DISABLE set (NCCL on TCP instead of InfiniBand), a wrong NCCL_SOCKET_IFNAME or "
                 "interface, or a missing NCCL topology file (NCCL_TOPO_FILE)")


ALLOW_SLOW = "--allow-slow-interconnect"  # a job flag (submit's training arguments): it reaches the check, not train


def job_check(train_args: list[str], *, nodes: int, framework: str, floor_gbps: float | None,
              output: str) -> tuple[list[str] | None, list[str]]:
    """For a job builder (pure): (the check's flags, or None where no check runs; train's flags without
    --allow-slow-interconnect). Only multi-node runs are checked (one node's all-reduce never leaves it), and
    only Horovod and DDP ones (--dist native's TensorFlow collectives are not measured yet)."""
    from training.cluster.launch import dist_of

    train = [a for a in train_args if a != ALLOW_SLOW]
    dist = dist_of(train)
    if nodes < 2 or dist == "native":
        return None, train
    flags = ["--framework", framework, "--dist", dist, "--output", output]
    if floor_gbps is not None:
        flags += ["--floor-gbps", f"{floor_gbps:g}"]
    if ALLOW_SLOW in train_args:
        flags.append(ALLOW_SLOW)
    return flags, train


def bus_bandwidth_gbps(nbytes: int, seconds: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth in GB/s (1e9 bytes/s): algbw * 2(n-1)/n."""
    if seconds <= 0 or ranks < 1:
        raise ValueError("seconds must be > 0 and ranks >= 1")
    return nbytes / seconds / 1e9 * 2 * (ranks - 1) / ranks


def verdict(figure: float, floor: float | None, allow_slow: bool) -> str | None:
    """The line that stops the job, or None (no floor, at or above it, or allowed). Pure."""
    if floor is None or figure >= floor or allow_slow:
        return None
    return (f"interconnect-check: all-reduce bus bandwidth {figure:.1f} GB/s is below this size's floor "
            f"{floor:.1f} GB/s; likely causes: {LIKELY_CAUSES}; --allow-slow-interconnect trains anyway")


def _torch_group(dist: str):
    """(rank, size, all-reduce of a float32 buffer of `count` elements, shutdown) with PyTorch's binding."""
    import torch

    from training.pytorch import distributed

    group = distributed.init(dist)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.cuda.set_device(group.local_rank)

    def run(count: int, iters: int) -> float:
        buffer = torch.ones(count, dtype=torch.float32, device=device)
        timed = 0.0
        for i in range(iters + 1):  # the first one warms up (connections, NCCL's rings): not timed
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            if group.name == "horovod":
                group.hvd.allreduce_(buffer, op=group.hvd.Sum, name="interconnect_check")
            else:
                group.dist.all_reduce(buffer)
            if device == "cuda":
                torch.cuda.synchronize()
            if i:
                timed += time.perf_counter() - start
        return group.mean(timed / iters)  # every rank takes the same figure, so the same verdict

    return group.rank, group.size, run, group.shutdown, device == "cuda"


def _tf_group(dist: str):
    if dist != "horovod":
        raise UsageError(f"interconnect-check: --dist {dist} with TensorFlow is not measured yet; use horovod")
    import horovod.tensorflow as hvd
    import tensorflow as tf

    set_horovod_cycle(gpu=bool(tf.config.list_physical_devices("GPU")))  # the cycle training runs with, as in PyTorch's
    hvd.init()

    def run(count: int, iters: int) -> float:
        buffer = tf.ones([count], dtype=tf.float32)
        timed = 0.0
        for i in range(iters + 1):
            start = time.perf_counter()
            hvd.allreduce(buffer, op=hvd.Sum, name="interconnect_check").numpy()  # .numpy() waits for it
            if i:
                timed += time.perf_counter() - start
        return float(hvd.allreduce(tf.constant(timed / iters), op=hvd.Average, name="interconnect_time"))

    return hvd.rank(), hvd.size(), run, hvd.shutdown, bool(tf.config.list_physical_devices("GPU"))


def main(argv: list[str]) -> int:
    from training import frameworks

    parser = argparse.ArgumentParser(prog="python -m training interconnect-check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", default=frameworks.names()[0], choices=frameworks.names())
    parser.add_argument("--dist", default="horovod", help="horovod or ddp, as train's --dist (default: horovod)")
    parser.add_argument("--size-mb", type=float, default=None,
                        help="all-reduce buffer in MB (default: 256 on GPUs, nccl-tests' large-message range where "
                             "busbw levels off; 4 on CPU, Gloo in the rehearsal: seconds, not minutes)")
    parser.add_argument("--iters", type=int, default=None,
                        help="timed all-reduces after one warm-up (default: 20 on GPUs, 3 on CPU)")
    parser.add_argument("--floor-gbps", type=float, default=None,
                        help="the node size's expected bus bandwidth; none: print the figure, no verdict")
    parser.add_argument("--allow-slow-interconnect", action="store_true", help="below the floor, warn and go on")
    parser.add_argument("--output", type=Path, default=None, help="rank 0 writes the figure here (JSON)")
    args = parser.parse_args(argv)
    if (args.size_mb is not None and args.size_mb <= 0) or (args.iters is not None and args.iters < 1):
        raise UsageError("interconnect-check: --size-mb must be > 0 and --iters >= 1")
    framework = frameworks.get(args.framework)
    group = _torch_group if framework.image.package == "torch" else _tf_group
    rank, size, run, shutdown, gpu = group(args.dist)
    count = max(1, int((args.size_mb or (256.0 if gpu else 4.0)) * 1e6) // 4)
    seconds = run(count, args.iters or (20 if gpu else 3))
    shutdown()
    figure = bus_bandwidth_gbps(count * 4, seconds, size)
    record = {"interconnect_busbw_gbps": round(figure, 3), "interconnect_ranks": size,
              "interconnect_bytes": count * 4, "interconnect_floor_gbps": args.floor_gbps}
    stop = verdict(figure, args.floor_gbps, args.allow_slow_interconnect)
    if rank == 0:
        floor = f", floor {args.floor_gbps:.1f} GB/s" if args.floor_gbps is not None else ", no floor for this size"
        print(f"interconnect-check: all-reduce bus bandwidth {figure:.2f} GB/s over {size} ranks "
              f"({count * 4 / 1e6:.0f} MB){floor}", flush=True)
        if args.floor_gbps is not None and figure < args.floor_gbps and args.allow_slow_interconnect:
            print(f"warning: below the floor ({LIKELY_CAUSES}); --allow-slow-interconnect: training anyway",
                  file=sys.stderr, flush=True)
        if args.output:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(json.dumps(record) + "\n")
    if stop:
        if rank == 0:  # one line for the job, not one per rank
            print(stop, file=sys.stderr, flush=True)
        return 1
    return 0
