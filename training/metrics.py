"""Throughput statistics and the output files every framework writes (pure apart from file writes)."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from training.errors import UsageError


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (a container's cpuset, a pinned node), not the
    machine's count, which would oversubscribe a node given fewer cores than the machine has."""
    return len(os.sched_getaffinity(0)) or os.cpu_count() or 1


def prepare_output_dir(out: Path) -> None:
    """Create --output-dir and prove it writable before any training starts."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"--output-dir {out}: not writable ({err.strerror})") from None


def mean_ci(samples: list[float]) -> tuple[float, float]:
    """Mean and 1.96 sigma (the Horovod benchmarks' 95% interval) of throughput samples."""
    if not samples:
        return 0.0, 0.0
    mean = sum(samples) / len(samples)
    var = sum((s - mean) ** 2 for s in samples) / len(samples)
    return mean, 1.96 * math.sqrt(var)


class MetricsLog:
    """metrics.jsonl: one JSON object per logged step, flushed at once so `tail -f` and crashes see it."""

    def __init__(self, path: Path, append: bool):
        self._file = open(path, "a" if append else "w", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def summary(*, world_size: int, global_rates: list[float], images_seen: int, wall_time_s: float,
            final_loss: float, top1: float | None, framework: str, extra: dict[str, Any]) -> dict[str, Any]:
    mean, ci = mean_ci(global_rates)
    per_worker = [r / world_size for r in global_rates]
    worker_mean, worker_ci = mean_ci(per_worker)
    return {
        "framework": framework,
        "world_size": world_size,
        "img_per_sec": round(mean, 2),
        "img_per_sec_ci95": round(ci, 2),
        "img_per_sec_per_worker": round(worker_mean, 2),
        "img_per_sec_per_worker_ci95": round(worker_ci, 2),
        "images_seen": images_seen,
        "wall_time_s": round(wall_time_s, 2),
        "final_loss": final_loss,
        "top1": top1,
        **extra,
    }


def done_line(result: dict[str, Any], output_dir: str | Path) -> str:
    """Rank 0's last line, the same for every framework."""
    return (f"done: step {result['steps']}, {result['img_per_sec']} +- {result['img_per_sec_ci95']} img/s on "
            f"{result['world_size']} worker(s), final loss {result['final_loss']:.4f}"
            + (f", top-1 {result['top1']:.3f}" if result["top1"] is not None else "")
            + f"; outputs in {output_dir}")


def peak_rss_mb() -> float:
    """This process's peak resident memory (Linux reports ru_maxrss in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
