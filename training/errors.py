"""The trainer's errors, and the exit codes that tell a node fault from a code or data fault, in one place.

A node fault (a health check failed, a rank's host stopped or became unreachable, a collective hung, the GPU
errors the health checks name) is worth a retry on other nodes; a fault of the code or the data (a Python
exception in the loop, a bad dataset, bad flags) fails the same way on any node, so retrying it only bills.
Every process that decides (a rank, the watchdog, the launcher) exits with one of these codes, and the job's
spec maps them (infra/backends/batch/spec.py, `exitConditions`)."""
from __future__ import annotations

EXIT_RUN_STOPPED = 1  # RunStopped: the run stopped itself (an interconnect below its floor), said in one line
EXIT_USAGE = 2  # UsageError: bad input a user can fix (flags, a dataset that is not one): a code/data fault
EXIT_CODE_FAULT = 65  # a Python exception in the loop, a bad dataset: not retried (sysexits' EX_DATAERR)
EXIT_NODE_FAULT = 75  # a node failed: retry on other nodes (sysexits' EX_TEMPFAIL: "try again later")
EXIT_HANG = 76  # the progress watchdog (training/watchdog.py): no step within its bound; a node fault too

NODE_FAULT_CODES = (EXIT_NODE_FAULT, EXIT_HANG)
CODE_FAULT_CODES = (EXIT_USAGE, EXIT_CODE_FAULT)


def kind_of(code: int) -> str:
    """'node', 'code' or 'ok' for a process's exit code; anything else non-zero is 'unknown' (a rank killed by a
    signal, a launcher that failed before any rank ran)."""
    if code == 0:
        return "ok"
    if code in NODE_FAULT_CODES:
        return "node"
    if code in CODE_FAULT_CODES:
        return "code"
    return "unknown"


class UsageError(Exception):
    """Bad input a user can fix: shown as one line (`error: ...`), exit status 2, no traceback."""


class AccessRefused(UsageError):
    """An Azure data plane answered 403: a firewall without this machine's address, or an identity without the
    role (which may just have been granted: role assignments take up to 30 minutes to take effect)."""


class RunStopped(Exception):
    """A run that stops itself before training for a reason rank 0 has already printed in one line (an
    interconnect below its floor): exit status 1, no traceback, nothing more printed."""
