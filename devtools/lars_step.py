"""LARS's optimizer step on ResNet50's 161 tensors, the per-tensor loop (the step this project shipped before the
multi-tensor one, kept in tests/training/pytorch/test_lars.py as the reference) beside training/pytorch/optim.py's
for-each step, eager and compiled, in one run on one device: ms per step (CUDA events on a GPU) and the launches
each makes. Needs only torch and torchvision (the device machine's image has both):

  python3 -m devtools.lars_step            # on the GPU when there is one, else the CPU
"""
from __future__ import annotations

import sys
import time

import torch


def _time(step, iters: int, device: torch.device) -> float:
    for _ in range(3):
        step()
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / iters
    began = time.perf_counter()
    for _ in range(iters):
        step()
    return (time.perf_counter() - began) * 1000 / iters


def main(argv: list[str]) -> int:
    import torchvision

    from tests.training.pytorch.test_lars import PerTensorLars
    from training.pytorch import optim

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    iters = 50 if device.type == "cuda" else 3
    rows = []
    for name, make in (("per-tensor loop (before)", lambda groups: PerTensorLars(groups)),
                       ("for-each (now)", lambda groups: optim.Lars(groups)),
                       ("for-each, compiled update", lambda groups: optim.Lars(groups, compiled=True))):
        model = torchvision.models.resnet50().to(device)
        for p in model.parameters():
            p.grad = torch.full_like(p, 1e-3)
        optimizer = make(optim.lars_param_groups(model, 1e-4))
        for group in optimizer.param_groups:
            group["lr"] = 5.0
        rows.append((name, _time(optimizer.step, iters, device)))
    print(f"LARS step, ResNet50, {torch.cuda.get_device_name() if device.type == 'cuda' else 'CPU'}, "
          f"torch {torch.__version__}:")
    for name, ms in rows:
        print(f"  {name:28s} {ms:8.2f} ms/step  ({rows[0][1] / ms:.1f}x the loop)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
