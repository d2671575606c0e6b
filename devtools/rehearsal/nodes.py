"""Local stand-ins for a Batch pool's nodes: one set of Linux namespaces per node, joined by a bridge.

Each node gets what a Batch node (and the job's container on it) has and the job relies on:
- its own IP address on a private subnet (a veth named eth0 in the node's namespace; the bridge is the "VNet"),
  its own hostname resolving to that address (as Azure's DNS does for a VM), so `node-ssh` finds its address
  by binding and Horovod's rendezvous reaches the other node by address, never by a shared loopback;
- its own Batch folder tree at the same path on every node (AZ_BATCH_NODE_ROOT_DIR: a per-node folder
  bind-mounted at BATCH_ROOT), with the pool's NFS mount (the export folder at $AZ_BATCH_NODE_MOUNTS_DIR/<mount>);
- the users of the job's image, not the host's: /etc/passwd, /etc/group and /etc/shadow are the image's
  (IMAGE_USERS), so a machine that has, or lacks, a user (sshd's privilege-separation user, say) runs the same;
- its own /run (where sshd wants /run/sshd), /mnt and /root (the host's /root read through an overlay whose
  writes, such as the job's ~/.ssh/config, stay the node's): a container has its own, and the host keeps its own.
A node is one mount, UTS and network namespace, held by a small process for the pool's life (as a container is
held by its init); every command of the node joins them (`nsenter`), so its processes, and the sessions its sshd
opens, see exactly that node, and nothing of the host's folders or users is changed. Needs root (namespaces,
mounts, and the job's sshd logs in as root, as in the container).
"""
from __future__ import annotations

import ipaddress
import itertools
import os
import select
import shlex
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

# AZ_BATCH_NODE_ROOT_DIR on every node: a Linux node with a local temporary disk, as the GPU sizes have
# (https://learn.microsoft.com/azure/batch/files-and-directories, "Batch root directory location").
BATCH_ROOT = Path("/mnt/batch")
# The node's own temporary folder, on its private /mnt: a node's processes get TMPDIR here (devtools/rehearsal/run.py)
# so that what they leave behind (multiprocessing's pymp-* folders of a rank killed by a fault or a cancel) goes with
# the node, as a real node's /tmp does. Not a tmpfs over /tmp: the checkout, its environments and the rehearsal's
# folder may themselves live under the host's /tmp (CI clones there).
NODE_TMPDIR = Path("/mnt/tmp")
READY_TIMEOUT_S = 30
_POOL_NUMBERS = itertools.count()  # this process's pools, in order: each pool's names are its own


# The folders of a node and of a task, as Batch documents them relative to AZ_BATCH_NODE_ROOT_DIR (the tables
# "Environment variables related to directory location" and "Task environment variables related to directory
# location" in https://learn.microsoft.com/azure/batch/batch-compute-node-environment-variables, and
# https://learn.microsoft.com/azure/batch/files-and-directories): the task-shared folder IS the task folder.
def node_folders(root: Path) -> dict[str, Path]:
    return {"AZ_BATCH_NODE_ROOT_DIR": root, "AZ_BATCH_NODE_SHARED_DIR": root / "shared",
            "AZ_BATCH_NODE_STARTUP_DIR": root / "startup", "AZ_BATCH_NODE_MOUNTS_DIR": root / "fsmounts"}


def task_folders(root: Path, job_id: str, task_id: str) -> dict[str, Path]:
    task_dir = root / "workitems" / job_id / "job-1" / task_id  # a job's folder is workitems/{job}/job-1
    return {"AZ_BATCH_TASK_DIR": task_dir, "AZ_BATCH_TASK_SHARED_DIR": task_dir,
            "AZ_BATCH_TASK_WORKING_DIR": task_dir / "wd"}


@dataclass(frozen=True)
class ImageUsers:
    """/etc/passwd, /etc/group and /etc/shadow as the job's image has them."""

    passwd: str
    group: str
    shadow: str

    def without(self, name: str) -> "ImageUsers":
        """The same without user (and group) `name`: an image that lacks it."""
        def drop(text: str) -> str:
            return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(f"{name}:"))
        return ImageUsers(drop(self.passwd), drop(self.group), drop(self.shadow))


# The users of the training images (images/*.Dockerfile: Ubuntu bases, openssh-server installed with apt),
# abridged to the names a job's tools look up. Ubuntu's root file system starts from base-passwd's
# /usr/share/base-passwd/passwd.master and group.master (root, daemon, bin, sys, ..., nobody/nogroup); Ubuntu's
# images since 23.04 add `ubuntu` (1000); and openssh-server's postinst adds sshd's privilege-separation user,
# `adduser --system --no-create-home --home /run/sshd --shell /usr/sbin/nologin sshd` (a system uid, group
# nogroup; read in the Debian package's postinst, which Ubuntu's follows). sshd refuses to start as root without
# it ("Privilege separation user sshd does not exist").
IMAGE_USERS = ImageUsers(
    passwd="root:x:0:0:root:/root:/bin/bash\n"
           "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
           "bin:x:2:2:bin:/bin:/usr/sbin/nologin\n"
           "sys:x:3:3:sys:/dev:/usr/sbin/nologin\n"
           "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
           "ubuntu:x:1000:1000:Ubuntu:/home/ubuntu:/bin/bash\n"
           "sshd:x:100:65534::/run/sshd:/usr/sbin/nologin\n",
    group="root:x:0:\ndaemon:x:1:\nbin:x:2:\nsys:x:3:\nadm:x:4:ubuntu\ntty:x:5:\nnogroup:x:65534:\nubuntu:x:1000:\n",
    # `*` and `!`: no password to log in with (the job's sshd takes keys only); not locked for key logins.
    shadow="root:*:19800:0:99999:7:::\ndaemon:*:19800:0:99999:7:::\nbin:*:19800:0:99999:7:::\n"
           "sys:*:19800:0:99999:7:::\nnobody:*:19800:0:99999:7:::\nubuntu:!:19800:0:99999:7:::\n"
           "sshd:!:19800::::::\n",
)


class RehearsalUnavailable(RuntimeError):
    """This machine cannot host the rehearsal's nodes; `str()` says why and what to do."""


@dataclass(frozen=True)
class Node:
    index: int  # 0 is the primary
    namespace: str  # a name for the node's namespaces in messages (they are unnamed: nothing in /run/netns)
    address: str
    hostname: str
    home: Path  # this node's folders on the host: batch/ (its Batch tree), etc/ (its users), root/ (its /root writes)

    @property
    def batch_root(self) -> Path:
        """The node's Batch tree as the rehearsal (outside the node) sees it."""
        return self.home / "batch"

    @property
    def etc(self) -> Path:
        """The files the node sees in place of the host's /etc/passwd, group, shadow and hosts."""
        return self.home / "etc"

    def host_path(self, node_path: str | Path) -> Path:
        """Where a path under BATCH_ROOT on the node is on the host."""
        return self.batch_root / Path(node_path).relative_to(BATCH_ROOT)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class Pool:
    """`count` nodes on 10.<x>.<y>.0/24 behind bridge `name`; `export` is the NFS share every node mounts."""

    def __init__(self, work: Path, count: int, export: Path, mount_name: str, users: ImageUsers = IMAGE_USERS,
                 join_net=None):
        """`join_net(node)`, when given, returns the pid of a process whose network namespace becomes the node's
        (the node's container anchor, devtools/rehearsal/containers.py: the task containers join it as their
        `host` network); that process is part of the node, not of its tasks, so `kill` spares it."""
        if os.geteuid() != 0:
            raise RehearsalUnavailable("the rehearsal needs root: network namespaces, bind mounts, and the job's "
                                       "sshd logs in as root as it does in the container (run it as root)")
        for tool in ("ip", "unshare", "nsenter", "mount", "taskset"):
            if not shutil.which(tool):
                raise RehearsalUnavailable(f"`{tool}` is not installed (iproute2 / util-linux)")
        if any(ch in str(work.resolve()) for ch in ",:\\"):
            raise RehearsalUnavailable(f"--work {work}: the nodes' folders go into an overlay mount's options, which "
                                       "cannot hold ',', ':' or '\\'; name a folder without them")
        self.users = users
        self.join_net = join_net
        self.kept: dict[int, int] = {}  # node index -> the process whose network namespace the node joined
        self.holders: dict[int, subprocess.Popen] = {}  # node index -> the process holding its namespaces
        self.net_ids: dict[int, tuple[int, int] | None] = {}  # node index -> its network namespace's identity
        # Names unique to this pool, not only to this process: a pool's links must never meet those of the pool
        # before it in the same process (the CI met "RTNETLINK answers: File exists" from one that had been closed).
        # "dlr" + 5 + "x" + 2 + "v" + node index stays within Linux's 15 characters for an interface name.
        self.tag = f"{os.getpid() % 100000}x{next(_POOL_NUMBERS) % 100}"
        self.bridge = f"dlr{self.tag}"
        octet = 100 + os.getpid() % 150
        self.subnet = ipaddress.IPv4Network(f"10.{octet}.{os.getpid() % 250}.0/24")
        self.gateway = str(self.subnet[1])
        self.export, self.mount_name = export, mount_name
        # Where the pool's mount appears on a node: "All file systems are mounted relative to the Batch mounts
        # directory, accessible via the AZ_BATCH_NODE_MOUNTS_DIR environment variable" (NfsMountConfiguration
        # .relativeMountPath, https://learn.microsoft.com/rest/api/batchservice/pool/add).
        self.mount_point = node_folders(BATCH_ROOT)["AZ_BATCH_NODE_MOUNTS_DIR"] / mount_name
        self.nodes = [Node(i, f"dlr{self.tag}-n{i}", str(self.subnet[10 + i]), f"node{i}", work / f"node{i}")
                      for i in range(count)]

    def __enter__(self) -> "Pool":
        try:
            self._create()
        except subprocess.CalledProcessError as err:
            self.close()
            raise RehearsalUnavailable(f"cannot create the nodes' network namespaces ({' '.join(err.cmd)}: "
                                       f"{err.stderr.strip() or err.returncode})") from None
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _create(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for node in self.nodes:
            self._write_node_files(node)
            holder = self.holders[node.index] = self._hold(node)
            self.net_ids[node.index] = _net_id(holder.pid)
            # The node's NIC: a veth whose other end is on the bridge (unnamed namespaces: nothing in /run/netns).
            peer = self.host_link(node)
            _ip("link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", str(holder.pid))
            _ip("link", "set", peer, "master", self.bridge, "up")
            for args in (("addr", "add", f"{node.address}/{self.subnet.prefixlen}", "dev", "eth0"),
                         ("link", "set", "eth0", "up"), ("link", "set", "lo", "up")):
                subprocess.run(["nsenter", "--target", str(holder.pid), "--net", "ip", *args], capture_output=True,
                               text=True, check=True)

    def _write_node_files(self, node: Node) -> None:
        for folder in ("batch", "etc", "root", "root-work"):
            (node.home / folder).mkdir(parents=True, exist_ok=True)
        node.host_path(self.mount_point).mkdir(parents=True, exist_ok=True)
        # The node's name resolves to its address; its users are the image's.
        files = {"hosts": (f"127.0.0.1 localhost\n{node.address} {node.hostname}\n", 0o644),
                 "passwd": (self.users.passwd, 0o644), "group": (self.users.group, 0o644),
                 "shadow": (self.users.shadow, 0o600)}
        for name, (text, mode) in files.items():
            (node.etc / name).write_text(text)
            (node.etc / name).chmod(mode)

    def _hold(self, node: Node) -> subprocess.Popen:
        """Start the process that holds the node's namespaces, with its mounts made; returns once they are.

        /run first, so that `mount` keeps its own bookkeeping (/run/mount) in the node too; `-n` everywhere, so it
        writes none elsewhere. The holder ends with the pool, or with this process if it dies first."""
        q = shlex.quote
        mounts = [
            "mount -n -t tmpfs -o mode=0755 tmpfs /run",
            "mount -n -t sysfs sysfs /sys",  # /sys/class/net of the node's network, as `ip netns exec` gives
            "mount -n -t tmpfs -o mode=0755 tmpfs /mnt",
            f"mkdir -m 1777 {q(str(NODE_TMPDIR))}",
            f"mkdir -p {q(str(BATCH_ROOT))}",
            f"mount -n --bind {q(str(node.batch_root))} {q(str(BATCH_ROOT))}",
            f"mount -n --bind {q(str(self.export))} {q(str(self.mount_point))}",
            "mount -n -t overlay overlay -o "
            + q(f"lowerdir=/root,upperdir={node.home / 'root'},workdir={node.home / 'root-work'}") + " /root",
            *(f"mount -n --bind {q(str(node.etc / name))} /etc/{name}"
              for name in ("passwd", "group", "shadow", "hosts")),
            f"hostname {q(node.hostname)}",
        ]
        script = " && ".join(mounts) + f" && echo ready && exec tail --pid={os.getpid()} -f /dev/null"
        if self.join_net:  # the node's network is that process's; its mounts and hostname are its own as before
            self.kept[node.index] = self.join_net(node)
            start = ["nsenter", f"--net=/proc/{self.kept[node.index]}/ns/net", "unshare", "--mount", "--uts"]
        else:
            start = ["unshare", "--net", "--mount", "--uts"]
        holder = subprocess.Popen([*start, "--propagation", "private", "bash", "-c", script],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = select.select([holder.stdout], [], [], READY_TIMEOUT_S)[0]
        line = holder.stdout.readline() if ready else ""  # "ready", or "" when the script failed
        if line.strip() != "ready":
            holder.kill()
            error = holder.stderr.read().strip().splitlines()
            raise subprocess.CalledProcessError(holder.wait(), ["mount", "(node " + node.hostname + ")"],
                                                stderr=error[-1] if error else "")
        return holder

    def host_link(self, node: Node) -> str:
        """The host's end of the node's veth (on the bridge)."""
        return f"{self.bridge}v{node.index}"

    def command(self, node: Node, argv: list[str], cwd: str | Path = "/") -> list[str]:
        """`argv` as a process of `node`: its network, hostname, Batch tree, NFS mount, users, /run and /root."""
        return ["nsenter", "--target", str(self.holders[node.index].pid), "--net", "--mount", "--uts", "--",
                "taskset", "-c", self.cores(node), "bash", "-c", 'cd "$1" && shift && exec "$@"', "node", str(cwd),
                *argv]

    def cores(self, node: Node) -> str:
        """The node's own cores (round robin over this machine's), as a VM has its own: the training processes
        size their thread pools by them. With fewer cores than nodes, nodes share them all."""
        cores = sorted(os.sched_getaffinity(0))
        mine = cores[node.index::len(self.nodes)] if len(cores) >= len(self.nodes) else cores
        return ",".join(map(str, mine))

    def kill(self, node: Node) -> int:
        """Stop every process of the node (what removing its container does), but the holder of its namespaces and
        the process whose network it joined (the node itself stays); returns how many."""
        holder = self.holders.get(node.index)
        spared = {holder.pid if holder else None, self.kept.get(node.index)}
        pids = [pid for pid in self._pids(node) if pid not in spared]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(pids)

    def _pids(self, node: Node) -> list[int]:
        """The processes in the node's network namespace (its holder's, recorded when it started)."""
        if node.index not in self.net_ids:
            return []
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _net_id(int(entry)) == self.net_ids[node.index]:
                pids.append(int(entry))
        return pids

    def close(self) -> None:
        """Every process of every node, its veth, then the holders (the namespaces go with them). The veth is deleted
        here, which removes both ends at once, because a namespace's own teardown is asynchronous in the kernel:
        its links can outlive the holder by a moment."""
        for node in self.nodes:
            self.kill(node)
            if node.index in self.holders:
                _ip("link", "del", self.host_link(node), check=False)
            holder = self.holders.pop(node.index, None)
            if holder:
                holder.kill()
                holder.wait()
        _ip("link", "del", self.bridge, check=False)


def _net_id(pid: int) -> tuple[int, int] | None:
    try:
        st = os.stat(f"/proc/{pid}/ns/net")
    except OSError:  # gone, or a kernel thread
        return None
    return st.st_dev, st.st_ino
