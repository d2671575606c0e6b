"""`python -m devtools stage-benchmark`: staging throughput from Azurite, our stager next to a naive loop.

Uploads N ImageNet-sized files (~110 KB, random bytes) to a fresh Azurite, then, in one run, stages them
with `python -m training stage` and with a naive sequential azure-storage-blob loop (list, download_blob,
readall, write), each in its own process so peak memory (max RSS) is measured per process. Prints files/s,
MB/s, peak memory, the ratio, and where the CPU went (client and Azurite, per file): on loopback both share
this machine's cores, which caps what any client can gain. `--rtt-ms` puts a delaying TCP proxy in front of
Azurite to show the latency-bound case of real Azure (default 0: plain loopback).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from training.data import transfer, upload
from devtools.emulator import Azurite
from devtools.latency_proxy import LatencyProxy

NAIVE = """
import sys
from pathlib import Path
from azure.storage.blob import ContainerClient
client, dest = ContainerClient.from_container_url(sys.argv[1]), Path(sys.argv[2])
for blob in client.list_blobs():
    target = dest / blob.name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(client.download_blob(blob.name).readall())
"""


@dataclass
class Run:
    seconds: float
    peak_rss_mb: float
    client_cpu_s: float
    azurite_cpu_s: float


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def _timed(command: list[str], azurite: psutil.Process) -> Run:
    """Wall seconds, peak RSS (MB) and CPU of one child process, and the CPU Azurite spent meanwhile."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    azurite_before = _cpu_seconds(azurite)
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # ru_maxrss is in KB on Linux and is the max over children so far, hence the naive loop runs first.
    return Run(elapsed, max(after.ru_maxrss, before.ru_maxrss) / 1024, client_cpu,
               _cpu_seconds(azurite) - azurite_before)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools stage-benchmark", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=2000, help="files to stage (default: 2000)")
    parser.add_argument("--size-kb", type=int, default=110, help="size of each file in KB (default: 110)")
    parser.add_argument("--workers", type=int, default=32, help="our stager's parallel transfers (default: 32)")
    parser.add_argument("--rtt-ms", type=float, default=0.0,
                        help="network round trip added by a proxy in front of Azurite (default: 0, plain loopback; "
                             "Azure blob requests from a VM in the same region take a few ms)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, Azurite() as azurite, \
            contextlib.ExitStack() as stack:
        root = Path(tmp)
        src = root / "src"
        for i in range(args.files):
            path = src / f"n{i % 100:08d}" / f"img_{i:06d}.JPEG"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(os.urandom(args.size_kb * 1000))
        azurite.create_container("data")
        upload.upload(src, transfer.ContainerTarget.parse(azurite.container_url("data", "racwl")), "", 16)
        url = azurite.container_url("data", "rl")
        where = "127.0.0.1"
        if args.rtt_ms > 0:
            proxy = stack.enter_context(LatencyProxy(azurite.port, args.rtt_ms))
            url = url.replace(f":{azurite.port}/", f":{proxy.port}/")
            where += f", {args.rtt_ms:g} ms round trip added by a proxy"
        server = psutil.Process(azurite.process.pid)
        # The naive loop runs first, so its peak RSS is not the maximum of both.
        naive = _timed([sys.executable, "-c", NAIVE, url, str(root / "naive")], server)
        ours = _timed([sys.executable, "-m", "training", "stage", url, str(root / "ours"),
                       "--workers", str(args.workers)], server)
    total_mb = args.files * args.size_kb / 1000
    print(f"\nStaging {args.files} files x {args.size_kb} KB ({total_mb:.0f} MB) from Azurite ({where}), "
          f"{os.cpu_count()} cores")
    for label, run, rss in (("naive sequential loop", naive, "peak RSS   "),
                            (f"our stager ({args.workers} workers)", ours, "peak RSS <=")):
        print(f"  {label:<30} {args.files / run.seconds:6.0f} files/s {total_mb / run.seconds:6.1f} MB/s  "
              f"{rss} {run.peak_rss_mb:4.0f} MB   CPU per file: client {1000 * run.client_cpu_s / args.files:.2f} ms"
              f", Azurite {1000 * run.azurite_cpu_s / args.files:.2f} ms")
    print(f"  ratio: {naive.seconds / ours.seconds:.2f}x")
    # Azurite serves requests on one Node.js event loop: its CPU per file bounds the files/s of any client.
    cap = args.files / ours.azurite_cpu_s
    print(f"  ceiling here: Azurite's single event loop at {1000 / cap:.2f} ms per file serves at most {cap:.0f} files/s"
          f" = {cap * naive.seconds / args.files:.1f}x the naive loop, whatever the client does")
    return 0
