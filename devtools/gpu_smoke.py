"""The GPU paths on a real GPU, in one short run (< 8 minutes on one H100): for a device session, never part of
`make test`. It needs only torch and torchvision (the device machines have torch 2.11 cu130, torchvision 0.26,
Python 3.12, no Horovod, DALI or network), so every training run is DDP of one process.

  PYTHONUNBUFFERED=1 python3 -m devtools gpu-smoke [--out DIR] [--steps 300]

What it runs, each with a PASS/FAIL line and its time:
  1. tf32     the export's exact-fp32 switch (training/pytorch/export.py exact_fp32) on the GPU's own kernels: a
              convolution and a matrix product in fp32 with TF32 allowed (the pinned torch's current API) and inside
              exact_fp32(), each against fp64; inside, the error must be fp32's (far under TF32's)
  2. train    a few hundred steps at the GPU defaults (bf16, channels-last, the loader's defaults) on synthetic
              data, DDP, eager, the ONNX export and its check on the GPU model where onnxruntime is installed
  3. compile  the same, --compile (DDP: the recipe the catalog's figure was measured with, batch 256), fewer steps
  4. graphs   --compile --compile-mode reduce-overhead (CUDA graphs) under DDP, the trainer's own loop
  5. nvjpeg   ImageNet-sized JPEG files (made here) through --loader nvjpeg
and each training run's efficiency line (img/s per GPU against the size's figure where the recipe matches).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from training.errors import UsageError


def tf32_check() -> tuple[bool, str]:
    """(passed, figures): exact_fp32 must take the GPU's convolution and matrix product from TF32's error to fp32's."""
    import torch

    from training.pytorch.export import exact_fp32

    generator = torch.Generator(device="cuda").manual_seed(0)
    images = torch.randn(8, 64, 56, 56, device="cuda", generator=generator)
    weight = torch.randn(64, 64, 3, 3, device="cuda", generator=generator)
    a, b = (torch.randn(1024, 1024, device="cuda", generator=generator) for _ in range(2))

    def errors() -> tuple[float, float]:
        conv = torch.nn.functional.conv2d(images, weight, padding=1)
        conv64 = torch.nn.functional.conv2d(images.double(), weight.double(), padding=1)
        product, product64 = a @ b, a.double() @ b.double()
        return (float(((conv - conv64).abs().max() / conv64.abs().max())),
                float(((product - product64).abs().max() / product64.abs().max())))

    before = torch.backends.fp32_precision
    torch.backends.fp32_precision = "tf32"  # TF32 everywhere, as a speed-minded run leaves the process
    try:
        tf32 = errors()
        with exact_fp32():
            exact = errors()
    finally:
        torch.backends.fp32_precision = before
    passed = all(e < 1e-5 and e < t / 10 for e, t in zip(exact, tf32))
    return passed, (f"relative error vs fp64, conv / matmul: TF32 allowed {tf32[0]:.1e} / {tf32[1]:.1e}, inside "
                    f"exact_fp32 {exact[0]:.1e} / {exact[1]:.1e}")


def train(out: Path, *flags: str) -> tuple[bool, str]:
    """A `python -m training train` run; (passed, its efficiency line and the export's outcome)."""
    command = [sys.executable, "-m", "training", "train", "--dist", "ddp", "--output-dir", str(out), *flags]
    result = subprocess.run(command, capture_output=True, text=True)
    lines = result.stdout.splitlines()
    efficiency = next((line for line in reversed(lines) if line.startswith("efficiency:")), "no efficiency line")
    if result.returncode != 0:
        return False, f"exit {result.returncode}: {result.stderr.strip().splitlines()[-1:]}"
    exported = (out / "model.onnx").exists()
    return True, f"{efficiency}; model.onnx {'checked and written' if exported else 'not exported'}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools gpu-smoke", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--steps", type=int, default=300, help="steps of the eager run (the compiled run: 2/3)")
    args = parser.parse_args(argv)
    import torch
    import torchvision

    if not torch.cuda.is_available():
        raise UsageError("gpu-smoke: no CUDA GPU here (torch.cuda.is_available() is False); run it on a GPU machine")
    try:
        import onnxruntime  # noqa: F401

        export = []
    except ImportError:
        export = ["--no-export"]
    print(f"gpu-smoke: torch {torch.__version__}, torchvision {torchvision.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.get_device_name(0)}; ONNX export {'on' if not export else 'off (no onnxruntime here)'}",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        jpegs = root / "jpegs"
        synthetic = ["--data", "synthetic", "--log-every", "50", *export]
        parts = [
            ("tf32", tf32_check),
            ("train", lambda: train(root / "eager", *synthetic, "--steps", str(args.steps))),
            ("compile", lambda: train(root / "compiled", *synthetic, "--compile", "--batch-size", "256",
                                      "--steps", str(max(60, args.steps * 2 // 3)))),
            ("graphs", lambda: train(root / "graphs", *synthetic, "--compile", "--compile-mode", "reduce-overhead",
                                     "--batch-size", "256", "--steps", "60", "--no-export")),
            ("nvjpeg", lambda: _make_jpegs(jpegs) or train(root / "nvjpeg", "--data", str(jpegs), "--loader",
                                                           "nvjpeg", "--batch-size", "128", "--steps", "60",
                                                           "--log-every", "20", "--workers",
                                                           str(min(16, os.cpu_count() or 1)), *export)),
        ]
        failed = 0
        for name, part in parts:
            start = time.perf_counter()
            try:
                passed, text = part()
            except Exception as err:  # a smoke run reports every part, whatever one of them raised
                passed, text = False, f"{type(err).__name__}: {err}"
            failed += not passed
            print(f"{'PASS' if passed else 'FAIL'} {name:8} {time.perf_counter() - start:6.1f} s  {text}", flush=True)
    return 1 if failed else 0


def _make_jpegs(out: Path) -> None:
    """ImageNet-sized photos, 2 classes x 320 (~35 MB): enough for 60 steps of 128 to reread a few epochs."""
    if not (out / "train").is_dir():
        subprocess.run([sys.executable, "-m", "devtools", "synth-data", "--out", str(out), "--classes", "2",
                        "--per-class", "320", "--val-per-class", "0", "--imagenet-sizes", "--jobs",
                        str(min(16, os.cpu_count() or 1))], check=True, capture_output=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
