"""Checkpoint files: written atomically by rank 0, the last K kept, the newest valid one found on resume.

Framework-neutral: the caller passes the save and load functions. A checkpoint is written as
`ckpt-<step>.tmp` and renamed, so a crash mid-write never leaves a file with a checkpoint's name; a file
that still fails to load (disk trouble, a copy cut short) is skipped with a warning.
"""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.errors import UsageError

PATTERN = re.compile(r"ckpt-(\d{8})\.(pt|tfckpt)$")  # .pt: PyTorch, .tfckpt: TensorFlow/Keras (pickled arrays)


def path_for(directory: Path, step: int, suffix: str = ".pt") -> Path:
    return directory / f"ckpt-{step:08d}{suffix}"


def listed(directory: Path) -> list[Path]:
    """Checkpoints, oldest first."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if PATTERN.match(p.name))


def save(directory: Path, step: int, state: Any, save_fn: Callable[[Any, Path], None], keep: int,
         suffix: str = ".pt") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    final = path_for(directory, step, suffix)
    tmp = final.with_suffix(".tmp")
    save_fn(state, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())  # on NFS, make the bytes durable before the name appears
    os.replace(tmp, final)
    for old in listed(directory)[:-keep]:
        old.unlink(missing_ok=True)
    return final


def newest_valid(directory: Path, load_fn: Callable[[Path], Any]) -> tuple[Path, Any] | None:
    for candidate in reversed(listed(directory)):
        try:
            return candidate, load_fn(candidate)
        except Exception as err:  # noqa: BLE001 - any unreadable checkpoint is skipped, not fatal
            print(f"warning: skipping unreadable checkpoint {candidate.name}: {type(err).__name__}: {err}",
                  file=sys.stderr)
    return None


def resume_path(resume: str, directory: Path, load_fn: Callable[[Path], Any]) -> Path | None:
    """What --resume names: none, the newest valid checkpoint in `directory` (auto), or a file."""
    if resume == "none":
        return None
    if resume == "auto":
        found = newest_valid(directory, load_fn)
        return found[0] if found else None
    path = Path(resume)
    if not path.is_file():
        raise UsageError(f"--resume {path}: no such checkpoint file (or use 'auto' / 'none')")
    return path
