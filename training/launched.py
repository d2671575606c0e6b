"""Which launcher started this process, and as which rank, from the variables each sets in its ranks (pure):
horovodrun's Gloo launcher HOROVOD_RANK; mpirun OMPI_COMM_WORLD_RANK (PMI_RANK for other MPIs); torchrun RANK;
TF_CONFIG's task for --dist native. A process started by hand (a local run, predict) has none of them."""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TextIO

RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK")


def by_launcher(env: Mapping[str, str]) -> bool:
    """Whether a launcher started this process as one of its ranks (then it reads the rank's stderr lines)."""
    return any(name in env for name in RANK_VARS)


def rank_of(env: Mapping[str, str]) -> int:
    """This process's rank as its launcher said it, else 0."""
    for name in RANK_VARS:
        if env.get(name, "").isdigit():
            return int(env[name])
    return 0


def as_rank0(env: Mapping[str, str]) -> bool:
    """Whether the launcher made this process rank 0 (or none launched it: one process), before any framework is
    set up. Rank 0 alone prints; the loop's own rank checks it once built."""
    for name in RANK_VARS:
        if name in env:
            return env[name] == "0"
    if env.get("TF_CONFIG"):
        try:
            return int(json.loads(env["TF_CONFIG"]).get("task", {}).get("index", 0)) == 0
        except (ValueError, TypeError, AttributeError):
            return True
    return True


def on_terminal(stream: TextIO, env: Mapping[str, str]) -> bool:
    """Whether `stream` is a person's terminal, where a redrawn bar belongs. A rank's never is: mpirun gives each
    rank a pseudo-terminal (isatty() is true) and tags and forwards its output line by line into the task's
    stdout.txt, where a bar's carriage returns and erase codes ran into one line of thousands (seen in the Keras
    rehearsal under `horovodrun --mpi`, 2026-12-06)."""
    return stream.isatty() and not by_launcher(env)
