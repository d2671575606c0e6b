"""When a run validates, and what its time to train went to (pure: the clock's readings are passed in).

A validation pass has a cost that does not shrink with the nodes (the loader's start, the pipeline's fill, the
collective that sums the counts) while an epoch does: ImageNet's 1.28 M images at 64 GPUs x 256 (16,384 a step) are
78 steps, ~3.7 s of training at the size's 5,363 img/s a GPU (docs/training.md), about what one pass over the 50,000
validation images takes there (782 a rank, PIL on the CPU). Validating every epoch would then double the time to
train. So unless --val-every is given, the cadence follows time: after each validation rank 0 compares its time with
the training time of the interval behind it, and stretches the next interval (in whole multiples of --val-every
epochs) until validation is at most VAL_SHARE of the training time; every rank then takes rank 0's interval (one
broadcast per validation, where the ranks already meet), so they all validate at the same step (a collective).
The run's end validates whatever the cadence. The figures land in summary.json (time_*_s) and one line,
`time to train: ...`, which separates training, validation and checkpoints."""
from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

clock = time.perf_counter  # the time-to-train clock (a test passes its own)
VAL_SHARE = 0.10  # the most share of the training time that validation takes when --val-every is left as it is
VAL_FLOOR_S = 0.1  # a validation shorter than this never stretches the interval (a fake loop's, a tiny run's)


def interval_epochs(every: int, val_s: float, train_s: float, steps: int, steps_per_epoch: int,
                    share: float = VAL_SHARE) -> int:
    """Epochs until the next validation (a multiple of `every`), given the last validation took `val_s` and the
    `steps` trained since the one before took `train_s`: the least multiple under which validation is at most
    `share` of the training time."""
    if val_s < VAL_FLOOR_S or steps <= 0 or train_s <= 0:
        return every
    per_every = train_s / steps * every * steps_per_epoch  # the training time of `every` epochs
    return every * max(1, math.ceil(val_s / (share * per_every)))


@dataclass
class ValidationCadence:
    """The steps the run validates at: every `every` epochs (0: at the end only), stretched by time when
    `adaptive` (interval_epochs). `next_at`: the next validation's step."""
    every: int
    steps_per_epoch: int
    total_steps: int
    adaptive: bool
    next_at: int = 0
    interval: int = 0  # epochs between validations now
    last_at: int = 0  # the step of the last validation, or the run's first

    @classmethod
    def starting(cls, every: int, steps_per_epoch: int, total_steps: int, adaptive: bool,
                 step: int) -> "ValidationCadence":
        """The cadence of a run that starts (or resumes) at `step`: the first validation at the next multiple of
        `every` epochs, as a run from 0 would have had it."""
        period = every * steps_per_epoch
        first = (step // period + 1) * period if period else 0
        return cls(every, steps_per_epoch, total_steps, adaptive, first, every, step)

    def due(self, done: int) -> bool:
        return bool(self.every) and done == self.next_at and done < self.total_steps  # the last step's is the end's

    def proposed(self, done: int, val_s: float, train_s: float) -> int:
        """The interval (epochs) after a validation at `done` that took `val_s`, `train_s` of training behind it:
        `every`, stretched when adaptive (rank 0's is the one every rank takes)."""
        if not self.adaptive:
            return self.every
        return interval_epochs(self.every, val_s, train_s, done - self.last_at, self.steps_per_epoch)

    def stretched_line(self, interval: int, val_s: float) -> str:
        return (f"validation every {interval} epoch(s) from here: the last took {val_s:.1f} s, kept under "
                f"{VAL_SHARE:.0%} of the training time (--val-every N fixes the cadence)")

    def validated(self, done: int, interval: int) -> None:
        """Validated at `done`; the next one `interval` epochs on (every rank passes rank 0's)."""
        self.interval, self.last_at = interval, done
        self.next_at = done + interval * self.steps_per_epoch


@dataclass
class TimeToTrain:
    """Where the time from the first step to the end's validation went (rank 0's clock): validation passes,
    checkpoint writes (the best model's copy included), and training (the rest: steps, log lines)."""
    started: float
    validation_s: float = 0.0
    checkpoint_s: float = 0.0
    validations: int = 0
    checkpoints: int = 0
    since: list[float] = field(default_factory=list)  # [clock, validation_s, checkpoint_s] at the last validation

    def training_since_last(self, now: float) -> float:
        """Training seconds since the last validation (or the start): the interval behind the next one."""
        clock, val, ckpt = self.since or [self.started, 0.0, 0.0]
        return (now - clock) - (self.validation_s - val) - (self.checkpoint_s - ckpt)

    @contextlib.contextmanager
    def writing(self, clock: Callable[[], float], counted: bool = True):
        """Around a checkpoint's write: its time (and, `counted`, one more written; the best model's copy is not
        counted, since the keeper writes it only when the validation improved)."""
        began = clock()
        try:
            yield
        finally:
            self.checkpoint_s += clock() - began
            self.checkpoints += counted

    def mark(self, now: float) -> None:
        self.since = [now, self.validation_s, self.checkpoint_s]

    def fields(self, now: float) -> dict[str, float | int]:
        total = now - self.started
        return {"time_to_train_s": round(total, 2),
                "time_training_s": round(total - self.validation_s - self.checkpoint_s, 2),
                "time_validation_s": round(self.validation_s, 2), "time_checkpoints_s": round(self.checkpoint_s, 2),
                "validations": self.validations, "checkpoints_written": self.checkpoints}


def line(fields: dict) -> str:
    """Rank 0's time-to-train line from summary.json's fields."""
    total = fields["time_to_train_s"] or 1e-9

    def part(name: str, key: str, count: str = "") -> str:
        return f"{name} {fields[key]:.1f} s ({100 * fields[key] / total:.0f}%{count})"

    passes, written = fields["validations"], fields["checkpoints_written"]
    return (f"time to train: {fields['time_to_train_s']:.1f} s = {part('training', 'time_training_s')} + "
            f"{part('validation', 'time_validation_s', f', {passes} pass(es)')} + "
            f"{part('checkpoints', 'time_checkpoints_s', f', {written} written')}")
