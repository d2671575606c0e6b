"""What one attempt of a job ended as (pure apart from reading and appending files): the ranks' fault records
(training/watchdog.py) and horovodrun's exit status classified as a node fault or a code/data fault, with the
host it blames, and the attempt's line in OUTPUT_DIR/attempts.jsonl (each attempt of a Batch task appends one:
its start, end, nodes, verdict and the node-hours a failure cost), which `python -m infra status` shows.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from training.errors import EXIT_NODE_FAULT, kind_of
from training.faults import ALIVE_DIR, FAULT_LINE, FAULTS_DIR

ATTEMPTS_FILE = "attempts.jsonl"


@dataclass(frozen=True)
class Verdict:
    kind: str  # ok | node | code | stopped (a signal from outside: a cancel, an eviction, the time limit)
    exit_code: int  # the task's: 0, EXIT_NODE_FAULT or EXIT_HANG (node), EXIT_USAGE or EXIT_CODE_FAULT (code)
    reason: str  # hang, peer lost, exception, usage, rank lost, health check, ...
    blamed_hosts: tuple[str, ...] = ()
    line: str = ""  # the one line the launcher prints first about it


def classify(records: list[dict], rc: int) -> Verdict:
    """The attempt's verdict from every rank's fault record and the ranks' launcher's exit status (pure).

    A rank that named a host that stopped (the watchdog, a failed collective) makes it a node fault on that host;
    else a rank's own exception or bad input makes it a code fault (the ranks that then lost their peer only echo
    it); else a hang or a lost peer nobody could name is a node fault on no host in particular; a non-zero status
    with no record at all (a rank killed by a signal or its host gone before it could write) is a node fault too."""
    if rc == 0 and not records:
        return Verdict("ok", 0, "done")
    # A rank that ended on its own code fault explains why its peers lost it: those are not the node's fault.
    explained = {r["rank"] for r in records if r.get("kind") == "code"}
    named = [r for r in records if r.get("kind") == "node" and r.get("blamed_hosts")
             and not set(r.get("blamed_ranks") or [-1]) <= explained]
    if named:
        hosts = tuple(sorted({h for r in named for h in r["blamed_hosts"]}))
        first = min(named, key=lambda r: r["rank"])
        return Verdict("node", first["exit_code"], first["reason"], hosts,
                       f"fault: node {','.join(hosts)}: {first['reason']} ({_said(first)})")
    code = [r for r in records if r.get("kind") == "code"]
    if code:
        first = min(code, key=lambda r: r["rank"])
        return Verdict("code", first["exit_code"], first["reason"], (),
                       f"fault: code: {_said(first)}")
    node = [r for r in records if r.get("kind") == "node"]
    if node:
        first = min(node, key=lambda r: r["rank"])
        return Verdict("node", first["exit_code"], first["reason"], (),
                       f"fault: node (none named): {_said(first)}")
    if kind_of(rc) == "code":
        return Verdict("code", rc, "usage", (),
                       f"fault: code: a rank refused its input (exit {rc}); see its error line")
    return Verdict("node", EXIT_NODE_FAULT, "rank lost", (),
                   f"fault: node (none named): the ranks ended with exit {rc} and no rank said why (a rank killed, "
                   "or its host gone)")


def unreachable(hosts: list[str], port: int, connect: Callable[[str, int], None] | None = None) -> list[str]:
    """The hosts whose sshd (the job's, which every rank is reached through) does not answer a TCP connect within
    5 s: a node that died takes its ranks with it before they can write a word, so this is how it is named."""
    def tcp(host: str, port: int) -> None:
        socket.create_connection((host, port), timeout=5).close()

    connect = connect or tcp
    gone = []
    for host in hosts:
        try:
            connect(host, port)
        except OSError:
            gone.append(host)
    return gone


def blame_unreachable(verdict: Verdict, hosts: list[str], port: int,
                      connect: Callable[[str, int], None] | None = None) -> Verdict:
    """A node fault that named no host, with the hosts that no longer answer named (a rank's host unreachable)."""
    remote = [h for h in hosts if h not in ("localhost", "127.0.0.1")]
    if verdict.kind != "node" or verdict.blamed_hosts or not remote:
        return verdict
    gone = unreachable(remote, port, connect)
    if not gone:
        return verdict
    return Verdict("node", verdict.exit_code, "host unreachable", tuple(gone),
                   f"fault: node {','.join(gone)}: host unreachable (no answer on port {port} after the ranks ended: "
                   f"{verdict.line.removeprefix('fault: ')})")


def _said(record: dict) -> str:
    """A rank's line without its `error: node fault: ` / `error: code fault: ` (the verdict says the kind)."""
    return record["line"].removeprefix("error: ").removeprefix(f"{record['kind']} fault: ")


def read_records(output_dir: Path) -> list[dict]:
    records = []
    directory = output_dir / FAULTS_DIR
    for path in sorted(directory.glob("rank-*.json")) if directory.is_dir() else ():
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return records


def record_in_line(line: str) -> dict | None:
    """The fault record a rank printed on a line of its output (watchdog.FAULT_LINE + JSON), wherever the launcher's
    prefix put it (horovodrun's `[1]<stderr>:`, mpirun's `[1,1]<stderr>:`), or None (pure)."""
    at = line.find(FAULT_LINE)
    if at < 0:
        return None
    try:
        record = json.loads(line[at + len(FAULT_LINE):])
    except ValueError:
        return None
    return record if isinstance(record, dict) and "rank" in record and "kind" in record else None


class FaultLines:
    """Copies the ranks' launcher's stderr to ours as it comes, keeping the fault records ranks print on it: they
    reach the launcher through horovodrun's output even when the share under OUTPUT_DIR does not answer."""

    def __init__(self, stream, out):
        self.records: dict[int, dict] = {}
        self._stream, self._out = stream, out
        self._thread = threading.Thread(target=self._copy, name="fault-lines", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        for raw in iter(self._stream.readline, b""):
            line = raw.decode("utf-8", "replace")
            try:
                self._out.write(line)
                self._out.flush()
            except (OSError, ValueError):
                pass
            record = record_in_line(line.rstrip("\n"))
            if record is not None:
                self.records[int(record["rank"])] = record

    def join(self, timeout: float = 10.0) -> list[dict]:
        self._thread.join(timeout)
        return [self.records[rank] for rank in sorted(self.records)]


def merged(lines: list[dict], shared: list[dict]) -> list[dict]:
    """Every rank's record once: the one its output carried, else the one on the share (pure)."""
    by_rank = {int(r["rank"]): r for r in shared}
    by_rank.update({int(r["rank"]): r for r in lines})
    return [by_rank[rank] for rank in sorted(by_rank)]


def clear(output_dir: Path) -> None:
    """Forget the previous attempt's fault records and signs of life (an attempt classifies only its own)."""
    for name in (FAULTS_DIR, ALIVE_DIR):
        directory = output_dir / name
        for path in directory.glob("*") if directory.is_dir() else ():
            path.unlink(missing_ok=True)


@dataclass
class Attempt:
    attempt: int
    started: float  # Unix seconds
    ended: float
    hosts: list[str]
    kind: str
    exit_code: int
    reason: str
    blamed_hosts: list[str] = field(default_factory=list)
    blamed_nodes: list[str] = field(default_factory=list)  # Batch node IDs taken out of scheduling
    kept_out: str = ""  # what taking them out did (or why it did not)
    node_hours: float = 0.0  # what the attempt cost, all its nodes, when it failed (0 when it succeeded)
    job: str = ""  # the Batch job (AZ_BATCH_JOB_ID) whose task this attempt was, "" outside Batch


def attempt_record(previous: int, started: float, ended: float, hosts: list[str], verdict: Verdict,
                   job: str = "") -> Attempt:
    """This attempt's line (pure): a failed attempt costs every node it held for its whole time."""
    cost = 0.0 if verdict.kind == "ok" else round(len(hosts) * (ended - started) / 3600, 4)
    return Attempt(previous + 1, round(started, 3), round(ended, 3), list(hosts), verdict.kind, verdict.exit_code,
                   verdict.reason, list(verdict.blamed_hosts), node_hours=cost, job=job)


def code_fault_before(previous: list[dict], job: str) -> dict | None:
    """The earlier attempt of this same Batch job that ended on a code/data fault, if any (pure).

    Batch retries a failed task up to maxTaskRetryCount whatever its exit code: the task's exitConditions choose
    only what happens to the job once the task has failed for good ("A Task is considered to have failed if it
    completes with a non-zero exit code and has exhausted its retry count": the Job's onTaskFailure, Batch REST
    spec 2025-06-01; ExitOptions has jobAction and dependencyAction, nothing on retries). So a retry of a code
    fault is refused here, by the task itself, before any rank starts: it costs the retry's start, not a run
    that fails the same way. Outside Batch (no job) nothing is refused: a person reruns after fixing the code."""
    if not job:
        return None
    for attempt in reversed(previous):
        if attempt.get("job") == job and attempt.get("kind") == "code":
            return attempt
    return None


def previous_attempts(output_dir: Path) -> list[dict]:
    path = output_dir / ATTEMPTS_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append(output_dir: Path, attempt: Attempt) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    with open(output_dir / ATTEMPTS_FILE, "a") as f:
        f.write(json.dumps(asdict(attempt)) + "\n")


def now() -> float:
    return time.time()


RECORD_PREFIX = "attempt-record: "  # the launcher's stdout lines that `status` reads back (record_line)


def record_line(attempt: dict) -> str:
    """One attempt as a line of the task's stdout (pure). Each attempt prints the earlier ones first (they are on
    the share, while a retry's stdout.txt starts empty, possibly on another node) and its own last, so the task's
    current stdout.txt holds the whole history for `python -m infra status`."""
    return RECORD_PREFIX + json.dumps(attempt, sort_keys=True)


def read_lines(stdout: str) -> list[dict]:
    """The attempts the launcher's stdout recorded, each once (by number), in order (pure)."""
    found: dict[int, dict] = {}
    for line in stdout.splitlines():
        if line.startswith(RECORD_PREFIX):
            try:
                record = json.loads(line.removeprefix(RECORD_PREFIX))
                found[int(record["attempt"])] = record
            except (ValueError, KeyError, TypeError):
                continue
    return [found[n] for n in sorted(found)]


def status_lines(stdout: str) -> list[str]:
    """What `status` says of each attempt: how it ended, the node it blamed and whether that node was taken out,
    why, and the node-hours a failure cost; with the total when any failed (pure)."""
    records = read_lines(stdout)
    lines = []
    for a in records:
        if a.get("kind") == "ok":
            lines.append(f"attempt {a['attempt']}: finished on {len(a.get('hosts') or [])} node(s)")
            continue
        if a.get("kind") == "stopped":
            lines.append(f"attempt {a['attempt']}: stopped from outside (a cancel, an eviction or the time limit); "
                         f"{a.get('node_hours', 0):.3f} node-hours")
            continue
        blamed = ", ".join(a.get("blamed_hosts") or []) or "no node named"
        nodes = f" (node {', '.join(a['blamed_nodes'])} taken out of scheduling)" if a.get("blamed_nodes") else ""
        lines.append(f"attempt {a['attempt']}: {a.get('kind')} fault ({a.get('reason')}, exit {a.get('exit_code')}); "
                     f"blamed: {blamed}{nodes}; cost {a.get('node_hours', 0):.3f} node-hours")
    lost = sum(a.get("node_hours", 0) for a in records if a.get("kind") != "ok")
    if lost:
        lines.append(f"failures cost {lost:.3f} node-hours in all")
    return lines

