"""The progress watchdog: a run whose steps stop ends, with one line naming the rank and host that stopped,
instead of billing every node until the task's maxWallClockTime.

A collective waiting on a dead peer waits: Horovod's NCCL and MPI operations have no timeout, and a rank that is
stopped (a GPU fallen off the bus, a host frozen, SIGSTOP) never closes its sockets. So every rank runs a thread
that expects a step within a bound derived from the measured step time (training/deadline.py, pure),
with a start-up bound for the first step only (start-up, compilation: it follows the compile mode) and a wider one
while rank 0 writes a checkpoint or the run validates (`busy`); a collective (the log line's averaged loss,
validation's sums) is never inside a busy window, so a peer frozen at any step ends the run within the step bound.

Two threads, so that a share that stops answering (a hard-mounted NFS server gone: every call on it blocks) cannot
stop the watchdog: the sign-of-life thread rewrites this rank's small file under OUTPUT_DIR/.watchdog (on the share
every node sees) and reads its peers' each poll; the deadline thread never touches the share: it reads the peers'
signs of life from memory. A sign of life carries progress (steps done, collectives entered), so a rank whose
process lives while its main thread is stuck (a GPU fallen off the bus, a kernel that never ends) is named as the
one that lags. Past the bound the deadline thread writes one line and the fault record to stderr (the launcher
reads it from horovodrun's output: FAULT_LINE), to node-local disk and, with a bounded wait, to OUTPUT_DIR/.faults,
then ends the process with EXIT_HANG (training/errors.py) whatever the writes did. The checkpoints are written
atomically (training/checkpoint.py), so the newest one is intact whatever moment the process ends at.

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
  TRAINING_WATCHDOG_FIRST_S        until the first step is done (start-up, compilation, cuDNN autotune); unset:
                                   300 eager, 900 compiled, 2,700 with max-autotune (start_up_s)
  TRAINING_WATCHDOG_FLOOR_S   120  the least bound once a step is done
  TRAINING_WATCHDOG_FACTOR     10  the bound is this many times the median of the recent step times
  TRAINING_WATCHDOG_BUSY_S    900  while a checkpoint is written or the run validates
  TRAINING_WATCHDOG_POLL_S     10  how often the threads look (and rewrite the sign of life)
  TRAINING_WATCHDOG_WRITE_S    10  the most the ending rank waits for its fault record's writes
  TRAINING_WATCHDOG_LOCAL_DIR      node-local folder for fault records (default: the Batch task's working folder,
                                   else the system's temp folder)
  TRAINING_WATCHDOG=off            no watchdog
  TRAINING_WATCHDOG_INJECT=KIND@STEP[:RANK]  after that step on that rank (rank 0 by default), rehearsed faults:
      raise  an exception (a code fault)
      hang   the main thread blocks for good while the process lives (a stuck GPU or NCCL call)
      stop   the whole process stops (SIGSTOP: a frozen host)
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

# The bounds and the deadline (pure), named here too for the modules that import them from the watchdog.
from training.deadline import RECENT, START_UP_S, Bounds, Deadline, compiler_of, start_up_s  # noqa: F401
from training.errors import EXIT_HANG, UsageError
# The signs of life and fault records, named here too for the modules that import them from the watchdog.
from training.faults import (ALIVE_DIR, FAULT_LINE, FAULTS_DIR, LOCAL_DIR_ENV, RUN_DIR_ENV,  # noqa: F401
                             blame, blame_text, emit, exception_record, host_name, is_collective_failure, lagging,
                             local_dir, read_alive, record_fault, stalled, write_alive, FileSigns)
from training.launched import rank_of

AfterStep = Callable[[int, Callable[[], float]], None]  # the runner's after_step(steps done, averaged loss)


def record_refusal(err: BaseException, code: int, env: Mapping[str, str] = os.environ) -> None:
    """A rank that refused its input (a UsageError: bad flags, a dataset that is not one; exit `code`) leaves a
    code-fault record for `launch`, which otherwise sees only horovodrun's exit status. Nothing outside `launch`."""
    run_dir = env.get(RUN_DIR_ENV)
    if not run_dir:
        return
    rank, host = rank_of(env), host_name(env)
    emit({"rank": rank, "host": host, "kind": "code", "exit_code": code, "reason": "usage", "blamed_hosts": [],
          "blamed_ranks": [], "line": f"error: code fault: rank {rank} ({host}) refused its input: {err}"},
         Path(run_dir), Bounds.from_env(env).write_s, env, say=False)


# --- the threads ------------------------------------------------------------------------------------------------

FAULT_ENV = "TRAINING_WATCHDOG_INJECT"  # KIND@STEP[:RANK]: a fault on purpose (rehearsals, tests)
FAULT_KINDS = ("raise", "hang", "stop")


class InjectedFault(RuntimeError):
    """The exception TRAINING_WATCHDOG_INJECT asks for: an error in the loop, as a bug would raise."""


def injected_fault(env: Mapping[str, str]) -> tuple[str, int, int] | None:
    """(kind, step, rank) of the fault TRAINING_WATCHDOG_INJECT=KIND@STEP[:RANK] asks for (rank 0 by default), or
    None (pure)."""
    text = env.get(FAULT_ENV, "")
    if not text:
        return None
    kind, _, where = text.partition("@")
    step, _, rank = where.partition(":")
    if kind not in FAULT_KINDS or not step.isdigit() or (rank and not rank.isdigit()):
        raise UsageError(f"{FAULT_ENV}={text!r}: give KIND@STEP or KIND@STEP:RANK, KIND one of {', '.join(FAULT_KINDS)}")
    return kind, int(step), int(rank or 0)


def _inject(kind: str, step: int, rank: int) -> None:
    if kind == "raise":
        raise InjectedFault(f"{FAULT_ENV} asked for an exception at step {step} on rank {rank}")
    if kind == "stop":
        import signal

        os.kill(os.getpid(), signal.SIGSTOP)  # every thread stops, as on a frozen host
    while True:  # hang: this thread blocks for good, the process and its watchdog threads live on
        time.sleep(3600)


class Watchdog:
    """One rank's watchdog: a deadline thread and a sign-of-life thread. `wrap(after_step)` is the runner's hook: a
    step done is progress, the time in after_step itself (rank 0's checkpoint) runs under the busy floor, and the
    log line's averaged loss (a collective) under the step bound. `mark` and `collective` (module functions below)
    let the framework's loop say where its main thread is."""

    def __init__(self, rank: int, world: int, output_dir: Path, bounds: Bounds, *,
                 clock: Callable[[], float] = time.monotonic, host: str | None = None,
                 on_expire: Callable[[str, dict], None] | None = None, signs=None):
        self.rank, self.world, self.output_dir, self.bounds = rank, world, Path(output_dir), bounds
        # where the signs of life are written and read: files on the share, or the process group's store (signs=)
        self.signs = signs or FileSigns(self.output_dir / ALIVE_DIR)
        self.host = host or host_name()
        self.clock = clock
        self.deadline = Deadline(bounds, clock())
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beats = 0
        self.progress = 0  # marks the main thread passed: steps done, collectives and exchanges entered
        self.doing = "starting"  # the last of them, in words
        self._looks: list[tuple[int, dict[int, dict]]] = []  # (look number, every rank's sign of life), newest last
        self._look_count = 0
        self.on_expire = on_expire or self._end_process
        self._thread = threading.Thread(target=self._run, name="training-watchdog", daemon=True)
        self._life = threading.Thread(target=self._signs_of_life, name="training-watchdog-life", daemon=True)

    @property
    def alive_dir(self) -> Path:
        return self.output_dir / ALIVE_DIR

    def start(self) -> "Watchdog":
        self._life.start()
        self._thread.start()
        return self

    def stepped(self, step: int) -> None:
        with self._lock:
            if step > self.deadline.step:
                self.progress += 1
                self.doing = f"step {step} done"
            self.deadline.stepped(step, self.clock())

    def busy(self, what: str) -> None:
        with self._lock:
            self.deadline.busy(what, self.clock())

    def mark(self, what: str) -> None:
        """The main thread reached `what` (e.g. the gradient exchange): progress, the deadline unchanged."""
        with self._lock:
            self.progress += 1
            self.doing = what

    @contextlib.contextmanager
    def collective(self, what: str):
        """Around a collective outside a step: progress, and no busy bound while it runs (restored after)."""
        with self._lock:
            was = self.deadline.busy_what
            self.progress += 1
            self.doing = f"in {what}"
            self.deadline.collective(self.clock())
        try:
            yield
        finally:
            with self._lock:
                self.doing = f"{what} done"
                if was:
                    self.deadline.busy(was, self.clock())

    def wrap(self, after_step: AfterStep) -> AfterStep:
        inject = injected_fault(os.environ)

        def hooked(done: int, loss: Callable[[], float]) -> None:
            self.stepped(done)
            if inject and inject[1:] == (done, self.rank):
                _inject(inject[0], done, self.rank)
            self.busy("a checkpoint or a log line")

            def averaged() -> float:
                with self.collective("the log line's loss average"):
                    return loss()

            after_step(done, averaged)
            self.stepped(done)  # back to the step bound; the time in after_step is not a step time
        return hooked

    def stop(self) -> None:
        self._stop.set()
        for thread in (self._thread, self._life):  # the sign-of-life thread removes this rank's file itself
            if thread.is_alive():
                thread.join(timeout=self.bounds.poll_s + self.bounds.write_s)

    def sign_of_life(self) -> dict:
        with self._lock:
            return {"progress": self.progress, "doing": self.doing, "busy": self.deadline.busy_what}

    def _signs_of_life(self) -> None:
        """The only thread that touches the share: writes this rank's sign of life, reads every rank's, and keeps
        the looks in memory for the deadline thread. A share that blocks blocks this thread alone."""
        while True:
            self._beats += 1
            try:
                self.signs.write({"rank": self.rank, "host": self.host, "pid": os.getpid(), "beats": self._beats,
                                  "step": self.deadline.step, **self.sign_of_life()})
                found = self.signs.read()
            except OSError:
                found = None  # a share that hiccups must not end the run; the peers see a pause, if it passes
            if found is not None:
                with self._lock:
                    self._look_count += 1
                    self._looks = [*self._looks[-3:], (self._look_count, found)]
            if self._stop.wait(self.bounds.poll_s):
                break
        self.signs.remove(self.rank)

    def _latest(self) -> tuple[int, dict[int, dict]]:
        with self._lock:
            return self._looks[-1] if self._looks else (0, {})

    def _peer_busy(self) -> str:
        """What a peer whose signs of life still move is busy with (rank 0's checkpoint), or ""."""
        with self._lock:
            looks = list(self._looks)
        if len(looks) < 2:
            return ""
        (_, before), (_, after) = looks[0], looks[-1]  # the oldest kept look: a peer's beat may skip one poll
        for rank, record in sorted(after.items()):
            moved = rank in before and before[rank].get("beats") != record.get("beats")
            if rank != self.rank and moved and record.get("busy"):
                return f"rank {rank} busy with {record['busy']}"
        return ""

    def look_twice(self) -> tuple[list[dict], list[dict], bool]:
        """Who stopped and who lags, from two looks of the sign-of-life thread more than a poll apart (read from
        memory; this thread waits, it does not read the share). The bool: the looks were fresh (False: the
        sign-of-life thread is blocked, so the share is not answering; the blame is from the last look it had)."""
        number, before = self._latest()
        if self._stop.wait(2 * self.bounds.poll_s + 0.5):
            return [], [], True
        after_number, after = self._latest()
        fresh = after_number > number
        mine = {"rank": self.rank, "host": self.host, "step": self.deadline.step, **self.sign_of_life()}
        after = {**after, self.rank: {**after.get(self.rank, {}), **mine}}
        if not fresh:
            return [], lagging(after), False
        stopped, behind = blame(before, after, self.world, self.rank)
        return stopped, behind, True

    def _run(self) -> None:
        """The deadline thread: never touches the share (it reads the signs of life the other thread keeps)."""
        peer_busy_since = None
        while not self._stop.wait(self.bounds.poll_s):
            with self._lock:
                now = self.clock()
                waited = self.deadline.overdue(now)
                bound, step, busy = self.deadline.bound(), self.deadline.step, self.deadline.busy_what
            if waited is None:
                peer_busy_since = None
                continue
            # A peer that is busy (rank 0's checkpoint) and alive holds this rank in its next step's collective:
            # the busy bound, from when this rank first saw it so.
            peer = self._peer_busy()
            if peer and not busy:
                peer_busy_since = now if peer_busy_since is None else peer_busy_since
                if now - peer_busy_since <= self.bounds.busy_s:
                    continue
            stopped, behind, fresh = self.look_twice()
            if self._stop.is_set():
                return
            doing = f" while busy with {busy}" if busy else f" ({peer})" if peer else ""
            share = "" if fresh else (f"; the signs of life on {self.signs.where} have not changed for "
                                      f"{2 * self.bounds.poll_s:.0f} s (it is not answering)")
            named = stopped or behind
            said = (blame_text(stopped, self.world, behind) if fresh or named else
                    "no rank can be named (the signs of life cannot be read)")
            line = (f"error: node fault: no training step for {waited:.0f} s after step {step}{doing} (bound "
                    f"{bound:.0f} s); {said}{share}; rank {self.rank} on "
                    f"{self.host} ends the run (exit {EXIT_HANG}) so the job can retry on other nodes from the newest "
                    "checkpoint")
            record = {"rank": self.rank, "host": self.host, "kind": "node", "exit_code": EXIT_HANG, "step": step,
                      "reason": "hang" if stopped or not behind else "stuck rank",
                      "blamed_hosts": sorted({s["host"] for s in named} - {"unknown"}),
                      "blamed_ranks": [s["rank"] for s in named], "line": line}
            self.on_expire(line, record)
            return

    def _end_process(self, line: str, record: dict) -> None:
        emit(record, self.output_dir, self.bounds.write_s)
        os._exit(record["exit_code"])  # the main thread is blocked in a collective: only _exit ends the process


_RUN: dict[str, object] = {}  # this process's run: its output dir and watchdog, for the excepthook and the marks


def prefer_signs(signs) -> None:
    """Where this process's watchdog writes and reads the signs of life, when not the share's files: the framework's
    loop calls it before the runner starts the watchdog (PyTorch under Azure ML: the process group's store)."""
    _RUN["signs"] = signs


def mark(what: str) -> None:
    """The main thread reached `what` inside a step (the gradient exchange): progress for the signs of life."""
    dog = _RUN.get("dog")
    if dog:
        dog.mark(what)


@contextlib.contextmanager
def collective(what: str):
    """Around a collective outside a step (validation's sums, a broadcast): progress, and the step bound while it
    runs, not the busy one."""
    dog = _RUN.get("dog")
    if not dog:
        yield
        return
    with dog.collective(what):
        yield


def start(rank: int, world: int, output_dir: Path, env: Mapping[str, str] = os.environ,
          compiler: str | None = None) -> Watchdog | None:
    """This rank's watchdog, started (None with TRAINING_WATCHDOG=off), and the excepthook that records how the
    rank ended. The runner calls it once the loop exists (rank and world known); `compiler` (compiler_of) sizes
    the first step's bound."""
    _RUN["output_dir"] = Path(output_dir)
    install_excepthook(rank, world, Path(output_dir))
    if env.get("TRAINING_WATCHDOG", "").lower() in ("off", "0", "false"):
        return None
    dog = Watchdog(rank, world, Path(output_dir), Bounds.from_env(env, compiler), signs=_RUN.get("signs")).start()
    _RUN["dog"] = dog
    return dog


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
        bounds = Bounds.from_env(os.environ)
        if is_collective_failure(err):
            dog = _RUN.get("dog")
            if dog:  # the sign-of-life thread's looks, from memory: this thread does not read the share
                stopped, _, _ = dog.look_twice()
                blamed = stopped
            else:
                alive = output_dir / ALIVE_DIR
                before = read_alive(alive)
                time.sleep(2 * bounds.poll_s + 0.5)
                blamed = [s for s in stalled(before, read_alive(alive), world) if s["rank"] != rank]
        record = exception_record(err, rank, host, blamed, world)
        emit(record, output_dir, bounds.write_s)  # bounded: a share that blocks does not keep the rank alive
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
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


FLIGHT_RECORDER_ENTRIES = "2000"  # collectives kept per rank: a few steps of ResNet50's DDP buckets and more


def flight_recorder_env(env: Mapping[str, str]) -> dict[str, str]:
    """PyTorch NCCL's flight recorder for this rank, for what the user has not set (pure): a ring of the last
    collectives, dumped to node-local disk when a collective times out ("TORCH_NCCL_DUMP_ON_TIMEOUT: Control whether
    dumping debug info on watchdog timeout or exception is detected. This variable must be set together with
    TORCH_NCCL_TRACE_BUFFER_SIZE larger than 0": https://docs.pytorch.org/docs/stable/torch_nccl_environment_variables.html).
    The dump names the collective each rank was in, what the signs of life cannot see inside NCCL. Newer torch reads
    TORCH_FR_BUFFER_SIZE and TORCH_FR_DUMP_TEMP_FILE (torchtitan's distributed/utils.py sets those), older the
    TORCH_NCCL_ names: both are set. Set in the rank, before its process group starts (ProcessGroupNCCL reads them)."""
    prefix = str(local_dir(env) / "nccl-flight-recorder-rank-")
    wanted = {"TORCH_NCCL_TRACE_BUFFER_SIZE": FLIGHT_RECORDER_ENTRIES, "TORCH_FR_BUFFER_SIZE": FLIGHT_RECORDER_ENTRIES,
              "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix,
              "TORCH_FR_DUMP_TEMP_FILE": prefix}
    return {name: value for name, value in wanted.items() if name not in env}


def collective_timeout(env: Mapping[str, str] = os.environ, compiler: str | None = None):
    """init_process_group's `timeout=`: the watchdog's start-up bound for `compiler` (the first step's collectives
    wait for every rank's start-up and compile: 8 ranks compiling at once with max-autotune pass 900 s), at least
    60 s. PyTorch's defaults are 10 min for NCCL and 30 min for Gloo (pytorch/pytorch#110947). A collective that hangs
    later is ended sooner by the watchdog's step bound. Unless TRAINING_WATCHDOG_FIRST_S is set, never below 900 s:
    the first collectives (the dataset's file list from rank 0, DDP's broadcast at construction) also wait for rank
    0's scan of the dataset folder, which the watchdog's bound does not cover (it starts once the loop exists)."""
    from datetime import timedelta

    seconds = Bounds.from_env(env, compiler).first_s
    if not env.get("TRAINING_WATCHDOG_FIRST_S"):
        seconds = max(seconds, Bounds().first_s)
    return timedelta(seconds=max(60.0, seconds))
