"""ResNet50 synthetic training throughput: our best settings next to the Horovod synthetic-benchmark recipe.

Both run in one invocation, on the same device, through `python -m training train --data synthetic` (the
real training loop, one worker), and the figures are printed side by side with their ratio:
  recipe: fp32, eager, batch 32 per worker (horovod/examples/pytorch/pytorch_synthetic_benchmark.py)
  ours:   bf16 autocast, channels-last, torch.compile, a large batch

Examples:
  python -m devtools benchmark                       # 224 px on a GPU, 64 px on CPU
  python -m devtools benchmark --image-size 224 --steps 60 --batch-size 256
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def _run(name: str, flags: list[str], out: Path) -> dict:
    # One worker, so DDP's single-process path: no launcher needed, and channels-last weights allowed.
    command = [sys.executable, "-m", "training", "train", "--dist", "ddp", "--data", "synthetic", "--no-export",
               "--checkpoint-every", "1000000", "--output-dir", str(out / name), *flags]
    print(f"benchmark: {name}: {' '.join(command[3:])}", flush=True)
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"error: benchmark run {name!r} failed:\n{result.stderr[-2000:]}")
    return json.loads((out / name / "summary.json").read_text())


def main(argv: list[str]) -> int:
    import torch

    gpu = torch.cuda.is_available()
    parser = argparse.ArgumentParser(prog="python -m devtools benchmark", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image-size", type=int, default=224 if gpu else 64, help="pixels (default: 224 GPU, 64 CPU)")
    parser.add_argument("--steps", type=int, default=60 if gpu else 12, help="steps per run, the first "
                        "logged window (warm-up, compilation) excluded from the rate (default: 60 GPU, 12 CPU)")
    parser.add_argument("--batch-size", type=int, default=256 if gpu else 64, help="our per-worker batch "
                        "(default: 256 GPU, 64 CPU); the recipe always uses 32")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out of our settings")
    args = parser.parse_args(argv)
    log_every = max(1, args.steps // 6)
    common = ["--image-size", str(args.image_size), "--steps", str(args.steps), "--log-every", str(log_every),
              "--workers", "0"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        recipe = _run("recipe", [*common, "--batch-size", "32", "--precision", "fp32", "--no-channels-last"], out)
        ours = _run("ours", [*common, "--batch-size", str(args.batch_size), "--precision", "bf16", "--channels-last",
                             *([] if args.no_compile else ["--compile"])], out)
    device = torch.cuda.get_device_name() if gpu else f"CPU ({torch.get_num_threads()} threads)"
    print(f"\nResNet50 synthetic training, {args.image_size}x{args.image_size}, 1 worker, {device}")
    print(f"  {'recipe (fp32, eager, batch 32)':<48} {recipe['img_per_sec']:>9.1f} +- {recipe['img_per_sec_ci95']:.1f} img/s")
    label = f"ours (bf16, channels-last, {'eager' if args.no_compile else 'compile'}, batch {args.batch_size})"
    print(f"  {label:<48} {ours['img_per_sec']:>9.1f} +- {ours['img_per_sec_ci95']:.1f} img/s")
    print(f"  ratio ours / recipe: {ours['img_per_sec'] / recipe['img_per_sec']:.2f}x")
    return 0
