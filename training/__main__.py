"""The training runtime's command line: `python -m training COMMAND --help`. This package is what the scripts
container holds and every node runs; developer-only tools are `python -m devtools`.

Commands:
  train        train ResNet50 with Horovod (or DDP), on synthetic data or an ImageNet-layout folder
  launch       start `train` on every GPU of every node with horovodrun (--hosts, or Azure Batch's node list)
  node-ssh     the job's own SSH between Batch nodes (key-only sshd per node; run by the job's coordination command)
  upload       put a dataset into a blob container (SAS or Azure AD), verified and resumable
  shard        write a dataset as shards (WebDataset tars + DALI index + MD5 each): a local folder into a sharded
               folder, or a container's per-file dataset in place (docs/data.md, Shards)
  stage        copy a blob container onto NFS or local disk, verified, resumable; --extract unpacks tarballs
               (ImageNet's train/val archives into the trainer's train/<class>/*.JPEG, val/<class>/*.JPEG)
  node-stage   put one dataset onto this node's local volume (DEST/datasets/NAME): shards in parallel, each MD5
               checked (a bad one fetched again), a marker keyed by its content hash (a node that has it skips the copy)
  interconnect-check  all-reduce bus bandwidth over the job's process group before a multi-node run; below
               --floor-gbps the job stops (unless --allow-slow-interconnect)
  report       draw runs' loss, LR and img/s against step into one PNG (each run also writes its own report.png)
  predict      the top classes of photos, by name, from a run's model.onnx (onnxruntime; its metadata gives the
               classes, size and normalisation)

Examples:
  horovodrun -np 2 -H localhost:2 python -m training train --data /tmp/ds --image-size 64 --batch-size 8 \\
      --steps 40 --output-dir /tmp/run
  python -m training report /tmp/run /tmp/run2 --out compare.png
  python -m training predict /tmp/run/model.onnx photo.jpg
"""
from __future__ import annotations

import importlib
import importlib.util
import sys

from training.errors import RunStopped, UsageError

COMMANDS = {"launch": "training.cluster.launch", "node-ssh": "training.cluster.node_ssh",
            "upload": "training.data.upload", "shard": "training.data.sharding",
            "interconnect-check": "training.interconnect", "stage": "training.data.stage", "report": "training.report",
            "node-stage": "training.data.node_stage",
            "predict": "training.predict"}


TRAIN_HELP = """Train ResNet50 data-parallel, one process per GPU (or per CPU rank), under Horovod or PyTorch DDP, on
synthetic data or an ImageNet-layout folder (train/<class>/*.JPEG, val/<class>/*.JPEG). Rank 0 writes metrics.jsonl,
summary.json, report.png, TensorBoard events, checkpoints (every --checkpoint-every steps; --resume auto continues
from the newest) and model.onnx into --output-dir. Every flag below has a default; --config FILE (YAML) gives
others, and flags override it. The precision, channels-last and loader defaults follow the hardware (bf16,
channels-last and a GPU decoder on a GPU; fp32 and PIL on a CPU).

Examples:
  python -m training train --data pets --output-dir run     # one process; no Horovod needed (README's quickstart)
  horovodrun -np 2 -H localhost:2 python -m training train --data /tmp/ds --image-size 64 --batch-size 8 \\
      --steps 40 --output-dir /tmp/run
  torchrun --standalone --nproc-per-node 2 -m training train --dist ddp --data synthetic --steps 20 \\
      --output-dir /tmp/run
  python -m training train --framework keras --data synthetic --image-size 64 --batch-size 8 --steps 20 \\
      --output-dir /tmp/run     # one process
"""


# What a training environment holds and the deployer's .venv does not: a missing one means the wrong Python.
TRAINING_MODULES = frozenset({"torch", "torchvision", "tensorflow", "keras", "tf_keras", "horovod", "onnx",
                              "onnxruntime", "tensorboard", "tf2onnx"})
LOCAL_QUICKSTART = "training/requirements-local.txt"  # README's local quickstart: PyTorch on CPU, no Horovod


def missing_for_training(framework: str, module: str, python: str) -> str | None:
    """The one line for `train` in a Python without what `framework` trains with, or None when `module` is not a
    training environment's (a bug to show as it is)."""
    from training import frameworks

    root = module.partition(".")[0]
    if root not in TRAINING_MODULES:
        return None
    venv = frameworks.get(framework).image.venv
    if root == "horovod":
        return (f"--framework {framework} with --dist horovod needs Horovod, which `make setup` builds into {venv} "
                f"(images/build_horovod.sh), and this Python ({python}) lacks it: run {venv}/bin/python -m training "
                "train ..., or for one process without Horovod --framework pytorch (README's local quickstart)")
    light = (f"; or, without `make setup`, one process on CPU: pip install -r {LOCAL_QUICKSTART} into a venv of its "
             "own (README's local quickstart)" if framework == "pytorch" else "")
    return (f"--framework {framework} trains in {venv}, and this Python ({python}) has no module {root!r}: run "
            f"{venv}/bin/python -m training train ... (`make setup` builds {venv}){light}")


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    try:
        if command == "train":
            from training import frameworks
            from training.config import parse_args

            cfg = parse_args(rest, description=TRAIN_HELP)
            try:
                # The framework's own package (torch, tensorflow), found, not imported: refused before any line.
                package = frameworks.get(cfg.framework).image.package
                if package in TRAINING_MODULES and importlib.util.find_spec(package) is None:
                    raise ModuleNotFoundError(f"No module named {package!r}", name=package)
                # The framework's loop module, from its row in training/frameworks.py: imported only now.
                return importlib.import_module(frameworks.get(cfg.framework).loop).main(cfg)
            except ModuleNotFoundError as err:
                line = missing_for_training(cfg.framework, err.name or "", sys.executable)
                if line is None:
                    raise
                raise UsageError(line) from None
        if command in COMMANDS:
            return importlib.import_module(COMMANDS[command]).main(rest)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        from training.watchdog import record_refusal

        record_refusal(err, 2)  # under `launch`: a code/data fault, not retried (training/cluster/attempts.py)
        return 2
    except RunStopped:
        return 1
    print(f"error: unknown command {command!r}; commands: train, {', '.join(COMMANDS)} (see --help); developer "
          "tools (synth-data, benchmark, data-demo, stage-benchmark) are `python -m devtools`", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
