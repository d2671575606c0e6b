"""Does a compiled model still overlap its gradient exchange with backward? Wall per step on CPU, side by side, with
the all-reduce slowed on purpose (a link of --link-mbps), so that what overlapping hides shows in the step time.

  python -m devtools overlap-benchmark            (.venv-torch; ~1-2 minutes on 2 cores)

Six runs, each a world of --ranks Gloo processes (1 by default: on a shared 2-core machine a second process's
compute and Gloo's copies make the figures noisy, and one rank's all-reduce still goes through torch.distributed)
training the same MLP, the exchange going through one slow link per process (a background thread: sleep bytes /
link rate, then the real all-reduce), as NCCL's stream or Horovod's background thread runs it beside backward:
  no exchange       compute alone, eager and compiled: what the exchange adds is measured against these
  hooks, eager      Horovod's mechanism: a hook on each parameter's gradient accumulation hands the gradient to the
                    exchange as soon as backward made it; the optimizer step waits for all of them
  hooks, compiled   the same model under torch.compile
  ddp, eager        DistributedDataParallel, its buckets through the same link (a comm hook)
  ddp, compiled     DDP under torch.compile: Dynamo's DDPOptimizer splits the graph at DDP's bucket boundaries
                    (torch/_dynamo/backends/distributed.py, "Note [DDPOptimizer]")
PyTorch's compiler FAQ (https://docs.pytorch.org/docs/stable/torch.compiler_faq.html#do-you-support-distributed-code)
says why the second loses the overlap: AOTAutograd turns the backward into one compiled op, so "hooks that should run
directly after an operation during backwards may be delayed until after the entire compiled region of backwards
ops". The compiler here is "aot_eager" (AOTAutograd without Inductor's code generation): where the hooks fire is
AOTAutograd's doing, and it compiles in seconds on a CPU.
"""
from __future__ import annotations

import argparse
import os
import queue
import socket
import statistics
import threading
import time

RUNS = (("none", False), ("none", True), ("hooks", False), ("hooks", True), ("ddp", False), ("ddp", True))
LABELS = {"none": "no exchange", "hooks": "hooks", "ddp": "ddp"}


class SlowLink:
    """One process's exchange: all-reduces run one after another on a background thread, each first taking
    bytes / rate seconds (the deliberately slow link), then the real Gloo all-reduce. submit() returns at once."""

    def __init__(self, bytes_per_second: float):
        import torch.distributed as dist

        self.dist, self.rate, self.jobs = dist, bytes_per_second, queue.Queue()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            tensor, done = self.jobs.get()
            time.sleep(tensor.numel() * tensor.element_size() / self.rate)
            self.dist.all_reduce(tensor)
            tensor.div_(self.dist.get_world_size())
            done(tensor)

    def submit(self, tensor, done) -> None:
        self.jobs.put((tensor, done))


def _model(width: int, depth: int):
    import torch

    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))


def _hooked(model, link: SlowLink):
    """Horovod's way (horovod/torch/optimizer.py registers a hook on each parameter's gradient accumulator): each
    gradient goes to the exchange when it is accumulated; wait() is the optimizer's synchronize()."""
    pending = []

    def hook(param):
        event = threading.Event()
        link.submit(param.grad, lambda _: event.set())
        pending.append(event)

    for param in model.parameters():
        param.register_post_accumulate_grad_hook(hook)

    def wait():
        for event in pending:
            event.wait()
        pending.clear()
    return model, wait


def _ddp(model, link: SlowLink, bucket_mb: float):
    import torch
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_mb)

    def slow_bucket(_, bucket):
        future = torch.futures.Future()
        link.submit(bucket.buffer(), future.set_result)
        return future

    ddp.register_comm_hook(None, slow_bucket)
    return ddp, lambda: None  # DDP's reducer waits for its buckets at the end of backward


def _worker(rank: int, port: int, args, results) -> None:
    """Every run's model side by side in one process, stepped in turns (a few steps of each, round after round), so
    that the machine's load, which other work on a shared machine changes by the minute, weighs on all runs alike."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # one core a process: the figures compare, they do not race the machine
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    link = SlowLink(args.link_mbps * 1e6 / 8)
    generator = torch.Generator().manual_seed(rank)
    images = torch.randn(args.batch, args.width, generator=generator)
    labels = torch.randint(0, 10, (args.batch,), generator=generator)
    runs = {}
    for kind, compiled in RUNS:
        model = _model(args.width, args.depth)
        if kind == "none":  # compute alone: what a step costs when nothing is exchanged
            wait = lambda: None  # noqa: E731
        else:
            model, wait = _hooked(model, link) if kind == "hooks" else _ddp(model, link, args.bucket_mb)
        step_model = torch.compile(model, backend="aot_eager") if compiled else model
        runs[kind, compiled] = (step_model, wait, torch.optim.SGD(model.parameters(), lr=0.01), [])

    def step(step_model, wait, optimizer) -> float:
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(step_model(images), labels).backward()
        wait()
        optimizer.step()
        return time.perf_counter() - start

    for step_model, wait, optimizer, _ in runs.values():
        for _ in range(args.warmup):  # compilation, DDP's bucket rebuild
            step(step_model, wait, optimizer)
    for _ in range(args.rounds):
        for step_model, wait, optimizer, walls in runs.values():
            walls.extend(step(step_model, wait, optimizer) for _ in range(args.steps))
    if rank == 0:
        results.put({key: statistics.median(run[3]) for key, run in runs.items()})
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run(args) -> dict[tuple[str, bool], float]:
    """Median seconds per step of every run (RUNS), on rank 0."""
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    results = context.Queue()
    mp.start_processes(_worker, args=(_free_port(), args, results), nprocs=args.ranks, join=True,
                       start_method="spawn")
    return results.get()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools overlap-benchmark", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, default=1024, help="the MLP's width")
    parser.add_argument("--depth", type=int, default=4, help="its hidden layers (one gradient each, and a bias)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--ranks", type=int, default=1, help="Gloo processes (world size)")
    parser.add_argument("--steps", type=int, default=4, help="steps of one run in each round")
    parser.add_argument("--rounds", type=int, default=8, help="rounds: every run's steps in turn (medians printed)")
    parser.add_argument("--warmup", type=int, default=3, help="steps left out first (compilation)")
    parser.add_argument("--link-mbps", type=float, default=1000.0, help="the slowed link's rate, Mbit/s")
    parser.add_argument("--bucket-mb", type=float, default=4.0, help="DDP's bucket size (several buckets a step)")
    args = parser.parse_args(argv)
    params = args.depth * (args.width * args.width + args.width) + args.width * 10 + 10
    link_ms = params * 4 / (args.link_mbps * 1e6 / 8) * 1e3
    print(f"MLP {args.depth} x {args.width}, batch {args.batch}, {params * 4 / 2**20:.0f} MiB of fp32 gradients a "
          f"step; link {args.link_mbps:g} Mbit/s: {link_ms:.0f} ms of exchange a step; world of {args.ranks} Gloo "
          f"process(es), median of {args.rounds} rounds x {args.steps} steps of each run, in turns", flush=True)
    walls = {key: seconds * 1e3 for key, seconds in run(args).items()}
    for kind, compiled in RUNS:
        added = walls[kind, compiled] - walls["none", compiled]
        print(f"  {LABELS[kind]:11} {'compiled' if compiled else 'eager':8}  {walls[kind, compiled]:7.1f} ms/step"
              + (f"  exchange adds {added:6.1f} ms ({added / link_ms:.0%} of the link's {link_ms:.0f})"
                 if kind != "none" else ""), flush=True)
    hooks, ddp = (walls[kind, True] for kind in ("hooks", "ddp"))
    print(f"compiled: hooks (Horovod's way) {hooks:.1f} ms/step, ddp {ddp:.1f} ms/step: ddp takes {hooks - ddp:.1f} ms "
          f"less a step ({hooks / ddp:.2f}x)")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
