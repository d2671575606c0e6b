"""devtools/pace.py, the one-GPU lever table, on this machine's CPU: a row trains the trainer's ResNet50 with the
trainer's optimizers and reports a rate, the best recipe takes only levers that beat today's row by more than the
windows' spread, and a lever that fails is a row of the table rather than the end of the run."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from devtools import pace


def test_a_row_trains_and_measures_on_cpu():
    """One row (LARS: the trainer's own optimizer class; ResNet50 at 32 px, batch 2): 8 steps, ~4 s alone, up to a
    minute while make test's other suites share the 2 cores."""
    recipe = pace.Recipe(precision="fp32", channels_last=False, compile="", batch=2, optimizer="lars", ddp=False)
    row = pace.measure("cpu", recipe, steps=1, device=torch.device("cpu"), image_size=32)
    assert not row.error and row.img_per_sec > 0 and row.spread[0] <= row.img_per_sec <= row.spread[1]


def test_the_best_recipe_takes_only_levers_that_won():
    today = pace.Row("today", pace.TODAY, img_per_sec=5000)
    rows = [today,
            pace.Row("fused", replace(pace.TODAY, optimizer="sgd-fused"), img_per_sec=5050),  # inside 2%: not taken
            pace.Row("graphs", replace(pace.TODAY, compile="reduce-overhead"), img_per_sec=5600),
            pace.Row("384", replace(pace.TODAY, batch=384), img_per_sec=5200),
            pace.Row("512", replace(pace.TODAY, batch=512), error="failed: OutOfMemoryError")]
    best = pace.best_of(rows, today)
    assert best == replace(pace.TODAY, compile="reduce-overhead", batch=384)
    rows[1].img_per_sec = 5300
    assert pace.best_of(rows, today).optimizer == "sgd-fused"


def test_the_table_shows_failures_and_ratios():
    today = pace.Row("today", pace.TODAY, img_per_sec=5000, spread=(4900, 5100))
    lines = pace.table([today, pace.Row("x", pace.TODAY, error="skipped: past --budget")], today)
    assert "1.00x" in lines[1] and lines[2].endswith("skipped: past --budget")


def test_without_a_gpu_it_says_so(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    from devtools.__main__ import main

    assert main(["pace"]) == 2
    assert "no CUDA GPU here" in capsys.readouterr().err
