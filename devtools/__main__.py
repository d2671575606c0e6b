"""Developer's-machine tools: `python -m devtools COMMAND --help`. Nothing here is shipped to the cluster
(the scripts container holds the `training` package only).

Commands:
  synth-data       write a small dataset of real JPEG files in ImageNet layout
  benchmark        synthetic ResNet50 throughput: our best settings vs the Horovod benchmark recipe
  overlap-benchmark  compiled models and the gradient exchange: wall per step with a slowed all-reduce (CPU)
  gpu-smoke        the GPU paths on a real GPU in < 8 minutes (TF32 switch, training, compile, nvjpeg); not in make test
  pace             ResNet50 on one GPU lever by lever (compile modes, fused SGD, batch, nvjpeg); not in make test
  data-demo        the reference data path on a local Azurite: upload with a write SAS, stage with a read-only SAS
  stage-benchmark  staging throughput and memory from Azurite: our stager vs a naive sequential loop
  node-stage-benchmark  one dataset onto a node from Azurite: shards vs the same images as files, loopback and
                   10 ms round trip, beside AzCopy (--azcopy)
  shard-loader     the CPU (PIL) loader from shards beside the same images as files: img/s and img per CPU-second
  fleet-benchmark  teams, plan and new-team over 100 and 300 stack files, beside the repo's own stacks
  rehearse         run a stack's own job here as Azure would (local nodes, Azurite, a local Batch endpoint; root)

Examples:
  python -m devtools synth-data --out /tmp/ds --classes 4 --per-class 32 --size 64
  python -m devtools data-demo /tmp/ds /tmp/nfs
"""
from __future__ import annotations

import importlib
import sys

from training.errors import UsageError

COMMANDS = {"synth-data": "devtools.synth_data", "benchmark": "devtools.benchmark",
            "overlap-benchmark": "devtools.overlap_benchmark", "gpu-smoke": "devtools.gpu_smoke",
            "pace": "devtools.pace",
            "data-demo": "devtools.data_demo", "stage-benchmark": "devtools.stage_benchmark",
            "node-stage-benchmark": "devtools.node_stage_benchmark",
            "shard-loader": "devtools.shard_loader_benchmark", "fleet-benchmark": "devtools.fleet_benchmark",
            "rehearse": "devtools.rehearsal.run"}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"error: unknown command {command!r}; commands: {', '.join(COMMANDS)} (see --help)", file=sys.stderr)
        return 2
    try:
        return importlib.import_module(COMMANDS[command]).main(rest)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
