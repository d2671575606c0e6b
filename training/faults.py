"""A rank's signs of life and fault records (pure apart from the files and streams they name): who stopped, who
lags, how an exception is classified, and how a rank that ends says why, on node-local disk, on stderr for the
launcher and on the share. The threads that use them are training/watchdog.py's; the launcher's reading of the
records is training/cluster/attempts.py's.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from training.errors import EXIT_CODE_FAULT, EXIT_NODE_FAULT
from training.launched import by_launcher

ALIVE_DIR = ".watchdog"  # under the output dir: one file per rank, rewritten every poll
FAULTS_DIR = ".faults"  # under the output dir: one record per rank that ended on a fault (launch reads them)
FAULT_LINE = "watchdog-fault: "  # a rank's fault record as one stderr line (JSON after it), which the launcher reads


# --- signs of life: which rank stopped or lags ---------------------------------------------------------------------------

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


def write_alive(directory: Path, rank: int, host: str, beats: int, step: int, **more) -> None:
    """This rank's sign of life (its beat count, last step and progress: `more`), replaced atomically."""
    _write_rank_file(directory, {"rank": rank, "host": host, "pid": os.getpid(), "beats": beats, "step": step, **more})


def _write_rank_file(directory: Path, record: dict) -> None:
    """DIRECTORY/rank-<rank>.json holding `record`, replaced atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".rank-{record['rank']}.tmp"
    tmp.write_text(json.dumps(record))
    os.replace(tmp, directory / f"rank-{record['rank']}.json")  # a reader sees the old file or the new one, never half


def read_alive(directory: Path) -> dict[int, dict]:
    found = {}
    for path in directory.glob("rank-*.json") if directory.is_dir() else ():
        try:
            record = json.loads(path.read_text())
            found[int(record["rank"])] = record
        except (OSError, ValueError, KeyError):
            continue  # a file being replaced: the next look reads it
    return found


class FileSigns:
    """Signs of life as one small file per rank under OUTPUT_DIR/.watchdog, on the share every node sees."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.where = f"the share ({self.directory})"

    def write(self, record: dict) -> None:
        write_alive(self.directory, **{k: record[k] for k in ("rank", "host", "beats", "step")},
                    **{k: v for k, v in record.items() if k not in ("rank", "host", "beats", "step", "pid")})

    def read(self) -> dict[int, dict]:
        return read_alive(self.directory)

    def remove(self, rank: int) -> None:
        try:  # a finished run leaves no sign of life behind (the folder is copied with the run's outputs)
            (self.directory / f"rank-{rank}.json").unlink(missing_ok=True)
            self.directory.rmdir()
        except OSError:
            pass  # another rank's file is still there: the last rank to stop removes the folder


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


def lagging(alive: Mapping[int, dict]) -> list[dict]:
    """Of ranks whose signs of life still move, those whose main thread has come less far (steps done and
    collectives entered, `progress`) than the furthest: with every rank waiting in a collective, the one that
    never entered it is stuck before it (in a GPU kernel, a CUDA call, its input). [] when all are level. Pure."""
    known = {rank: r for rank, r in alive.items() if isinstance(r.get("progress"), int)}
    if len(known) < 2:
        return []
    ahead = max(r["progress"] for r in known.values())
    return [known[rank] for rank in sorted(known) if known[rank]["progress"] < ahead]


def blame(before: Mapping[int, dict], after: Mapping[int, dict], world: int, me: int) -> tuple[list[dict], list[dict]]:
    """(ranks that stopped: no sign of life moved between the looks, ranks that lag: alive but behind). This rank
    is never among the stopped (its own thread is the one looking) but may be the one that lags. Pure."""
    stopped = [s for s in stalled(before, after, world) if s["rank"] != me]
    gone = {s["rank"] for s in stopped}
    alive = {rank: record for rank, record in after.items() if rank not in gone}
    return stopped, lagging(alive)


def blame_text(stopped: list[dict], world: int, behind: list[dict] | None = None) -> str:
    if stopped:
        named = "; ".join(f"rank {s['rank']} on host {s['host']}" for s in stopped)
        return f"{named} stopped (no sign of life)"
    if behind:
        named = "; ".join(f"rank {s['rank']} on host {s['host']} (at step {s.get('step')}, {s.get('doing') or '?'})"
                          for s in behind)
        return (f"{named} lags the others while its process lives (its main thread is stuck: a GPU, a CUDA or NCCL "
                "call, or its input)")
    return f"all {world} ranks are alive, so a collective hung (an interconnect fault, or ranks out of step)"


RUN_DIR_ENV = "TRAINING_WATCHDOG_RUN_DIR"  # set by `launch` for every rank (forwarded as TRAINING_WATCHDOG*)


def record_fault(output_dir: Path, record: dict) -> None:
    """One rank's fault (kind node|code, exit code, reason, blamed host), for the launcher to classify the task."""
    _write_rank_file(output_dir / FAULTS_DIR, record)


LOCAL_DIR_ENV = "TRAINING_WATCHDOG_LOCAL_DIR"


def local_dir(env: Mapping[str, str] = os.environ) -> Path:
    """This node's own disk for fault records: TRAINING_WATCHDOG_LOCAL_DIR, else the Batch task's working folder
    (on the node's local temporary disk: learn.microsoft.com/azure/batch/files-and-directories), else the system's
    temp folder. Never the share, which may be what failed."""
    import tempfile

    chosen = env.get(LOCAL_DIR_ENV) or env.get("AZ_BATCH_TASK_WORKING_DIR") or tempfile.gettempdir()
    return Path(chosen) / "training-watchdog"


def emit(record: dict, share_dir: Path, wait_s: float, env: Mapping[str, str] = os.environ, say: bool = True) -> bool:
    """Say a rank's fault everywhere it may be read, within `wait_s` seconds in all: node-local disk first, then
    stderr (the human line when `say`, then, under a launcher, FAULT_LINE + the record: horovodrun passes the
    ranks' output to the launcher), then the share's OUTPUT_DIR/.faults. The writes run in a thread of their own, so a stderr or a share
    that blocks costs at most `wait_s`; returns whether they all finished."""
    def write() -> None:
        try:
            record_fault(local_dir(env), record)
        except OSError:
            pass
        if say:
            print(record["line"], file=sys.stderr, flush=True)
        if by_launcher(env):  # only then is there a launcher to read FAULT_LINE; by hand, the one human line
            print(FAULT_LINE + json.dumps(record, sort_keys=True), file=sys.stderr, flush=True)
        try:
            record_fault(share_dir, record)
        except OSError:
            pass

    writer = threading.Thread(target=write, name="training-watchdog-fault", daemon=True)
    writer.start()
    writer.join(wait_s)
    return not writer.is_alive()


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
