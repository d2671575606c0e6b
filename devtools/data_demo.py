"""`python -m devtools data-demo SRC DEST`: the reference architecture's data path, locally.

Starts Azurite on 127.0.0.1 (a free port, data in a temporary folder), creates the `data` container,
uploads SRC with a write SAS (read+add+create+write+list), stages it into DEST with a read-only SAS
(read+list) exactly as the NFS server does in Azure, and stops Azurite. SAS values are never printed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from training.data import stage, transfer, upload
from devtools.emulator import Azurite
from training.errors import UsageError


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools data-demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", type=Path, help="dataset folder to upload (ImageNet layout)")
    parser.add_argument("dest", type=Path, help="folder standing in for the NFS share")
    parser.add_argument("--workers", type=int, default=16, help="parallel transfers (default: 16)")
    args = parser.parse_args(argv)
    if not args.src.is_dir():
        raise UsageError(f"SRC {args.src}: no such folder")
    with Azurite() as azurite:
        print(f"data-demo: Azurite blob service on 127.0.0.1:{azurite.port}", file=sys.stderr)
        azurite.create_container("data")
        write = transfer.ContainerTarget.parse(azurite.container_url("data", "racwl"))
        read_only = transfer.ContainerTarget.parse(azurite.container_url("data", "rl"))
        print(f"data-demo: upload {args.src} -> {write.display}, write SAS", file=sys.stderr)
        print(upload.upload(args.src, write, "", args.workers).line("upload"))
        print(f"data-demo: stage {read_only.display} -> {args.dest}, read-only SAS", file=sys.stderr)
        print(stage.stage(read_only, args.dest, "", args.workers, extract=False).line("stage"))
    return 0
