"""Progress that never goes silent: rank 0's progress bar on a terminal, plain lines in a log.

A CPU step of ResNet50 at 224 px can take a minute, and a run's first step (model build, tracing, the first
batches decoded) longer: lines printed only every --log-every steps left a run silent for 10 minutes. So besides
the runner's step lines (every --log-every steps, with the loss), a heartbeat thread on rank 0 prints where the run
is at least every --progress-seconds, between steps and during validation too, with an ETA. On a terminal that is a
bar redrawn every second; where stdout is a file or a pipe (a job's log, `tee`) plain lines, since a bar's carriage
returns would fill a log with one endless line.

The heartbeat reads no collective: the loss needs every rank (an all-reduce), and ranks' clocks would not agree
on when a time-based line is due, so a time-based line carries no loss; only the step lines, which every rank
reaches at the same step, do. Pure apart from the thread and its writes; the clock is injected for the tests.
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

BAR_WIDTH = 24
TTY_REDRAW_SECONDS = 1.0  # a terminal's bar is redrawn this often


def duration(seconds: float) -> str:
    """A duration for people: 45s, 3m05s, 1h02m."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    filled = int(max(0.0, min(1.0, fraction)) * width)
    return "[" + "#" * filled + "-" * (width - filled) + "]"


@dataclass
class Progress:
    """Where a run is, from the steps it reported and an injected clock (seconds)."""
    total: int  # the steps this run ends at (the plan's stop_at)
    global_batch: int
    start_step: int  # where this run began (a resumed run starts past 0)
    started: float  # clock at the start of the run's setup
    steps_per_epoch: int = 0  # 0: no epochs to show
    step: int = field(init=False)
    first_step_at: float | None = field(default=None, init=False)  # clock when this run's first step ended
    first_step: int = field(default=0, init=False)
    phase: str = field(default="starting: building the model, reading the data, first step", init=False)
    last_validation: str = field(default="", init=False)  # "val top-1 0.458" once one ran

    def __post_init__(self):
        self.step = self.start_step

    def advance(self, step: int, now: float) -> None:
        if self.first_step_at is None:
            # The first step carries the start-up (tracing, compilation, the first batches): rates and the ETA are
            # taken from the steps after it when there are some.
            self.first_step_at, self.first_step = now, step
        self.step = step
        self.phase = "training"

    def seconds_per_step(self, now: float) -> float | None:
        if self.first_step_at is None:
            return None
        if self.step > self.first_step:
            return (now - self.first_step_at) / (self.step - self.first_step)
        return (self.first_step_at - self.started) / max(1, self.first_step - self.start_step)

    def eta(self, now: float) -> float | None:
        """Seconds left at the pace so far (evaluations not counted), or None before the first step."""
        per_step = self.seconds_per_step(now)
        return None if per_step is None else per_step * max(0, self.total - self.step)

    def status(self, now: float) -> str:
        """Where the run is, in one line without the loss: step, epoch, img/s, elapsed, ETA."""
        elapsed = f"elapsed {duration(now - self.started)}"
        if self.first_step_at is None:
            return f"{self.phase} ({elapsed})"
        parts = [f"step {self.step}/{self.total} ({self.step / max(1, self.total):.0%})"]
        if self.steps_per_epoch:
            parts.append(f"epoch {self.step / self.steps_per_epoch:.2f}")
        per_step = self.seconds_per_step(now)
        if per_step:
            parts.append(f"{self.global_batch / per_step:.1f} img/s")
        if self.last_validation:
            parts.append(self.last_validation)
        parts += [elapsed, f"ETA {duration(self.eta(now) or 0)}"]
        if self.phase != "training":
            parts.append(self.phase)
        return "  ".join(parts)


class Heartbeat:
    """Rank 0's lines. `line()` prints a step line and restarts the quiet time; the thread prints `progress.status`
    when `every` seconds passed without a line (a log) or redraws the bar (a terminal)."""

    def __init__(self, progress: Progress, every: float, out: TextIO | None = None, tty: bool | None = None,
                 clock: Callable[[], float] = time.monotonic):
        out = out or sys.stdout  # the one in place now (a test's capture included)
        self.progress, self.every, self.out, self.clock = progress, every, out, clock
        self.tty = out.isatty() if tty is None else tty
        self.last_line = progress.started
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar_shown = False

    def line(self, text: str) -> None:
        with self._lock:
            self._clear_bar()
            print(text, file=self.out, flush=True)
            self.last_line = self.clock()

    def due(self, now: float) -> bool:
        """Whether the thread writes now: a terminal's bar every second, a log's line after `every` quiet seconds."""
        return self.tty or now - self.last_line >= self.every

    def tick(self) -> None:
        """One turn of the thread: what is due, written."""
        with self._lock:
            now = self.clock()
            if not self.due(now):
                return
            status = self.progress.status(now)
            if self.tty:
                done = self.progress.step / max(1, self.progress.total)
                self.out.write(f"\r\x1b[2K{bar(done)} {status}")
                self._bar_shown = True
                self.out.flush()
            else:
                print(f"progress: {status}", file=self.out, flush=True)
                self.last_line = now

    def _clear_bar(self) -> None:
        if self._bar_shown:
            self.out.write("\r\x1b[2K")
            self._bar_shown = False

    def _run(self) -> None:
        wait = TTY_REDRAW_SECONDS if self.tty else min(self.every, 5.0)
        while not self._stop.wait(wait):
            self.tick()

    def start(self) -> Heartbeat:
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        with self._lock:
            self._clear_bar()
            self.out.flush()
