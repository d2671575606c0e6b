"""Learning-rate schedule, pure and shared by every framework.

Goyal et al. 2017 (arXiv 1706.02677): scale the LR linearly with the global batch (base LR per 256
images), warm it up linearly from base LR over the first steps (large LRs diverge early), then decay.
"""
from __future__ import annotations

import math


def peak_lr(base_lr: float, global_batch: int) -> float:
    return base_lr * global_batch / 256


def lr_at(step: int, *, peak: float, total_steps: int, warmup_steps: int, schedule: str, base_lr: float) -> float:
    """LR for optimizer step `step` (0-based)."""
    if warmup_steps > 0 and step < warmup_steps:
        start = min(base_lr, peak)
        return start + (peak - start) * step / warmup_steps
    if schedule == "cosine":
        span = max(1, total_steps - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / span)
        return 0.5 * peak * (1 + math.cos(math.pi * progress))
    if schedule == "step":
        # /10 at 30%, 60% and 80% of training: the 30/60/80 epochs of the 90-epoch ImageNet recipe.
        drops = sum(step >= total_steps * f for f in (0.3, 0.6, 0.8))
        return peak * 0.1 ** drops
    raise ValueError(f"unknown schedule {schedule!r}")
