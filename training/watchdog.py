"""The progress watchdog: a run whose steps stop ends, with one line naming the rank and host that stopped,
instead of billing every node until the task's maxWallClockTime.

A collective waiting on a dead peer waits: Horovod's NCCL and MPI operations have no timeout, and a rank that is
stopped (a GPU fallen off the bus, a host frozen, SIGSTOP) never closes its sockets. So every rank runs a thread
that expects a step within a bound derived from the measured step time (`Deadline`, pure, its clock injected),
with a floor for the first steps (start-up, compilation, the first collective) and a wider one while rank 0 writes
a checkpoint or the run validates (`busy`). Past the bound, the thread reads which ranks still show signs of life
(each rank's thread rewrites a small file under OUTPUT_DIR/.watchdog every poll, on the share every node sees),
writes one line and a fault record (OUTPUT_DIR/.faults, read by `python -m training launch`) and ends the
process with EXIT_HANG (training/errors.py). The checkpoints are written atomically (training/checkpoint.py), so
the newest one is intact whatever moment the process ends at.

The frameworks' own timeouts are set too (`collective_env`), for what they catch sooner: Horovod's Gloo context
times out after HOROVOD_GLOO_TIMEOUT_SECONDS (30 s by default: horovod/common/gloo/gloo_context.cc,
GetTimeoutFromEnv, Horovod 0.28.1); its stall inspector shuts Horovod down when some ranks have not submitted a
tensor for HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (off, 0, by default: horovod/common/stall_inspector.cc); PyTorch's
NCCL process group aborts its communicator and ends the process on a timed-out collective with
TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (https://pytorch.org/docs/stable/torch_nccl_environment_variables.html),
the timeout being init_process_group's `timeout=` (collective_timeout()). Their errors reach the rank as Python
exceptions; `install_excepthook` records those as node faults (a peer lost), and any other exception as a code
fault.

Bounds, each from the environment (seconds; the job's defaults suit 8-GPU nodes, tests set small ones):
  TRAINING_WATCHDOG_FIRST_S   900  until the first steps are measured (start-up, compilation, cuDNN autotune)
  TRAINING_WATCHDOG_FLOOR_S   120  the least bound once steps are measured
  TRAINING_WATCHDOG_FACTOR     10  the bound is this many times the median of the recent step times
  TRAINING_WATCHDOG_BUSY_S    900  while a checkpoint is written or the run validates
  TRAINING_WATCHDOG_POLL_S     10  how often the thread looks (and rewrites its sign of life)
  TRAINING_WATCHDOG=off            no watchdog
  TRAINING_WATCHDOG_INJECT=raise@STEP[:RANK]  raise an exception after that step on that rank (a code fault, rehearsed)
"""
from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from training.errors import EXIT_CODE_FAULT, EXIT_HANG, EXIT_NODE_FAULT, UsageError

ALIVE_DIR = ".watchdog"  # under the output dir: one file per rank, rewritten every poll
FAULTS_DIR = ".faults"  # under the output dir: one record per rank that ended on a fault (launch reads them)
WARMUP_STEPS = 3  # step times measured before the bound follows them (the first ones include start-up)
RECENT = 20  # step times the median is taken over
AfterStep = Callable[[int, Callable[[], float]], None]  # the runner's after_step(steps done, averaged loss)


@dataclass(frozen=True)
class Bounds:
    first_s: float = 900.0
    floor_s: float = 120.0
    factor: float = 10.0
    busy_s: float = 900.0
    poll_s: float = 10.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "Bounds":
        names = {"first_s": "FIRST_S", "floor_s": "FLOOR_S", "factor": "FACTOR", "busy_s": "BUSY_S", "poll_s": "POLL_S"}
        values = {}
        for field, suffix in names.items():
            text = env.get(f"TRAINING_WATCHDOG_{suffix}")
            if text:
                try:
                    values[field] = float(text)
                except ValueError:
                    raise UsageError(f"TRAINING_WATCHDOG_{suffix}={text!r} is not a number of seconds") from None
        return cls(**values)


class Deadline:
    """When the next step must have completed by (pure: the caller passes the clock's readings)."""

    def __init__(self, bounds: Bounds, now: float):
        self.bounds = bounds
        self.last = now  # the clock at the last step (or the start, or the start of a busy spell)
        self.step = 0  # the last step done
        self.times: deque[float] = deque(maxlen=RECENT)
        self.measured = 0
        self.busy_what = ""  # what the run is busy with (a checkpoint, validation), or ""

    def stepped(self, step: int, now: float) -> None:
        if not self.busy_what and step > self.step:
            self.times.append((now - self.last) / (step - self.step))  # per step, whatever the cadence of calls
            self.measured += 1
        self.step, self.last, self.busy_what = step, now, ""

    def busy(self, what: str, now: float) -> None:
        """The run does something other than steps (rank 0's checkpoint, validation): the busy floor from now."""
        self.busy_what, self.last = what, now

    def bound(self) -> float:
        b = self.bounds
        if self.measured < WARMUP_STEPS:
            steady = b.first_s
        else:
            steady = max(b.floor_s, b.factor * statistics.median(self.times))
        return max(steady, b.busy_s) if self.busy_what else steady

    def overdue(self, now: float) -> float | None:
        """Seconds since the last sign of progress when that is past the bound, else None."""
        waited = now - self.last
        return waited if waited > self.bound() else None


# --- signs of life: which rank stopped ---------------------------------------------------------------------------

def host_name(env: Mapping[str, str] = os.environ) -> str:
    """This rank's host as the launcher named it (horovodrun's -H name: the node's IP in a Batch job, which is what
    keep_out looks nodes up by), else, under mpirun (which names no host), the address the machine's name resolves
    to (a Batch node's private IP), else its name."""
    if env.get("HOROVOD_HOSTNAME"):
        return env["HOROVOD_HOSTNAME"]
    name = socket.gethostname()
    try:
        address = socket.gethostbyname(name)
    except OSError:
        return name
    return name if address.startswith("127.") else address


def write_alive(directory: Path, rank: int, host: str, beats: int, step: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".rank-{rank}.tmp"
    tmp.write_text(json.dumps({"rank": rank, "host": host, "pid": os.getpid(), "beats": beats, "step": step}))
    os.replace(tmp, directory / f"rank-{rank}.json")  # a reader sees the old file or the new one, never half


def read_alive(directory: Path) -> dict[int, dict]:
    found = {}
    for path in directory.glob("rank-*.json") if directory.is_dir() else ():
        try:
            record = json.loads(path.read_text())
            found[int(record["rank"])] = record
        except (OSError, ValueError, KeyError):
            continue  # a file being replaced: the next look reads it
    return found


def stalled(before: Mapping[int, dict], after: Mapping[int, dict], world: int) -> list[dict]:
    """The ranks (of 0..world-1) whose thread gave no sign of life between the two looks, lowest first: their
    beat count did not move, or they never wrote one. Pure."""
    out = []
    for rank in range(world):
        then, now = before.get(rank), after.get(rank)
        if now is None:
            out.append({"rank": rank, "host": "unknown", "step": None})
        elif then is not None and now["beats"] == then["beats"]:
            out.append(now)
    return out


def blame_text(stopped: list[dict], world: int) -> str:
    if not stopped:
        return f"all {world} ranks are alive, so a collective hung (an interconnect fault, or ranks out of step)"
    named = "; ".join(f"rank {s['rank']} on host {s['host']}" for s in stopped)
    return f"{named} stopped (no sign of life)"


RUN_DIR_ENV = "TRAINING_WATCHDOG_RUN_DIR"  # set by `launch` for every rank (forwarded as TRAINING_WATCHDOG*)


def rank_of(env: Mapping[str, str]) -> int:
    """This process's rank as its launcher said it (horovodrun's, mpirun's or torchrun's variable), else 0."""
    for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "RANK"):
        if env.get(name, "").isdigit():
            return int(env[name])
    return 0


def record_refusal(err: BaseException, code: int, env: Mapping[str, str] = os.environ) -> None:
    """A rank that refused its input (a UsageError: bad flags, a dataset that is not one; exit `code`) leaves a
    code-fault record for `launch`, which otherwise sees only horovodrun's exit status. Nothing outside `launch`."""
    run_dir = env.get(RUN_DIR_ENV)
    if not run_dir:
        return
    rank, host = rank_of(env), host_name(env)
    try:
        record_fault(Path(run_dir), {"rank": rank, "host": host, "kind": "code", "exit_code": code, "reason": "usage",
                                     "blamed_hosts": [], "blamed_ranks": [],
                                     "line": f"error: code fault: rank {rank} ({host}) refused its input: {err}"})
    except OSError:
        pass


def record_fault(output_dir: Path, record: dict) -> None:
    """One rank's fault (kind node|code, exit code, reason, blamed host), for the launcher to classify the task."""
    directory = output_dir / FAULTS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".rank-{record['rank']}.tmp"
    tmp.write_text(json.dumps(record))
    os.replace(tmp, directory / f"rank-{record['rank']}.json")


# --- the thread -------------------------------------------------------------------------------------------------

FAULT_ENV = "TRAINING_WATCHDOG_INJECT"  # raise@STEP[:RANK]: a code fault on purpose (rehearsals, tests)


class InjectedFault(RuntimeError):
    """The exception TRAINING_WATCHDOG_INJECT asks for: an error in the loop, as a bug would raise."""


def injected_fault(env: Mapping[str, str]) -> tuple[int, int] | None:
    """(step, rank) of the exception TRAINING_WATCHDOG_INJECT=raise@STEP[:RANK] asks for (rank 0 by default), or
    None (pure)."""
    text = env.get(FAULT_ENV, "")
    if not text:
        return None
    kind, _, where = text.partition("@")
    step, _, rank = where.partition(":")
    if kind != "raise" or not step.isdigit() or (rank and not rank.isdigit()):
        raise UsageError(f"{FAULT_ENV}={text!r}: give raise@STEP or raise@STEP:RANK")
    return int(step), int(rank or 0)


class Watchdog:
    """One rank's watchdog thread. `wrap(after_step)` is the runner's hook: a step done is a beat, and the time in
    after_step itself (rank 0's checkpoint) runs under the busy floor."""

    def __init__(self, rank: int, world: int, output_dir: Path, bounds: Bounds, *,
                 clock: Callable[[], float] = time.monotonic, host: str | None = None,
                 on_expire: Callable[[str, dict], None] | None = None):
        self.rank, self.world, self.output_dir, self.bounds = rank, world, Path(output_dir), bounds
        self.host = host or host_name()
        self.clock = clock
        self.deadline = Deadline(bounds, clock())
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beats = 0
        self.on_expire = on_expire or _end_process
        self._thread = threading.Thread(target=self._run, name="training-watchdog", daemon=True)

    @property
    def alive_dir(self) -> Path:
        return self.output_dir / ALIVE_DIR

    def start(self) -> "Watchdog":
        self._alive()
        self._thread.start()
        return self

    def stepped(self, step: int) -> None:
        with self._lock:
            self.deadline.stepped(step, self.clock())

    def busy(self, what: str) -> None:
        with self._lock:
            self.deadline.busy(what, self.clock())

    def wrap(self, after_step: AfterStep) -> AfterStep:
        inject = injected_fault(os.environ)

        def hooked(done: int, loss: Callable[[], float]) -> None:
            self.stepped(done)
            if inject and inject == (done, self.rank):
                raise InjectedFault(f"{FAULT_ENV} asked for an exception at step {done} on rank {self.rank}")
            self.busy("a checkpoint or a log line")
            after_step(done, loss)
            self.stepped(done)  # back to the step bound; the time in after_step is not a step time
        return hooked

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.bounds.poll_s + 5)
        try:  # a finished run leaves no sign of life behind (the folder is copied with the run's outputs)
            (self.alive_dir / f"rank-{self.rank}.json").unlink(missing_ok=True)
            self.alive_dir.rmdir()
        except OSError:
            pass  # another rank's file is still there: the last rank to stop removes the folder

    def _alive(self) -> None:
        self._beats += 1
        try:
            write_alive(self.alive_dir, self.rank, self.host, self._beats, self.deadline.step)
        except OSError:
            pass  # a share that hiccups must not end the run; the peers see a pause, not a death, if it passes

    def _run(self) -> None:
        while not self._stop.wait(self.bounds.poll_s):
            self._alive()
            with self._lock:
                waited = self.deadline.overdue(self.clock())
                bound, step, busy = self.deadline.bound(), self.deadline.step, self.deadline.busy_what
            if waited is None:
                continue
            # Who stopped: look twice, more than a poll apart, at every rank's sign of life.
            before = read_alive(self.alive_dir)
            if self._stop.wait(2 * self.bounds.poll_s + 0.5):
                return
            self._alive()
            stopped = [s for s in stalled(before, read_alive(self.alive_dir), self.world) if s["rank"] != self.rank]
            doing = f" while busy with {busy}" if busy else ""
            line = (f"error: node fault: no training step for {waited:.0f} s after step {step}{doing} (bound "
                    f"{bound:.0f} s); {blame_text(stopped, self.world)}; rank {self.rank} on {self.host} ends the run "
                    f"(exit {EXIT_HANG}) so the job can retry on other nodes from the newest checkpoint")
            record = {"rank": self.rank, "host": self.host, "kind": "node", "exit_code": EXIT_HANG, "step": step,
                      "reason": "hang", "blamed_hosts": sorted({s["host"] for s in stopped} - {"unknown"}),
                      "blamed_ranks": [s["rank"] for s in stopped],
                      "line": line}
            self.on_expire(line, record)
            return


def _end_process(line: str, record: dict) -> None:
    print(line, file=sys.stderr, flush=True)
    try:
        record_fault(Path(_output_dir_of(record)), record)
    except (OSError, KeyError):
        pass
    os._exit(record["exit_code"])  # the main thread is blocked in a collective: only _exit ends the process


_RUN: dict[str, Path] = {}  # the output dir of this process's run, for _end_process and the excepthook


def _output_dir_of(record: dict) -> Path:
    return _RUN["output_dir"]


def start(rank: int, world: int, output_dir: Path, env: Mapping[str, str] = os.environ) -> Watchdog | None:
    """This rank's watchdog, started (None with TRAINING_WATCHDOG=off), and the excepthook that records how the
    rank ended. The runner calls it once the loop exists (rank and world known)."""
    _RUN["output_dir"] = Path(output_dir)
    install_excepthook(rank, world, Path(output_dir))
    if env.get("TRAINING_WATCHDOG", "").lower() in ("off", "0", "false"):
        return None
    return Watchdog(rank, world, Path(output_dir), Bounds.from_env(env)).start()


# --- exceptions: a peer lost, or the code ------------------------------------------------------------------------

# What the frameworks raise when a collective fails because a peer went away or timed out (not a bug in our code):
# Horovod's HorovodInternalError ("Horovod has been shut down", a failed Gloo/NCCL/MPI operation), torch's
# DistBackendError / DistNetworkError (torch.distributed, ProcessGroupNCCL/Gloo timeouts and lost connections).
COLLECTIVE_ERRORS = ("HorovodInternalError", "DistBackendError", "DistNetworkError", "DistStoreError")
COLLECTIVE_TEXTS = ("Horovod has been shut down", "Connection closed by peer", "Connection reset by peer",
                    "Gloo all-reduce failed", "Timed out waiting", "NCCL communicator was aborted", "ncclSystemError",
                    "ncclRemoteError", "Socket Timeout", "Broken pipe")


def is_collective_failure(err: BaseException) -> bool:
    """Whether `err` says a collective failed (a peer lost), not that our code or data is wrong. Pure."""
    for e in _chain(err):
        if type(e).__name__ in COLLECTIVE_ERRORS or any(text in str(e) for text in COLLECTIVE_TEXTS):
            return True
    return False


def _chain(err: BaseException):
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def exception_record(err: BaseException, rank: int, host: str, blamed: list[dict], world: int) -> dict:
    """The fault record and exit code of a rank that ended on an exception (pure)."""
    first = f"{type(err).__name__}: {err}".splitlines()[0][:300]
    if is_collective_failure(err):
        line = (f"error: node fault: a collective failed on rank {rank} ({host}): {first}; "
                f"{blame_text(blamed, world)}")
        return {"rank": rank, "host": host, "kind": "node", "exit_code": EXIT_NODE_FAULT, "reason": "peer lost",
                "blamed_hosts": sorted({b["host"] for b in blamed} - {"unknown"}),
                "blamed_ranks": [b["rank"] for b in blamed], "line": line}
    line = f"error: code fault: rank {rank} ({host}) raised {first}: not retried (it fails the same on any node)"
    return {"rank": rank, "host": host, "kind": "code", "exit_code": EXIT_CODE_FAULT, "reason": "exception",
            "blamed_hosts": [], "blamed_ranks": [], "line": line}


def install_excepthook(rank: int, world: int, output_dir: Path) -> None:
    """An uncaught exception in this rank: the traceback as Python prints it, then one classified line, a fault
    record, and the exit code of its kind (a collective failure is a node fault; anything else is the code's)."""
    previous = sys.excepthook
    host = host_name()

    def hook(kind, err, tb):
        previous(kind, err, tb)
        if issubclass(kind, KeyboardInterrupt):  # a person's Ctrl-C: no fault of the code's or the node's
            return
        blamed: list[dict] = []
        if is_collective_failure(err):
            alive = output_dir / ALIVE_DIR
            poll = Bounds.from_env(os.environ).poll_s
            before = read_alive(alive)
            time.sleep(2 * poll + 0.5)  # our own thread has stopped beating too: leave ourselves out below
            blamed = [s for s in stalled(before, read_alive(alive), world) if s["rank"] != rank]
        record = exception_record(err, rank, host, blamed, world)
        print(record["line"], file=sys.stderr, flush=True)
        try:
            record_fault(output_dir, record)
        except OSError:
            pass
        sys.stdout.flush()
        os._exit(record["exit_code"])

    sys.excepthook = hook


# --- the frameworks' own timeouts -------------------------------------------------------------------------------

def collective_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that make the frameworks' collectives give up rather than wait forever, for what the user has
    not set (pure). Set by `python -m training launch` before any rank starts; forwarded to the other nodes."""
    bounds = Bounds.from_env(env)
    wanted = {
        # Horovod's Gloo context (rendezvous and CPU collectives): 30 s is Horovod's default; said here so that a
        # job's value is one place (gloo_context.cc GetTimeoutFromEnv).
        "HOROVOD_GLOO_TIMEOUT_SECONDS": "30",
        # Horovod's stall inspector: warn after 60 s (its default), shut down once ranks disagree for as long as the
        # watchdog's start-up floor (stall_inspector.cc: a shutdown time below the warning time disables it).
        "HOROVOD_STALL_CHECK_TIME_SECONDS": "60",
        "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": str(int(max(60, bounds.first_s))),
        # PyTorch NCCL: abort the communicator and end the process when a collective times out or fails.
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    }
    return {name: value for name, value in wanted.items() if name not in env}


def collective_timeout(env: Mapping[str, str] = os.environ):
    """init_process_group's `timeout=`: the watchdog's start-up floor (the first collective waits for every rank's
    start-up), at least 60 s. PyTorch's defaults are 10 min for NCCL and 30 min for Gloo (pytorch/pytorch#110947)."""
    from datetime import timedelta

    return timedelta(seconds=max(60.0, Bounds.from_env(env).first_s))
