"""`python -m devtools shard-loader`: the CPU loader (`--loader pil`) from shards beside the same images as files.

Writes N JPEGs at ImageNet's sizes and aspect ratios (devtools/benchmark.py `jpeg_dataset`), shards them with
training/data/shards.py (`write_shards`, ~128 MB shards by default), then, in one run and on one machine, measures
- reading alone: each image's bytes in a training epoch's order (a seeded permutation), from its file
  (`open().read()`) and from its shard (training/data/shard_samples.py: one pread at the index's offset);
- the PIL loader end to end (read, decode, random-resized crop, flip, normalise, batch: training/pytorch/data.py
  with `--workers` processes, no model), from the folder and from the shards, each in its own process, in
  rounds that alternate which goes first (the machine's other load lands on both).
Each line gives img/s (wall) and img per CPU-second (the process and its loader workers: per core, what a node's
cores multiply), and the shard/file ratio. Not a test: figures go to docs/data.md ("Reading shards") with the
machine and the date.
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from devtools.benchmark import jpeg_dataset, read_ahead

CHILD = """
import sys, time
from pathlib import Path
from devtools.shard_loader_benchmark import pil_rate
print(pil_rate(Path(sys.argv[1]), *map(int, sys.argv[2:])))
"""


def pil_rate(data: Path, image_size: int, batch_size: int, workers: int, batches: int) -> float:
    """Images per second the PIL loader delivers from `data` (a folder or a sharded dataset), no model behind it."""
    import torch

    from training.config import TrainConfig, resolve_for_device
    from training.pytorch.data import FolderData

    cfg = resolve_for_device(TrainConfig(data=str(data), image_size=image_size, batch_size=batch_size,
                                         workers=workers, loader="pil"), gpu=False)
    stream = FolderData(data, cfg, rank=0, size=1, device=torch.device("cpu")).epoch_batches(0, 0)
    for _ in range(read_ahead(workers)):  # start-up and the batches read ahead meanwhile are not throughput
        next(stream)
    started, done = time.perf_counter(), 0
    for _ in stream:
        done += 1
        if done == batches:
            break
    return done * batch_size / (time.perf_counter() - started)


def measured(data: Path, image_size: int, batch_size: int, workers: int, batches: int) -> tuple[float, float]:
    """(img/s, images per CPU-second) of one loader run in its own process (its CPU: it and its workers)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run([sys.executable, "-c", CHILD, str(data), str(image_size), str(batch_size), str(workers),
                             str(batches)], capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"error: the PIL loader on {data} failed:\n{result.stderr[-2000:]}")
    rate = float(result.stdout.strip().splitlines()[-1])
    images = (batches + read_ahead(workers)) * batch_size  # the CPU covers the read-ahead batches too
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return rate, images / cpu


def read_rates(files: Path, sharded: Path, seed: int) -> list[tuple[float, float, float]]:
    """[(img/s, MB/s, images per CPU-second) from files, the same from shards]: every image's bytes once, in a
    seeded random order, after one untimed pass (both from the page cache, as a node's second epoch is)."""
    from training.data.folder import scan
    from training.data.shard_samples import ShardSamples

    _, paths = scan(files, "train")
    samples = ShardSamples(sharded, "train")
    results = []
    readers = ((len(paths), lambda i: Path(paths[i][0]).read_bytes()), (len(samples), lambda i: samples.read(i)[0]))
    for count, read in readers:
        order = list(range(count))
        random.Random(seed).shuffle(order)
        for i in order:  # warm the page cache
            read(i)
        started, cpu, size = time.perf_counter(), time.process_time(), 0
        for i in order:
            size += len(read(i))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        results.append((count / elapsed, size / elapsed / 1e6, count / cpu))
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools shard-loader", description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=4000, help="JPEGs at ImageNet's sizes (default 4000)")
    parser.add_argument("--image-size", type=int, default=224, help="training crop (default 224)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="PIL loader processes (default: the machine's cores)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds of files and shards, each first in turn (default 2)")
    parser.add_argument("--shard-mb", type=float, default=128.0, help="shard size in MB (default 128)")
    parser.add_argument("--dir", help="keep the datasets here (default: a temporary folder)")
    args = parser.parse_args(argv)
    from training.data import shards

    with tempfile.TemporaryDirectory(prefix="shard-loader-") as scratch:
        root = Path(args.dir or scratch)
        files, sharded = root / "files", root / "sharded"
        if not (files / "train").is_dir():
            jpeg_dataset(args.images, files, jobs=os.cpu_count() or 1)
        if not shards.is_sharded(sharded):
            started = time.perf_counter()
            written = shards.write_shards(files, sharded, shard_bytes=int(args.shard_mb * 1e6))
            print(f"shard-loader: {written.images()['train']} images in {len(written.shards['train'])} shards of "
                  f"~{args.shard_mb:g} MB, written in {time.perf_counter() - started:.1f} s", flush=True)
        count = shards.read_sharded(sharded).images()["train"]
        batches = max(1, count // args.batch_size - read_ahead(args.workers) - 1)  # within the first epoch
        (file_read, file_mb, file_cpu), (shard_read, shard_mb, shard_cpu) = read_rates(files, sharded, seed=0)
        runs: dict[str, list[tuple[float, float]]] = {"files": [], "shards": []}
        for number in range(args.rounds):
            pair = (("files", files), ("shards", sharded))
            for name, data in pair if number % 2 == 0 else pair[::-1]:  # each goes first in turn
                print(f"shard-loader: round {number + 1}/{args.rounds}, PIL loader from {name} ...", flush=True)
                runs[name].append(measured(data, args.image_size, args.batch_size, args.workers, batches))
    mean = {name: (sum(r for r, _ in found) / len(found), sum(c for _, c in found) / len(found))
            for name, found in runs.items()}
    print(f"\nshard-loader: {count} JPEGs at ImageNet sizes, {args.image_size} px crops, batch {args.batch_size}, "
          f"{args.workers} PIL worker(s), {os.cpu_count()} cores, mean of {args.rounds} round(s)")
    print(f"  {'':<34} {'files':>12} {'shards':>12} {'shards/files':>13}")
    print(f"  {'read only, img/s (page cache)':<34} {file_read:>12.0f} {shard_read:>12.0f} "
          f"{shard_read / file_read:>12.2f}x")
    print(f"  {'read only, MB/s':<34} {file_mb:>12.0f} {shard_mb:>12.0f} {shard_mb / file_mb:>12.2f}x")
    print(f"  {'read only, img per CPU-second':<34} {file_cpu:>12.0f} {shard_cpu:>12.0f} "
          f"{shard_cpu / file_cpu:>12.2f}x")
    print(f"  {'PIL loader, img/s':<34} {mean['files'][0]:>12.1f} {mean['shards'][0]:>12.1f} "
          f"{mean['shards'][0] / mean['files'][0]:>12.2f}x")
    print(f"  {'PIL loader, img per CPU-second':<34} {mean['files'][1]:>12.1f} {mean['shards'][1]:>12.1f} "
          f"{mean['shards'][1] / mean['files'][1]:>12.2f}x")
    return 0
