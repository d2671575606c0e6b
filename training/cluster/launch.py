"""`python -m training launch [OPTIONS] -- TRAIN_FLAGS`: start `python -m training train` on every GPU of
every node, with horovodrun.

Hosts come from `--hosts host:slots,...`, or, inside an Azure Batch multi-instance task, from
AZ_BATCH_HOST_LIST (the nodes Batch gave the task) with `--slots` processes per node (the job passes
the node size's GPU count). Between nodes Horovod runs over MPI where mpirun is installed, as in the images
(mpirun reaches the other nodes' sshd on `--ssh-port`, NCCL carries the gradients over InfiniBand), else with
its Gloo controller over the same SSH; on one machine it uses Gloo.

Examples:
  python -m training launch --hosts localhost:2 -- --data synthetic --image-size 64 --steps 20 --output-dir /tmp/run
  python -m training launch --slots 8 --ssh-port 2222 -- --data /mnt/data/imagenet --output-dir /mnt/data/runs/r1
  python -m training launch --hosts 10.0.0.4:8,10.0.0.5:8 --dry-run -- --epochs 90
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from training.errors import UsageError

LOCAL_NAMES = ("localhost", "127.0.0.1")
# Environment the remote ranks need too: mpirun forwards these by name (-x), values never on the command line.
FORWARDED_PREFIXES = ("NCCL_", "UCX_", "HOROVOD_", "PYTHON", "OMP_", "TF_", "CUDA_")


@dataclass(frozen=True)
class Host:
    name: str
    slots: int


def parse_hosts(text: str) -> list[Host]:
    hosts = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, slots = item.partition(":")
        if not name or not slots.isdigit() or int(slots) < 1:
            raise UsageError(f"--hosts: {item!r} is not HOST:SLOTS with SLOTS >= 1, e.g. localhost:2 or 10.0.0.4:8")
        hosts.append(Host(name, int(slots)))
    if not hosts:
        raise UsageError("--hosts is empty; give HOST:SLOTS[,HOST:SLOTS...], e.g. localhost:2")
    if len({h.name for h in hosts}) != len(hosts):
        raise UsageError(f"--hosts names a host twice: {text}")
    return hosts


def hosts_from_batch(env: Mapping[str, str], slots: int) -> list[Host]:
    """The nodes of a Batch multi-instance task: AZ_BATCH_HOST_LIST is their comma-separated IPs."""
    listed = env.get("AZ_BATCH_HOST_LIST", "")
    if not listed:
        raise UsageError("no hosts: pass --hosts HOST:SLOTS,... or run inside an Azure Batch multi-instance task "
                         "(which sets AZ_BATCH_HOST_LIST)")
    return [Host(ip.strip(), slots) for ip in listed.split(",") if ip.strip()]


def build_command(hosts: list[Host], train_flags: list[str], *, python: str, horovodrun: str, ssh_port: int | None,
                  env_names: list[str], controller: str | None = None, has_mpi: bool = True) -> list[str]:
    """The horovodrun command line (pure): one rank per slot, `python -m training train FLAGS` each. Across
    nodes MPI where Open MPI is installed (the images), else Horovod's Gloo controller, which starts the remote
    ranks over the same SSH."""
    local = all(h.name in LOCAL_NAMES for h in hosts)
    controller = controller or ("gloo" if local or not has_mpi else "mpi")
    command = [horovodrun, f"--{controller}", "-np", str(sum(h.slots for h in hosts)),
               "-H", ",".join(f"{h.name}:{h.slots}" for h in hosts)]
    if ssh_port and not local:
        command += ["-p", str(ssh_port)]
    forwarded = sorted(name for name in env_names if name.startswith(FORWARDED_PREFIXES))
    if controller == "mpi" and forwarded:
        command += ["--mpi-args", " ".join(f"-x {name}" for name in forwarded)]
    return command + [python, "-m", "training", "train", *train_flags]


def _horovodrun() -> str:
    beside = Path(sys.executable).parent / "horovodrun"  # the one in this environment, not another on PATH
    return str(beside) if beside.exists() else "horovodrun"


def main(argv: list[str]) -> int:
    if "--" in argv:
        split = argv.index("--")
        argv, train_flags = argv[:split], argv[split + 1:]
    else:
        train_flags = []
    parser = argparse.ArgumentParser(prog="python -m training launch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", help="HOST:SLOTS[,HOST:SLOTS...] (default: AZ_BATCH_HOST_LIST with --slots each)")
    parser.add_argument("--slots", type=int, default=1, help="processes per Batch node: its GPU count (default: 1)")
    parser.add_argument("--ssh-port", type=int, default=None, help="port of the other nodes' sshd (default: 22)")
    parser.add_argument("--controller", choices=("gloo", "mpi"), default=None,
                        help="Horovod controller (default: gloo on one machine; across nodes mpi where "
                             "mpirun is installed, else gloo)")
    parser.add_argument("--dry-run", action="store_true", help="print the command and exit")
    args = parser.parse_args(argv)
    if args.slots < 1:
        raise UsageError("--slots must be at least 1")
    if not train_flags:
        raise UsageError("no training flags after `--`; e.g. -- --data synthetic --steps 20 --output-dir OUT")
    hosts = parse_hosts(args.hosts) if args.hosts else hosts_from_batch(os.environ, args.slots)
    command = build_command(hosts, train_flags, python=sys.executable, horovodrun=_horovodrun(),
                            ssh_port=args.ssh_port, env_names=list(os.environ), controller=args.controller,
                            has_mpi=shutil.which("mpirun") is not None)
    ranks = sum(h.slots for h in hosts)
    print(f"launch: {ranks} ranks on {len(hosts)} host(s): {shlex.join(command)}", file=sys.stderr, flush=True)
    if args.dry_run:
        return 0
    os.execvp(command[0], command)  # a path with a slash is used as is, a bare name is looked up on PATH
    return 0  # not reached: exec replaces this process, so signals reach horovodrun directly
