"""`python -m devtools node-stage-benchmark`: staging one dataset onto a node from Azurite, as shards against the same
images as files, on loopback and with a network round trip added, beside AzCopy when it is given. Not a test.

Writes N ImageNet-sized files (~110 KB of random bytes each: staging never decodes them), uploads them to a fresh
Azurite twice, as the per-file dataset `files` (with its manifest) and as the sharded dataset `shards` (the same
images in WebDataset tars of --shard-mb, training/data/shards.py), then, for each round trip in --rtt-ms, stages
each with `python -m training node-stage` into an empty folder, and, with --azcopy, copies each prefix with
AzCopy (`--from-to BlobLocal`, its default concurrency and MD5 check), each in its own process. Prints wall
seconds, MB/s, images/s and the client's CPU seconds per row (and a second node-stage of the shards, which its
marker skips), and shards against files in the same run.

On loopback the client and Azurite share this machine's cores (Azurite serves on one Node.js event loop), so the
figures measure CPU per request and per byte; `--rtt-ms 10` puts a delaying TCP proxy (devtools/latency_proxy.py)
in front of Azurite, the latency-bound case, where a file per request pays the round trip per image and a shard
pays it per ~10,000 images. The written bytes stay in the page cache: the local disk is not what is measured.

AzCopy: npm `@azure-tools/azcopy-linux` (its binary under dist/bin; it needs Debian's libsecret-1-0 on
LD_LIBRARY_PATH), pass the binary as --azcopy; its logs and plans go to the run's temp folder.
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
from datetime import datetime, timezone
from pathlib import Path

from devtools.emulator import Azurite
from devtools.latency_proxy import LatencyProxy
from training.data import datasets, shards, transfer, upload


@dataclass(frozen=True)
class Row:
    rtt_ms: float
    what: str
    seconds: float
    cpu_s: float


def _timed(command: list[str], env: dict | None = None) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one child process, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{command[0]} failed ({result.returncode}): {transfer.redact(result.stderr[-2000:])}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _images(root: Path, count: int, size_kb: int) -> Path:
    src = root / "src"
    for i in range(count):
        split = "val" if i % 10 == 9 else "train"  # a validation tenth, as a dataset has
        path = src / split / f"n{(i // 10) % 100:08d}" / f"img_{i:07d}.JPEG"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size_kb * 1000))
    return src


def _prepare(azurite: Azurite, root: Path, src: Path, shard_mb: int) -> int:
    """Upload the images as dataset `files` (+ manifest) and as dataset `shards`; the number of tar shards."""
    azurite.create_container("data")
    write = azurite.container_url("data", "racwl")
    target = transfer.ContainerTarget.parse(write)
    upload.upload(src, target, datasets.prefix("files"), 16)
    from azure.storage.blob import ContainerClient

    client = ContainerClient.from_container_url(write)
    described = datasets.describe(client, "files")
    datasets.write_manifest(client, described)
    sharded = shards.write_shards(src, root / "sharded", shard_bytes=shard_mb * 1000 * 1000)
    upload.upload(root / "sharded", target, datasets.prefix("shards"), 16)
    return sum(len(found) for found in sharded.shards.values())


def _azcopy_env(root: Path) -> dict:
    # AzCopy writes logs and job plans under ~/.azcopy unless told otherwise (AZCOPY_LOG_LOCATION,
    # AZCOPY_JOB_PLAN_LOCATION): here they stay in the run's temp folder.
    return {**os.environ, "AZCOPY_LOG_LOCATION": str(root / "azcopy-logs"),
            "AZCOPY_JOB_PLAN_LOCATION": str(root / "azcopy-plans"), "AZCOPY_DISABLE_SYSLOG": "true"}


def _runs(url: str, rtt: float, root: Path, threads: int, azcopy: str, tars: int) -> list[Row]:
    rows = []
    for name, label in (("files", "per file (the stager)"), ("shards", f"{tars} shards")):
        dest = root / f"dest-{rtt:g}-{name}"
        seconds, cpu = _timed([sys.executable, "-m", "training", "node-stage", url, "--dataset", name, "--dest",
                               str(dest), "--threads", str(threads)])
        rows.append(Row(rtt, f"node-stage, {label}", seconds, cpu))
    # The same node again: its marker holds the content hash, so the copy is skipped (a manifest GET and Python's
    # start, what a node that kept its volume pays per job).
    seconds, cpu = _timed([sys.executable, "-m", "training", "node-stage", url, "--dataset", "shards", "--dest",
                           str(root / f"dest-{rtt:g}-shards")])
    rows.append(Row(rtt, "node-stage again, marker: skipped", seconds, cpu))
    if azcopy:
        base, _, sas = url.partition("?")
        for name, label in (("files", "per file"), ("shards", f"{tars} shards")):
            dest = root / f"azcopy-{rtt:g}-{name}"
            dest.mkdir()
            source = f"{base}/{datasets.prefix(name).rstrip('/')}?{sas}"
            seconds, cpu = _timed([azcopy, "copy", source, str(dest), "--recursive", "--from-to", "BlobLocal",
                                   "--log-level", "ERROR"], env=_azcopy_env(root))
            rows.append(Row(rtt, f"AzCopy, {label}", seconds, cpu))
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools node-stage-benchmark", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=3000, help="images (default: 3000)")
    parser.add_argument("--size-kb", type=int, default=110, help="bytes per image in KB (default: 110, ImageNet's)")
    parser.add_argument("--shard-mb", type=int, default=32,
                        help="shard size in MB (default: 32, so a few hundred MB make ~10 shards; datasets use 128)")
    parser.add_argument("--threads", type=int, default=16, help="node-stage's parallel downloads (default: 16)")
    parser.add_argument("--rtt-ms", default="0,10", help="round trips to play, comma-separated (default: 0,10)")
    parser.add_argument("--azcopy", default="", help="the AzCopy binary, to add its rows (see above)")
    args = parser.parse_args(argv)
    rtts = [float(x) for x in args.rtt_ms.split(",") if x.strip()]
    with tempfile.TemporaryDirectory() as tmp, Azurite() as azurite:
        root = Path(tmp)
        src = _images(root, args.files, args.size_kb)
        tars = _prepare(azurite, root, src, args.shard_mb)
        version = ""
        if args.azcopy:
            version = subprocess.run([args.azcopy, "--version"], capture_output=True, text=True,
                                     env=_azcopy_env(root)).stdout.strip()
        rows: list[Row] = []
        for rtt in rtts:
            with contextlib.ExitStack() as stack:
                url = azurite.container_url("data", "rl")
                if rtt > 0:
                    proxy = stack.enter_context(LatencyProxy(azurite.port, rtt))
                    url = url.replace(f":{azurite.port}/", f":{proxy.port}/")
                rows += _runs(url, rtt, root, args.threads, args.azcopy, tars)
    total_mb = args.files * args.size_kb / 1000
    print(f"\nStaging {args.files} images x {args.size_kb} KB ({total_mb:.0f} MB) from Azurite onto local disk, "
          f"{os.cpu_count()} cores, {datetime.now(timezone.utc):%Y-%m-%d}; node-stage --threads {args.threads}"
          + (f"; {version}" if version else ""))
    print(f"  {'round trip':<11}{'how':<34}{'s':>7}{'MB/s':>8}{'images/s':>10}{'client CPU s':>14}")
    for row in rows:
        rates = (f"{'-':>8}{'-':>10}" if "again" in row.what else  # nothing moved: no rate
                 f"{total_mb / row.seconds:8.1f}{args.files / row.seconds:10.0f}")
        print(f"  {row.rtt_ms:>5g} ms    {row.what:<34}{row.seconds:7.1f}{rates}{row.cpu_s:14.1f}")
    for rtt in rtts:
        by = {row.what.split(",")[0] + (" shards" if "shards" in row.what else " files"): row
              for row in rows if row.rtt_ms == rtt and "again" not in row.what}
        gain = by["node-stage files"].seconds / by["node-stage shards"].seconds
        line = f"  {rtt:g} ms: node-stage shards {gain:.1f}x as fast as per file"
        if "AzCopy shards" in by:
            line += (f"; against AzCopy: shards {by['AzCopy shards'].seconds / by['node-stage shards'].seconds:.2f}x, "
                     f"per file {by['AzCopy files'].seconds / by['node-stage files'].seconds:.2f}x")
        print(line)
    return 0
