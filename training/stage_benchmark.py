"""`python -m training stage-benchmark`: staging throughput from Azurite, our stager next to a naive loop.

Uploads N ImageNet-sized files (~110 KB, random bytes) to a fresh Azurite, then, in one run, stages them
with `python -m training stage` and with a naive sequential azure-storage-blob loop (list, download_blob,
readall, write), each in its own process so peak memory (max RSS) is measured per process. Prints files/s,
MB/s, peak memory and the ratio.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from training import upload, transfer
from training.emulator import Azurite

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


def _timed(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    elapsed = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return elapsed, max(peak, before) / 1024  # ru_maxrss is in KB on Linux; max over children so far


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m training stage-benchmark", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=2000, help="files to stage (default: 2000)")
    parser.add_argument("--size-kb", type=int, default=110, help="size of each file in KB (default: 110)")
    parser.add_argument("--workers", type=int, default=32, help="our stager's parallel transfers (default: 32)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, Azurite() as azurite:
        root = Path(tmp)
        src = root / "src"
        for i in range(args.files):
            path = src / f"n{i % 100:08d}" / f"img_{i:06d}.JPEG"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(os.urandom(args.size_kb * 1000))
        azurite.create_container("data")
        upload.upload(src, transfer.ContainerTarget.parse(azurite.container_url("data", "racwl")), "", 16)
        url = azurite.container_url("data", "rl")
        total_mb = args.files * args.size_kb / 1000
        # The naive loop runs first, so its peak RSS is not the maximum of both.
        naive_s, naive_rss = _timed([sys.executable, "-c", NAIVE, url, str(root / "naive")])
        ours_s, ours_rss = _timed([sys.executable, "-m", "training", "stage", url, str(root / "ours"),
                                   "--workers", str(args.workers)])
    print(f"\nStaging {args.files} files x {args.size_kb} KB ({total_mb:.0f} MB) from Azurite on 127.0.0.1")
    print(f"  {'naive sequential loop':<30} {args.files / naive_s:8.0f} files/s {total_mb / naive_s:7.1f} MB/s  "
          f"peak RSS {naive_rss:5.0f} MB")
    print(f"  {'our stager (' + str(args.workers) + ' workers)':<30} {args.files / ours_s:8.0f} files/s "
          f"{total_mb / ours_s:7.1f} MB/s  peak RSS <= {ours_rss:5.0f} MB")
    print(f"  ratio: {naive_s / ours_s:.2f}x")
    return 0
