"""Learning-rate schedule, pure and shared by every framework.

Goyal et al. 2017 (arXiv 1706.02677): scale the LR linearly with the global batch (base LR per 256
images), warm it up linearly from base LR over the first steps (large LRs diverge early), then decay.
LARS (--optimizer lars) instead takes its peak and decay from MLPerf's ResNet reference, which sets them by
the global batch (mlcommons/training image_classification/tensorflow2/lars_util.py, PolynomialDecayWithWarmup).
"""
from __future__ import annotations

import math


POLY_END_LR = 1e-4  # where MLPerf's polynomial decay ends (its end_learning_rate default)


def peak_lr(base_lr: float, global_batch: int) -> float:
    return base_lr * global_batch / 256


def lars_peak_lr(lars_lr: float, global_batch: int) -> float:
    """`lars_lr`, or where it is 0 MLPerf's reference value for this global batch (LARS's per-layer trust ratio,
    not the batch, sets the step size, so the peak is not scaled linearly)."""
    if lars_lr:
        return lars_lr
    return 10.0 if global_batch < 16384 else 25.0 if global_batch < 32768 else 31.2


def default_warmup(optimizer: str, total_steps: int) -> int:
    """--warmup-steps -1: 5% of the run with SGD (Goyal et al.: 5 of 90 epochs), 12% with LARS (MLPerf's reference:
    5 warmup epochs of about 41)."""
    return max(1, total_steps * 12 // 100 if optimizer == "lars" else total_steps // 20)


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
    if schedule == "poly":
        # MLPerf's LARS decay: power 2 from the peak at the end of warmup down to POLY_END_LR at the last step
        span = max(1, total_steps - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / span)
        end = min(POLY_END_LR, peak)
        return (peak - end) * (1 - progress) ** 2 + end
    raise ValueError(f"unknown schedule {schedule!r}")
