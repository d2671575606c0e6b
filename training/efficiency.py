"""How well a run uses its GPUs: img/s per GPU against what the node size should reach, and what bounds it.

Pure: the training loops time the parts of each step themselves (time.perf_counter around what the step already
does, no extra device synchronisation beyond the one said in each loop) and add them to a `StepTimes`; the runner
classifies each logged window and the whole run here, and prints and writes what this module words.

The parts, as each loop measures them (seconds on this rank, summed over steps):
  data      blocked in next(batch) on the loader (and, in PyTorch, the host-to-device copy it queues): time the
            model waits for input. A loader that keeps ahead costs ~0 here.
  exchange  blocked waiting for the gradient all-reduce after the backward pass has finished computing: Horovod
            PyTorch's optimizer.synchronize(), which waits for the all-reduces backward started (the part of the
            exchange that overlapping with backward did not hide), after waiting for the compute stream on a GPU
            so that it does not count the backward kernels (the compute stream only: a device-wide synchronize
            would wait for Horovod's NCCL stream too and count the exchange as compute). It includes waiting for the slowest rank, and Horovod's
            negotiation (HOROVOD_CYCLE_TIME). None where the framework does not separate it from compute (DDP's
            all-reduce finishes inside backward; TensorFlow's runs inside the traced step): then compute holds it.
  compute   the rest of the step: forward, backward, the optimizer update.
  gpu idle  on a GPU, the time the GPU had nothing queued between one step's last kernel and the next step's first
            (CUDA events on the training stream, read when they have completed: GpuIdle, no synchronisation). Under
            DDP and torch.compile the host runs ahead of the GPU, so a host-side data wait of a few ms need not idle
            the GPU at all: where this is measured it, not the data wait, decides whether the run is input-bound
            (the GPU starved between steps: its input, or the host's own work, came late).

A run is bound by what keeps its GPUs from computing: data wait or exchange wait. Each is named only once it is
a large share of the step, since every loop waits a little for both.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

# A wait becomes the bound once it takes this share of the measured step time (data + compute + exchange). At 0.15,
# removing that wait would make the run at least 1 / (1 - 0.15) = 1.18x faster: more than the run-to-run spread of
# the benchmark's repeated runs (docs/training.md: 4,996-5,155 img/s on one H100, 3%), and small enough that a run
# reported as compute-bound loses at most 15% to each wait. MLPerf-class runs keep both well under 10%.
INPUT_BOUND_SHARE = 0.15
EXCHANGE_BOUND_SHARE = 0.15
# The catalog's figures (infra/core/skus.py) are at the benchmark's crop size: another size trains at another pace.
EXPECTATION_IMAGE_SIZE = 224
FLAG = "--expected-img-per-sec"  # train's flag: the job builders pass the node size's figure (training imports no infra)

INPUT, EXCHANGE, COMPUTE = "input-bound", "exchange-bound", "compute-bound"
STEP = "compute+exchange-bound"  # the exchange is not measured apart from compute (DDP, TensorFlow)
UNKNOWN = "unknown"
PARTS = ("data", "compute", "exchange")


@dataclass
class StepTimes:
    """Seconds this rank spent in each part of its steps, summed (see the module docstring for what each holds)."""
    data: float = 0.0
    compute: float = 0.0
    exchange: float | None = 0.0  # None: not separated from compute in this framework
    steps: int = 0
    gpu_idle: float | None = None  # None: not measured (a CPU run, or a loop without CUDA events)

    def add(self, data: float, compute: float, exchange: float | None) -> None:
        self.data += data
        self.compute += compute
        if self.exchange is not None and exchange is not None:
            self.exchange += exchange
        else:
            self.exchange = None
        self.steps += 1

    def add_gpu_idle(self, seconds: float) -> None:
        self.gpu_idle = (self.gpu_idle or 0.0) + seconds

    def copy(self) -> StepTimes:
        return dataclasses.replace(self)

    def since(self, earlier: StepTimes) -> StepTimes:
        """The times of the steps after `earlier` (a copy taken then)."""
        exchange = None if self.exchange is None or earlier.exchange is None else self.exchange - earlier.exchange
        idle = None if self.gpu_idle is None else self.gpu_idle - (earlier.gpu_idle or 0.0)
        return StepTimes(self.data - earlier.data, self.compute - earlier.compute, exchange, self.steps - earlier.steps,
                         idle)


class GpuIdle:
    """The GPU's idle time between steps from CUDA events on the training stream, without synchronising: `began()`
    records an event as a step's first work is queued, `ended()` one after its last; `collect()` (each step, cheap)
    adds up the gaps (previous end -> next beginning) whose events have completed (event.query()), leaving the rest
    for later. `event` makes an event (torch.cuda.Event(enable_timing=True) on a GPU)."""

    def __init__(self, event):
        self._event = event
        self._last_end = None
        self._pending: list = []  # (end of one step, beginning of the next)

    def began(self) -> None:
        start = self._event()
        start.record()
        if self._last_end is not None:
            self._pending.append((self._last_end, start))

    def ended(self) -> None:
        self._last_end = self._event()
        self._last_end.record()

    def collect(self) -> float:
        """Seconds of GPU idle in the gaps whose events have completed, in order; the others stay pending."""
        idle = 0.0
        while self._pending and self._pending[0][1].query():
            end, start = self._pending.pop(0)
            idle += max(0.0, end.elapsed_time(start)) / 1000  # elapsed_time: milliseconds
        return idle


@dataclass(frozen=True)
class Bound:
    label: str  # INPUT, EXCHANGE, COMPUTE, STEP or UNKNOWN
    shares: dict[str, float | None]  # each part's share of data + compute + exchange (None: not measured)

    def text(self) -> str:
        """e.g. 'input-bound (data 62%, compute 30%, exchange 8%)'."""
        if self.label == UNKNOWN:
            return "bound unknown (no step timings)"
        parts = ", ".join(f"{name} {share:.0%}" if share is not None else f"{name} in compute"
                          for name, share in self.shares.items())
        return f"{self.label} ({parts})"


def classify(times: StepTimes | None) -> Bound:
    """What bounds the steps `times` sums: the larger wait at or over its threshold, else compute."""
    if times is None or times.steps <= 0:
        return Bound(UNKNOWN, {})
    total = times.data + times.compute + (times.exchange or 0.0)
    if total <= 0:
        return Bound(UNKNOWN, {})
    shares = {"data": times.data / total, "compute": times.compute / total,
              "exchange": None if times.exchange is None else times.exchange / total}
    starved = shares["data"]
    if times.gpu_idle is not None:  # the GPU's own idle time decides, not the host's wait (see the module docstring)
        shares["gpu idle"] = starved = min(1.0, times.gpu_idle / total)
    waits = [(starved, INPUT)] if starved >= INPUT_BOUND_SHARE else []
    if shares["exchange"] is not None and shares["exchange"] >= EXCHANGE_BOUND_SHARE:
        waits.append((shares["exchange"], EXCHANGE))
    if waits:
        return Bound(max(waits)[1], shares)
    return Bound(COMPUTE if times.exchange is not None else STEP, shares)


@dataclass(frozen=True)
class Recipe:
    """What decides a run's img/s per GPU besides the GPU itself: a figure measured under another recipe is not
    this run's expectation (ResNet50 under DDP, compiled, at batch 256 trains faster per GPU than under Horovod,
    eager, at 192: comparing them would price a recipe difference as a shortfall)."""
    framework: str
    distribution: str
    compiled: bool  # torch.compile (pytorch) or XLA (tensorflow)
    precision: str  # as resolved for the device: bf16, fp16 or fp32
    batch: int  # per GPU
    image_size: int = EXPECTATION_IMAGE_SIZE
    optimizer: str = "sgd"  # as resolved for the global batch: sgd or lars (LARS's step costs more)
    compile_mode: str = "default"  # torch.compile's mode when compiled ("" eager, "xla"): CUDA graphs change the pace
    loader: str = "synthetic"  # synthetic data, or the folder loader (pil, nvjpeg, dali): input can bound the pace

    @classmethod
    def of(cls, cfg) -> Recipe:
        """A resolved TrainConfig's recipe."""
        mode = "xla" if cfg.xla else cfg.compile_mode if cfg.compile else ""
        loader = "synthetic" if cfg.data == "synthetic" else getattr(cfg, "loader", "auto")
        return cls(cfg.framework, cfg.dist, bool(cfg.compile or cfg.xla), cfg.precision, cfg.batch_size,
                   cfg.image_size, cfg.optimizer, mode, loader)

    def text(self) -> str:
        compiled = f"compiled ({self.compile_mode})" if self.compiled and self.compile_mode else (
            "compiled" if self.compiled else "eager")
        return (f"{self.framework}, {self.distribution}, {compiled}, {self.precision}, batch {self.batch}, "
                f"{self.image_size} px, {self.optimizer}, {self.loader} data")


# The recipes the catalog's figures were measured with. A node size's figure (infra/core/skus.py
# `benchmark_img_per_sec`, which the job passes as --expected-img-per-sec) is that size's img/s per GPU under these
# recipes, so the expectation is keyed by (size, framework, distribution, compile, precision, per-GPU batch): the
# size picks the figure, the run's recipe must be one it was measured with. ND H100 v5: the benchmark table in
# docs/training.md (one H100, DDP of one process, bf16, channels-last, torch.compile, batch 256, fused SGD: 5,363 img/s).
# SGD (fused), torch.compile's default mode, synthetic data: what that figure ran. Each recipe maps to its img/s as a
# share of the size's figure, measured on the same GPU in one run (1.0: the recipe of the figure itself), so that a
# recipe measured beside it (devtools/device_issue58.sh: batch 192, LARS) is one more row.
MEASURED_RECIPES: dict[Recipe, float] = {
    Recipe("pytorch", "ddp", True, "bf16", 256, optimizer="sgd", compile_mode="default", loader="synthetic"): 1.0,
}


def nearest_measured(recipe: Recipe) -> Recipe:
    """The measured recipe that differs from `recipe` in the fewest settings (then the closest batch)."""
    def distance(measured: Recipe) -> tuple[int, int]:
        fields = dataclasses.astuple(measured), dataclasses.astuple(recipe)
        return sum(a != b for a, b in zip(*fields)), abs(measured.batch - recipe.batch)
    return min(MEASURED_RECIPES, key=distance)


@dataclass(frozen=True)
class Expectation:
    img_per_sec: float | None  # per GPU (per worker); None: unknown
    basis: str  # where the figure comes from, or why there is none
    unknown: str = "unknown"  # the progress line's word for a missing figure ("unknown for this recipe")


def expectation(expected: float, *, device: str, image_size: int, recipe: Recipe | None = None) -> Expectation:
    """What this run should reach per GPU: the node size's benchmark figure (--expected-img-per-sec, 0: none) where
    it applies, which is on a GPU, at the benchmark's crop size, under a recipe the figure was measured with."""
    if not expected:
        return Expectation(None, "no benchmark for this node size")
    if device != "gpu":
        return Expectation(None, f"a CPU run (the size's {expected:g} img/s is a GPU figure)")
    if image_size != EXPECTATION_IMAGE_SIZE:
        return Expectation(None, f"the size's {expected:g} img/s is at {EXPECTATION_IMAGE_SIZE} px, this run trains "
                                 f"at {image_size} px")
    if recipe not in MEASURED_RECIPES:
        nearest = nearest_measured(recipe) if recipe else next(iter(MEASURED_RECIPES))
        mine = f" ({recipe.text()})" if recipe else ""
        return Expectation(None, f"unknown for this recipe{mine}; the nearest measured: {nearest.text()} at "
                                 f"{expected:g} img/s", unknown="unknown for this recipe")
    share = MEASURED_RECIPES[recipe]
    if share == 1.0:
        return Expectation(expected, f"the node size's benchmark ({recipe.text()})")
    return Expectation(expected * share, f"{share:.2f} x the node size's benchmark of {expected:g}, as measured beside "
                                         f"it ({recipe.text()})")


def of_expected(per_worker: float, expected: Expectation) -> float | None:
    return per_worker / expected.img_per_sec if expected.img_per_sec else None


def progress_text(per_worker: float, expected: Expectation, bound: Bound) -> str:
    """The progress line's tail, e.g. '3896.0 img/s per worker (0.76 of 5155 expected), input-bound (data 24%, ...)'.
    `python -m infra status` reads it back from the job's stdout (parse_progress)."""
    ratio = of_expected(per_worker, expected)
    against = (f"{ratio:.2f} of {expected.img_per_sec:g} expected" if ratio is not None
               else f"expected {expected.unknown}")
    return f"{per_worker:.1f} img/s per worker ({against}), {bound.text()}"


_PROGRESS = re.compile(r"(?P<per>[\d.]+) img/s per worker \((?:(?P<ratio>[\d.]+) of (?P<expected>[\d.e+]+) expected|"
                       r"expected (?P<unknown>unknown[^)]*))\), (?P<bound>.+)$")


@dataclass(frozen=True)
class Reading:
    """The last efficiency figures a run printed (parse_progress)."""
    per_worker: float  # img/s per worker: per GPU on a GPU node
    of_expected: float | None
    expected: float | None
    bound: str  # Bound.text()
    unknown: str = ""  # why there is no expected figure, as the line said it ("unknown for this recipe")


def parse_progress(text: str) -> Reading | None:
    """The last progress line's figures in a run's stdout, or None before the first one."""
    for line in reversed(text.splitlines()):
        found = _PROGRESS.search(line.strip())
        if found:
            ratio, expected = found["ratio"], found["expected"]
            return Reading(float(found["per"]), float(ratio) if ratio else None, float(expected) if expected else None,
                           found["bound"], found["unknown"] or "")
    return None


def shortfall_per_hour(ratio: float, nodes: int, node_price_per_hour: float) -> float:
    """What the GPUs' idle share costs an hour: the nodes' price times the share of the expected rate not reached
    (0 at or above it)."""
    return max(0.0, 1.0 - ratio) * nodes * node_price_per_hour


def status_text(reading: Reading | None, nodes: int, node_price_per_hour: float | None) -> str:
    """`python -m infra status`'s efficiency line: the run's last figures, and what falling short of the expected
    rate costs an hour at the stack's node price."""
    if reading is None:
        return "no progress line yet"
    head = f"{reading.per_worker:g} img/s per GPU"
    if reading.of_expected is None or reading.expected is None:
        if reading.unknown == "unknown for this recipe":  # a figure exists, for another recipe: no shortfall to price
            return (f"{head} (expected unknown for this recipe: the size's figure was measured under another; the "
                    f"run's summary.json names the nearest), {reading.bound}")
        return f"{head} (expected unknown: no benchmark for this size and framework, or a CPU run), {reading.bound}"
    line = f"{head}, {reading.of_expected:.2f} of the size's {reading.expected:g}, {reading.bound}"
    if node_price_per_hour is None:
        return line
    cost = shortfall_per_hour(reading.of_expected, nodes, node_price_per_hour)
    return f"{line}; the shortfall costs ${cost:,.2f}/h of {nodes} node(s) at ${node_price_per_hour:,.2f}/h"


def summary_fields(per_worker: float, expected: Expectation, bound: Bound) -> dict:
    """summary.json's `efficiency`."""
    ratio = of_expected(per_worker, expected)
    return {"efficiency": {
        "img_per_sec_per_worker": round(per_worker, 2),
        "expected_img_per_sec_per_worker": expected.img_per_sec,
        "expected_basis": expected.basis,
        "of_expected": None if ratio is None else round(ratio, 3),
        "bound": bound.label,
        "time_shares": {k: None if v is None else round(v, 3) for k, v in bound.shares.items()},
        "thresholds": {"input_bound_share": INPUT_BOUND_SHARE, "exchange_bound_share": EXCHANGE_BOUND_SHARE},
    }}


def expectation_args(train_args: list[str], *, framework: str, expected: float | None) -> list[str]:
    """For a job builder (pure): train's flags with the node size's expected img/s per GPU, where the catalog has a
    figure for this framework (the benchmark measured PyTorch only) and the user did not give one."""
    if expected is None or framework != "pytorch" or any(a.split("=")[0] == FLAG for a in train_args):
        return list(train_args)
    return [*train_args, FLAG, f"{expected:g}"]
