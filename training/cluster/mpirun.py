"""What Open MPI's mpirun says when it ends a job because a rank died, turned into the host to blame.

Under `horovodrun --mpi` a rank killed by a signal (the OOM killer, a kill, a crash) ends the whole job at once:
mpirun kills every other rank itself, before any can notice its peer is gone and write a fault record
(training/watchdog.py), so the attempt's verdict (training/cluster/attempts.py) would name no host. mpirun names it
instead, on its stderr, which `launch` relays (its help text `orterun:proc-aborted-strsignal`; the line below as
Debian's Open MPI 4.1.4 printed it in the container rehearsal, tests/devtools/rehearsal/test_rehearsal_container.py):

    mpirun noticed that process rank 3 with PID 1234 on node tvm-2 exited on signal 9 (Killed).

The node there is the name the node's daemon reports (its hostname, not the address `-H` gave), which another node
may not resolve (a container's /etc/hosts knows only its own node), so the host is found from the rank instead:
horovodrun runs mpirun with `-map-by slot` unless given binding arguments (horovod/runner/mpi_run.py
_NO_BINDING_ARGS), which places ranks in `-H` order, each host's slots filled first
(https://docs.open-mpi.org/en/v5.0.x/launching-apps/scheduling.html, "--map-by slot"; the same rule the rehearsal's
placement reads). A rank killed by a signal is a node fault, as on the Gloo path (attempts.classify: a rank gone
without a word).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from training.cluster.attempts import Verdict
from training.errors import EXIT_NODE_FAULT

SIGNALLED = re.compile(r"noticed that process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)"
                       r"(?: \(([^)]*)\))?")


@dataclass(frozen=True)
class Signalled:
    rank: int
    node: str  # as mpirun names it
    signal: int
    name: str  # "Killed", "Segmentation fault", ...


def signalled(text: str) -> Signalled | None:
    """mpirun's notice of a rank ended by a signal, in a line or a few joined (show_help may wrap), or None (pure)."""
    found = SIGNALLED.search(" ".join(text.split()))
    if not found:
        return None
    return Signalled(int(found[1]), found[2], int(found[3]), found[4] or "")


def host_of_rank(hosts: Sequence[tuple[str, int]], rank: int) -> str | None:
    """The host of `rank` under `-map-by slot`: (name, slots) in -H order, each filled first (pure)."""
    first = 0
    for name, slots in hosts:
        if rank < first + slots:
            return name
        first += slots
    return None


def blame_signalled(verdict: Verdict, notice: Signalled | None, hosts: Sequence[tuple[str, int]]) -> Verdict:
    """A node fault that named no host, with the host of the rank mpirun saw end on a signal named (pure)."""
    if verdict.kind != "node" or verdict.blamed_hosts or notice is None:
        return verdict
    host = host_of_rank(hosts, notice.rank)
    if host is None:
        return verdict
    what = f"signal {notice.signal}" + (f" ({notice.name})" if notice.name else "")
    return Verdict("node", EXIT_NODE_FAULT, "rank killed", (host,),
                   f"fault: node {host}: rank {notice.rank} ended by {what} (mpirun: on node {notice.node}), and "
                   "mpirun ended the others")


class Watch:
    """A stream for attempts.FaultLines' copy of the launcher's stderr: writes through, and keeps mpirun's notice of
    a rank ended by a signal (the lines around it too, as show_help may wrap it)."""

    def __init__(self, out):
        self._out = out
        self._recent: list[str] = []
        self.notice: Signalled | None = None

    def write(self, text: str) -> int:
        if self.notice is None and text.strip():
            self._recent = [*self._recent[-2:], text]
            self.notice = signalled(" ".join(self._recent))
        return self._out.write(text)

    def flush(self) -> None:
        self._out.flush()
