"""Nodes for the tests that run the job's own shell and sshd for real: the rehearsal's nodes
(devtools/rehearsal/nodes.py: own network, hostname, /run, /root and the image's users, never the host's), with
Batch's documented folders and variables (devtools/rehearsal/batch.py) and the scripts where Batch downloads them."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from devtools.rehearsal.batch import batch_env, task_folders
from devtools.rehearsal.nodes import BATCH_ROOT, IMAGE_USERS, ImageUsers, Node, Pool
from infra import REPO_ROOT
from infra.backends.batch import spec as batch_spec
from infra.core.containers import runtime_files

DEBS = REPO_ROOT / ".cache" / "debs" / "root"


def unavailable() -> str:
    """Why this machine cannot run such nodes, or ''."""
    if os.geteuid() != 0:
        return "the job's sshd logs in as root, as in the container, on nodes made of namespaces: needs root"
    probe = subprocess.run(["unshare", "--net", "--mount", "--uts", "true"], capture_output=True, text=True)
    return "" if probe.returncode == 0 else f"this machine cannot create namespaces ({probe.stderr.strip()})"


def image_env() -> dict[str, str]:
    """The image's environment as the rehearsal applies it: this Python first, Debian's unpacked OpenSSH."""
    if not (DEBS / "usr" / "sbin" / "sshd").exists():
        raise AssertionError("Debian's OpenSSH is not unpacked in .cache/debs: run `make setup`")
    return {"PATH": f"{Path(sys.executable).parent}:{DEBS}/usr/sbin:{DEBS}/usr/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LD_LIBRARY_PATH": f"{DEBS}/usr/lib/x86_64-linux-gnu:{DEBS}/lib/x86_64-linux-gnu", "HOME": "/root",
            "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


def pool(work: Path, count: int, users: ImageUsers = IMAGE_USERS) -> Pool:
    (work / "nfs").mkdir(parents=True, exist_ok=True)
    return Pool(work / "nodes", count, work / "nfs", batch_spec.NFS_MOUNT, users=users)


def download_scripts(node: Node, job: str) -> Path:
    """What Batch does before the coordination command: the `scripts` blobs (as `pulumi up` uploads them) into the
    node's task-shared folder, blob names kept. Returns that folder as the node sees it."""
    shared = task_folders(BATCH_ROOT, job, batch_spec.TASK_ID)["AZ_BATCH_TASK_SHARED_DIR"]
    for blob, source in runtime_files().items():
        target = node.host_path(shared / blob)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    node.host_path(task_folders(BATCH_ROOT, job, batch_spec.TASK_ID)["AZ_BATCH_TASK_WORKING_DIR"]).mkdir(exist_ok=True)
    return shared


def env(nodes: Pool, node: Node, job: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Everything a task command of `node` gets: the image's environment, Batch's variables, `extra` (the task's)."""
    addresses = [n.address for n in nodes.nodes]
    return {**image_env(), **(extra or {}), **batch_env(BATCH_ROOT, addresses, node.index, job, batch_spec.TASK_ID)}


def run(nodes: Pool, node: Node, command_line: str, environment: dict[str, str], cwd: Path,
        timeout: float = 120) -> subprocess.CompletedProcess:
    """A Batch command line on `node`: split into words, no shell of Batch's own, as Batch runs it."""
    return subprocess.run(nodes.command(node, shlex.split(command_line), cwd), env=environment, capture_output=True,
                          text=True, timeout=timeout)
