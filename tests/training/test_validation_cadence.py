"""Validation's cadence follows time, and the time to train is split (training/validation.py, training/runner.py):
a fake loop whose steps, validations and checkpoint writes advance an injected clock, so no test is timed."""
import json

import pytest

from tests.training.test_progress import FakeLoop
from training import runner, validation
from training.config import parse_args


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class TimedLoop(FakeLoop):
    """Steps of 0.1 s, a validation of 5 s (a short epoch's fixed cost), checkpoint writes of 1 s, on `clock`."""

    def __init__(self, cfg, clock, rank=0, broadcast=None):
        super().__init__(cfg)
        self.clock, self.rank, self.broadcast, self.saves = clock, rank, broadcast, 0

    def fit(self, start, stop_at, lr_for, after_step):
        for step in range(start + 1, stop_at + 1):
            self.clock.now += 0.1
            after_step(step, lambda: 1.0)
        return stop_at

    def evaluate(self):
        self.clock.now += 5.0
        return super().evaluate()

    def save_checkpoint(self, state, path):
        self.clock.now += 1.0
        self.saves += 1
        super().save_checkpoint(state, path)

    def broadcast_object(self, obj):
        """Rank 0's value, as the collective gives it: for rank 1, no checkpoint to resume from (rank 0 found none)
        and `broadcast` as the next validation's interval."""
        if self.broadcast is None:
            return obj
        return self.broadcast if isinstance(obj, int) else ""


def _run(tmp_path, monkeypatch, flags, **loop):
    monkeypatch.setattr("training.report.write_for_run", lambda out: None)  # matplotlib's time, not this test's
    clock = Clock()
    monkeypatch.setattr(validation, "clock", clock)
    loops = []
    cfg = parse_args(["--output-dir", str(tmp_path), "--epochs", "10", "--log-every", "5", *flags])
    summary = runner.run(cfg, lambda c: loops.append(TimedLoop(c, clock, **loop)) or loops[-1])
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] \
        if (tmp_path / "metrics.jsonl").exists() else []
    return summary, loops[0], [r["step"] for r in records if "val_top1" in r]


def test_a_validation_that_costs_more_than_its_epochs_is_stretched_and_the_time_to_train_is_split(
        tmp_path, monkeypatch, capsys):
    summary, loop, validated = _run(tmp_path, monkeypatch, ["--export"])
    # 3 steps an epoch of 0.1 s and a 5 s validation: every epoch would be 5 s of validation per 0.3 s of training
    # (today's cadence: 10 passes, 50 s of 53 s). The first pass stretches the interval past the run: the end's.
    assert validated == [3, 30] and len(loop.evaluated) == 2
    assert summary["time_validation_s"] == 10.0 and summary["validations"] == 2
    assert summary["time_checkpoints_s"] == float(loop.saves) and summary["checkpoints_written"] == 1
    assert summary["time_training_s"] == pytest.approx(3.0)
    assert summary["time_to_train_s"] == pytest.approx(13.0 + loop.saves)
    out = capsys.readouterr().out
    assert "validation every 167 epoch(s) from here: the last took 5.0 s, kept under 10% of the training time" in out
    assert f"time to train: {13.0 + loop.saves:.1f} s = training 3.0 s " in out
    assert "validation 10.0 s" in out and "2 pass(es)" in out and "1 written" in out


def test_a_given_val_every_is_kept_as_asked(tmp_path, monkeypatch):
    summary, loop, validated = _run(tmp_path, monkeypatch, ["--val-every", "1"])
    assert validated == list(range(3, 31, 3)) and summary["time_validation_s"] == 50.0


def test_every_rank_takes_rank_0s_interval_whatever_its_own_clock_says(tmp_path, monkeypatch):
    # rank 1's own clock would stretch past the run; rank 0 said every 2 epochs, so rank 1 validates with it
    _, loop, _ = _run(tmp_path, monkeypatch, [], rank=1, broadcast=2)
    assert len(loop.evaluated) == 6  # steps 3, 9, 15, 21, 27, and the end's at 30


def test_the_interval_at_the_stacks_scale():
    step_s = 256 / 5363  # batch 256 a GPU at the size's img/s
    # 8 nodes x 8 GPUs: 78 steps an epoch (3.7 s), a 3 s pass: every 9 epochs keeps it under 10%
    assert validation.interval_epochs(1, 3.0, 78 * step_s, 78, 78) == 9
    # 32 nodes: 19 steps an epoch (0.9 s): every 34 epochs; 1 node (625 steps, 30 s): every epoch while the pass
    # stays under 3 s, every 2 past it
    assert validation.interval_epochs(1, 3.0, 19 * step_s, 19, 19) == 34
    assert validation.interval_epochs(1, 2.9, 625 * step_s, 625, 625) == 1
    assert validation.interval_epochs(1, 3.1, 625 * step_s, 625, 625) == 2
    # a multiple of --val-every's epochs; a pass under the floor never stretches
    assert validation.interval_epochs(2, 3.0, 78 * step_s, 78, 78) == 10
    assert validation.interval_epochs(1, 0.05, 0.001, 3, 3) == 1
