"""The watchdog's bounds and deadline (pure: the clock's readings are passed in, the environment read as a
mapping): how long a rank may go without completing a step, from the compile mode at start-up and from the measured
step times after; training/watchdog.py's threads ask it whether the run is overdue, and the frameworks' own timeouts
(watchdog.collective_env, collective_timeout) follow the same bounds. The variables are listed in watchdog.py."""
from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from training.errors import UsageError

RECENT = 20  # step times the median is taken over

# The first step's bound by compiler (seconds): start-up (the dataset's scan, the first collective), cuDNN's
# autotune, and the compile. Measured on one H100 (docs/training.md, the lever table): warm-up 17-23 s eager,
# 37-62 s compiled with one rank; 8 ranks compile at once on a node, with compile threads capped at cores/ranks
# (loop.py), so several times that; max-autotune benchmarks each kernel's configurations, minutes more.
START_UP_S = {"eager": 300.0, "default": 900.0, "reduce-overhead": 900.0, "max-autotune": 2700.0,
              "max-autotune-no-cudagraphs": 2700.0, "xla": 900.0}


def start_up_s(compiler: str) -> float:
    """The first step's bound for `compiler` (eager, xla, or a torch.compile mode); pure."""
    return START_UP_S.get(compiler, START_UP_S["default"])


def compiler_of(cfg) -> str:
    """eager, xla, or the torch.compile mode a run's config asks for (pure)."""
    if getattr(cfg, "xla", False):
        return "xla"
    return getattr(cfg, "compile_mode", "default") if getattr(cfg, "compile", False) else "eager"


@dataclass(frozen=True)
class Bounds:
    first_s: float = 900.0
    floor_s: float = 120.0
    factor: float = 10.0
    busy_s: float = 900.0
    poll_s: float = 10.0
    write_s: float = 10.0

    @classmethod
    def from_env(cls, env: Mapping[str, str], compiler: str | None = None) -> "Bounds":
        """The bounds the environment sets; the first step's follows `compiler` unless TRAINING_WATCHDOG_FIRST_S
        says otherwise."""
        names = {"first_s": "FIRST_S", "floor_s": "FLOOR_S", "factor": "FACTOR", "busy_s": "BUSY_S", "poll_s": "POLL_S",
                 "write_s": "WRITE_S"}
        values = {"first_s": start_up_s(compiler)} if compiler else {}
        for field, suffix in names.items():
            text = env.get(f"TRAINING_WATCHDOG_{suffix}")
            if text:
                try:
                    values[field] = float(text)
                except ValueError:
                    raise UsageError(f"TRAINING_WATCHDOG_{suffix}={text!r} is not a number of seconds") from None
        return cls(**values)


class Deadline:
    """When the next step must have completed by (pure: the caller passes the clock's readings).

    The start-up bound holds until the first step is done, and only then: from there the step bound applies (the
    floor until steps are timed, then `factor` x their median). A busy spell (rank 0's checkpoint, validation)
    gets the busy bound; a collective started inside one (`collective`) ends it, since a peer frozen there would
    otherwise hold every rank for the whole busy bound."""

    def __init__(self, bounds: Bounds, now: float):
        self.bounds = bounds
        self.last = now  # the clock at the last step (or the start, or the start of a busy spell or a collective)
        self.step = 0  # the last step done
        self.done = 0  # steps done by this process (a resumed run starts at 0 too)
        self.times: deque[float] = deque(maxlen=RECENT)
        self.untimed = True  # the next step's time is not a step time (the first step's: start-up and compile)
        self.busy_what = ""  # what the run is busy with (a checkpoint, validation), or ""

    def stepped(self, step: int, now: float) -> None:
        if step > self.step:
            if not self.busy_what and not self.untimed:
                self.times.append((now - self.last) / (step - self.step))  # per step, whatever the cadence of calls
            self.done += 1
            self.untimed = False
        self.step, self.last, self.busy_what = step, now, ""

    def busy(self, what: str, now: float) -> None:
        """The run does something other than steps (rank 0's checkpoint, validation): the busy floor from now."""
        self.busy_what, self.last = what, now

    def collective(self, now: float) -> None:
        """A collective starts: it is not busy time; if the run was busy, the step bound runs from now. (The next
        step's time is still right: the hook's last `stepped` of the same step restarts the clock after it.)"""
        if self.busy_what:
            self.busy_what, self.last = "", now

    def bound(self) -> float:
        b = self.bounds
        if not self.done:
            steady = b.first_s
        elif not self.times:
            steady = b.floor_s
        else:
            steady = max(b.floor_s, b.factor * statistics.median(self.times))
        return max(steady, b.busy_s) if self.busy_what else steady

    def overdue(self, now: float) -> float | None:
        """Seconds since the last sign of progress when that is past the bound, else None."""
        waited = now - self.last
        return waited if waited > self.bound() else None
