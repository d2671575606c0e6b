"""Every node's GPUs looked at again at each attempt's start, before any rank starts.

The full node health checks (azurehpc-health-checks: infra/core/node_health.py) run in the pool's start task, on the
host, once per boot: they start their own privileged container and read the host's /opt/azurehpc, so they cannot run
inside the task's container, where an attempt starts. What can run there, on every node through the job's SSH, is the
driver's own view: `nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader` lists the GPUs the driver sees
(https://docs.nvidia.com/deploy/nvidia-smi/index.html), and a GPU that fell off the bus after boot (Xid 79) is
missing from it, or nvidia-smi fails. A node with fewer GPUs than the job's ranks per node is a node fault: the
attempt ends before training (exit EXIT_NODE_FAULT, `fault: node HOST: gpu check ...`) and the node is taken out
(keep_out.py), so the retry runs on others.

Only where this node has nvidia-smi (the GPU images; Batch makes the GPUs visible in the container itself): on CPU
(tests, the rehearsal) nothing is checked.
"""
from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Sequence

QUERY = ["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"]
TIMEOUT_S = 60
PARALLEL = 16  # nodes checked at once (each check is a few SSH commands)


def problem(rc: int, output: str, slots: int) -> str | None:
    """What is wrong with a node whose nvidia-smi answered (rc, output), for `slots` ranks on it; None when it sees
    enough GPUs (pure)."""
    if rc != 0:
        first = (output.strip().splitlines() or ["no output"])[0][:200]
        return f"nvidia-smi failed (exit {rc}: {first})"
    seen = [line for line in output.splitlines() if line.strip()]
    if len(seen) < slots:
        return f"the driver sees {len(seen)} GPU(s) for {slots} rank(s) (a GPU lost since boot?)"
    return None


def run_on(host: str, local: bool) -> tuple[int, str]:
    """nvidia-smi on `host`: here, or through the job's SSH (node-ssh's client config: its port and key)."""
    argv = QUERY if local else ["ssh", "-o", "ConnectTimeout=20", host, shlex.join(QUERY)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return 124, f"no answer within {TIMEOUT_S} s"
    except OSError as err:
        return 127, str(err)
    return done.returncode, done.stdout + done.stderr


def failing(hosts: Sequence[tuple[str, int]], is_local: Callable[[str], bool],
            run: Callable[[str, bool], tuple[int, str]] = run_on,
            deep: Callable[[str, bool], str | None] | None = None) -> list[tuple[str, str]]:
    """(host, what is wrong) for each of `hosts` ((name, ranks on it)) whose GPUs do not pass; `deep` (node_checks.check:
    ECC, retired pages, remapped rows, Xids, InfiniBand ports) looks further at each node whose driver sees them all."""
    def one(host: str, slots: int) -> str | None:
        wrong = problem(*run(host, is_local(host)), slots)
        if not wrong and deep:
            wrong = deep(host, is_local(host))
        return wrong

    # Every node at once (up to PARALLEL): one after another, 32 nodes x 4 commands over SSH of ~1 s each would hold
    # the attempt's start ~2 minutes, all nodes billing.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL, len(hosts)))) as pool:
        verdicts = list(pool.map(lambda hs: one(*hs), hosts))
    return [(host, wrong) for (host, _), wrong in zip(hosts, verdicts) if wrong]
