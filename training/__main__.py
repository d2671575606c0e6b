"""Training-side command line: `python -m training COMMAND --help`.

Commands:
  train        train ResNet50 with Horovod (or DDP), on synthetic data or an ImageNet-layout folder
  launch       start `train` on every GPU of every node with horovodrun (--hosts, or Azure Batch's node list)
  node-ssh     the job's own SSH between Batch nodes (key-only sshd per node; run by the job's coordination command)
  synth-data   write a small dataset of real JPEG files in ImageNet layout
  benchmark    synthetic ResNet50 throughput: our best settings vs the Horovod benchmark recipe
  upload       put a dataset into a blob container (SAS or Azure AD), verified and resumable
  stage        copy a blob container onto NFS or local disk (optionally extracting tarballs), verified, resumable
  data-demo    the reference data path on a local Azurite: upload with a write SAS, stage with a read-only SAS
  stage-benchmark  staging throughput and memory from Azurite: our stager vs a naive sequential loop

Examples:
  python -m training synth-data --out /tmp/ds --classes 4 --per-class 32 --size 64
  horovodrun -np 2 -H localhost:2 python -m training train --data /tmp/ds --image-size 64 --batch-size 8 \\
      --steps 40 --output-dir /tmp/run
"""
from __future__ import annotations

import sys

from training.errors import UsageError


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    try:
        if command == "train":
            from training.config import parse_args

            cfg = parse_args(rest, description=__doc__)
            if cfg.framework == "pytorch":
                from training.train_torch import main as train_main
            else:
                from training.train_tf import main as train_main
            return train_main(cfg)
        if command == "synth-data":
            from training.synth_data import main as synth_main

            return synth_main(rest)
        if command in ("upload", "stage", "data-demo", "stage-benchmark", "launch", "node-ssh"):
            import importlib

            module = {"upload": "training.upload", "stage": "training.stage", "data-demo": "training.data_demo",
                      "stage-benchmark": "training.stage_benchmark", "launch": "training.launch",
                      "node-ssh": "training.node_ssh"}
            return importlib.import_module(module[command]).main(rest)
        if command == "benchmark":
            from training.benchmark import main as bench_main

            return bench_main(rest)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"error: unknown command {command!r}; commands: train, launch, node-ssh, synth-data, benchmark, upload, stage, data-demo, stage-benchmark (see --help)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
