"""`python -m training node-ssh`: the SSH that mpirun/horovodrun need between the nodes of one Batch job.

Run by the job's coordination command on every node, inside the training container, before the primary's
application command starts. Batch sets up SSH between nodes only on the host for pool user accounts with a
key, never inside a container, so the job brings its own:

- The primary (AZ_BATCH_IS_CURRENT_NODE_MASTER=true) generates a key pair for this attempt of this job in its
  task-shared directory. The private key never leaves that node; the public key is published on the NFS share
  (`--keys-dir`, root only), the one place every node of the job sees.
- Every node starts an sshd of its own: key only (no passwords, no PAM), root by key, on `--port`, bound to the
  node's own address from AZ_BATCH_HOST_LIST (never 0.0.0.0), with a host key made for this task. It reads the
  published public key at each login (`AuthorizedKeysFile` on the share), so there is nothing to wait for:
  Batch starts the application command only after every node's coordination command has finished
  (https://learn.microsoft.com/azure/batch/batch-mpi#multi-instance-tasks).
- The primary writes the ssh client config mpirun uses: the port, the job's key, and host keys accepted for the
  job's hosts only, into a known_hosts file of this task. It goes to ~/.ssh/config of the home in the user's passwd
  entry, not $HOME: OpenSSH's ssh reads its per-user file ~/.ssh/config (ssh_config(5),
  https://man.openbsd.org/ssh_config) from `getpwuid(getuid())->pw_dir` and ignores $HOME (ssh.c's
  process_config_files, https://github.com/openssh/openssh-portable/blob/V_9_2_P1/ssh.c), so a task whose HOME
  is another folder would write a config that no ssh of horovodrun/mpirun reads ("SSH was not successful").

Batch variables used (https://learn.microsoft.com/azure/batch/batch-compute-node-environment-variables):
AZ_BATCH_HOST_LIST (comma-separated IPs of the task's nodes), AZ_BATCH_IS_CURRENT_NODE_MASTER,
AZ_BATCH_TASK_SHARED_DIR (the same path on every node of a multi-instance task; it is the task folder, so this
task's files live in its ssh/).

When sshd cannot start (e.g. the image lacks its privilege-separation user `sshd`), node-ssh ends with one line
naming sshd's own message and the fix, and exit code 2.

Examples:
  python -m training node-ssh --port 2222 --keys-dir /mnt/nfs/.jobs/JOB
  python -m training node-ssh --port 2222 --keys-dir /tmp/keys --no-start   # write the files only
  python -m training node-ssh --port 2222 --keys-dir /mnt/nfs/.jobs/JOB --client-only   # the application command's
"""
from __future__ import annotations

import argparse
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from training.errors import UsageError

AUTHORIZED_KEYS = "authorized_keys"
SSHD = shutil.which("sshd", path=os.environ.get("PATH", "") + ":/usr/sbin") or "/usr/sbin/sshd"
READY_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class NodeSsh:
    """Where one node's SSH files live, and what it needs to know about the job."""

    ssh_dir: Path  # this task's own files (host key, sshd config, the primary's key pair, known_hosts)
    keys_dir: Path  # on the shared NFS: the published public key
    address: str  # this node's address, from AZ_BATCH_HOST_LIST
    hosts: tuple[str, ...]
    port: int
    primary: bool

    @property
    def identity(self) -> Path:
        return self.ssh_dir / "id_ed25519"

    @property
    def host_key(self) -> Path:
        return self.ssh_dir / "ssh_host_ed25519_key"


def sshd_config(node: NodeSsh) -> str:
    """Key-only sshd on the node's own address. StrictModes is off because the authorized keys live under
    Batch's mount folder, whose parent modes Batch owns; the file itself is written 0600 in a 0700 folder."""
    return "\n".join([
        f"Port {node.port}",
        f"ListenAddress {node.address}",
        f"HostKey {node.host_key}",
        f"PidFile {node.ssh_dir / 'sshd.pid'}",
        f"AuthorizedKeysFile {node.keys_dir / AUTHORIZED_KEYS}",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "AllowUsers root",
        "PermitUserEnvironment no",
        "StrictModes no",
        "UsePAM no",
        "X11Forwarding no",
        "",
    ])


def ssh_client_config(node: NodeSsh) -> str:
    """The client side mpirun's ssh reads (~/.ssh/config): this job's hosts only."""
    return "\n".join([
        f"Host {' '.join(node.hosts)}",
        f"  Port {node.port}",
        "  User root",
        f"  IdentityFile {node.identity}",
        "  IdentitiesOnly yes",
        "  BatchMode yes",
        "  StrictHostKeyChecking accept-new",
        f"  UserKnownHostsFile {node.ssh_dir / 'known_hosts'}",
        "",
    ])


def own_address(hosts: tuple[str, ...], can_bind=None) -> str:
    """The one address of the host list that belongs to this machine (binding to it succeeds only here)."""
    can_bind = can_bind or _can_bind
    mine = [host for host in hosts if can_bind(host)]
    if len(mine) != 1:
        raise UsageError(f"AZ_BATCH_HOST_LIST {','.join(hosts)}: expected exactly one address of this node in it, "
                         f"found {mine or 'none'}")
    return mine[0]


def _can_bind(address: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
            return True
        except OSError:
            return False


def node_from_env(env: Mapping[str, str], port: int, keys_dir: Path) -> NodeSsh:
    hosts = tuple(h.strip() for h in env.get("AZ_BATCH_HOST_LIST", "").split(",") if h.strip())
    if not hosts:
        raise UsageError("AZ_BATCH_HOST_LIST is not set: node-ssh runs in an Azure Batch multi-instance task")
    shared = env.get("AZ_BATCH_TASK_SHARED_DIR")
    if not shared:
        raise UsageError("AZ_BATCH_TASK_SHARED_DIR is not set: node-ssh runs in an Azure Batch multi-instance task")
    return NodeSsh(ssh_dir=Path(shared) / "ssh", keys_dir=keys_dir, address=own_address(hosts), hosts=hosts,
                   port=port, primary=env.get("AZ_BATCH_IS_CURRENT_NODE_MASTER", "").lower() == "true")


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(text)
    os.replace(tmp, path)  # atomic: a reader sees the old file or the new one, never half of one


def _keygen(path: Path, comment: str) -> None:
    if path.exists():
        return
    try:
        made = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
    except FileNotFoundError:
        raise UsageError("ssh-keygen is not installed: the image needs openssh-client (apt-get install "
                         "openssh-client)") from None
    if made.returncode != 0:
        raise UsageError(f"ssh-keygen could not write {path} (exit {made.returncode}): {_last_line(made.stderr)}")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


# What sshd prints when it cannot start, and the fix, for the causes a job can meet.
PRIVSEP_USER_MISSING = "Privilege separation user sshd does not exist"
SSHD_FIXES = {
    PRIVSEP_USER_MISSING: "the image needs sshd's privilege-separation user: install openssh-server with apt-get "
                          "(its postinst adds the user) or add `useradd --system --no-create-home --home-dir /run/sshd "
                          "--shell /usr/sbin/nologin sshd` to the Dockerfile",
    "Address already in use": "another process holds the port on this address (a previous attempt's sshd?): stop "
                              "it, or give node-ssh another --port",
}


def sshd_failure(stderr: str, code: int) -> str:
    """One line for an sshd that exited without starting: its own message and, where known, the fix."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for cause, fix in SSHD_FIXES.items():
        for line in lines:
            if cause in line:
                return f"sshd did not start (exit {code}): {line}; {fix}"
    return f"sshd did not start (exit {code}): {lines[-1] if lines else 'no message'}"


def ssh_home() -> Path:
    """The home OpenSSH's ssh takes ~/.ssh/config from: this user's passwd entry's, whatever $HOME says
    (see the module's docstring)."""
    return Path(pwd.getpwuid(os.getuid()).pw_dir)


def write_client_config(node: NodeSsh, home: Path) -> None:
    """The primary's ssh client config (the job's port, key and known hosts) under `home`, from the key the
    coordination command made in the task-shared folder."""
    client_dir = home / ".ssh"
    client_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _write_private(client_dir / "config", ssh_client_config(node))


def client_only(node: NodeSsh, home: Path) -> None:
    """`--client-only`: the client config again, in the application command's own container. Whether Batch runs a
    multi-instance task's coordination and application commands in one container its docs do not say
    (devtools/rehearsal/containers.py); when it does not, the config the coordination command wrote under the
    container's own home is not there, and only the Batch folders (the task-shared one, with the job's key) are."""
    if not node.primary:
        raise UsageError("--client-only is for the primary (AZ_BATCH_IS_CURRENT_NODE_MASTER=true), which launches")
    if not node.identity.exists():
        raise UsageError(f"no job key at {node.identity}: the coordination command (node-ssh without --client-only) "
                         "makes it on the primary first")
    write_client_config(node, home)


def prepare(node: NodeSsh, home: Path) -> None:
    """Write every file this node needs; the primary also makes and publishes the job's key."""
    node.ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _keygen(node.host_key, f"host {node.address}")
    _write_private(node.ssh_dir / "sshd_config", sshd_config(node))
    if node.primary:
        node.keys_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(node.keys_dir, 0o700)
        _keygen(node.identity, "job key")
        # Replaces a previous attempt's key: only this attempt's primary can log in.
        _write_private(node.keys_dir / AUTHORIZED_KEYS, node.identity.with_suffix(".pub").read_text())
        write_client_config(node, home)


def start(node: NodeSsh, sshd: str = SSHD) -> None:
    """Start sshd (it detaches) and return once it accepts connections."""
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation folder
    try:
        # sshd reports a failure to start on stderr, then detaches from it (its stdio goes to /dev/null) once up.
        started = subprocess.run([sshd, "-f", str(node.ssh_dir / "sshd_config")], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=READY_TIMEOUT_S)
    except FileNotFoundError:
        raise UsageError(f"sshd is not installed at {sshd}: the image needs openssh-server (apt-get install "
                         "openssh-server), or pass --sshd PATH") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"sshd did not detach within {READY_TIMEOUT_S:.0f} s; see the task's stderr") from None
    if started.returncode != 0:
        raise UsageError(sshd_failure(started.stderr, started.returncode))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            socket.create_connection((node.address, node.port), timeout=2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise UsageError(f"sshd on {node.address}:{node.port} did not accept connections within "
                                 f"{READY_TIMEOUT_S:.0f} s; see the task's stderr") from None
            time.sleep(0.2)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m training node-ssh", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="port of the job's sshd on every node")
    parser.add_argument("--keys-dir", type=Path, required=True,
                        help="folder on the shared NFS where the primary publishes the job's public key")
    parser.add_argument("--home", type=Path, default=None,
                        help="home whose .ssh/config the job's ssh reads (default: this user's home in its passwd "
                             "entry, where OpenSSH reads it; not $HOME, which OpenSSH ignores)")
    parser.add_argument("--sshd", default=SSHD, help=f"the sshd binary (default: {SSHD})")
    parser.add_argument("--no-start", action="store_true", help="write the files, do not start sshd")
    parser.add_argument("--client-only", action="store_true",
                        help="on the primary, write only the ssh client config, from the job key the coordination "
                             "command made (the application command runs this first: its container may be another)")
    args = parser.parse_args(argv)
    node = node_from_env(os.environ, args.port, args.keys_dir)
    if args.client_only:
        client_only(node, args.home or ssh_home())
        print(f"node-ssh: primary {node.address}: ssh client config for hosts {','.join(node.hosts)}", file=sys.stderr,
              flush=True)
        return 0
    prepare(node, args.home or ssh_home())
    if not args.no_start:
        start(node, args.sshd)
    role = "primary" if node.primary else "node"
    print(f"node-ssh: {role} {node.address}: sshd on port {node.port} for hosts {','.join(node.hosts)}",
          file=sys.stderr, flush=True)
    return 0
