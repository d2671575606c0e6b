"""Local stand-ins for a Batch pool's nodes: one Linux network namespace per node, joined by a bridge.

Each node gets what a Batch node has and the job relies on:
- its own IP address on a private subnet (a veth named eth0 in the node's namespace; the bridge is the "VNet"),
  its own hostname resolving to that address (as Azure's DNS does for a VM), so `node-ssh` finds its address
  by binding and Horovod's rendezvous reaches the other node by address, never by a shared loopback;
- its own Batch folder tree at the same path on every node (AZ_BATCH_NODE_ROOT_DIR: a per-node folder
  bind-mounted at one path in the node's mount namespace), with the pool's NFS mount (the export folder
  bind-mounted at $AZ_BATCH_NODE_MOUNTS_DIR/<mount>);
- its own root home's .ssh (a container has its own /root): the job's ssh client config lands there.
Every command of a node runs inside these namespaces (`ip netns exec` + `unshare -m -u`), so its processes, and
the sessions its sshd opens, see exactly that node. Needs root (namespaces, mounts, and the job's sshd logs in
as root, as in the container).
"""
from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

BATCH_ROOT = Path("/mnt/batch")  # AZ_BATCH_NODE_ROOT_DIR's path on every node (Batch uses /mnt/batch on Linux)
ROOT_SSH = Path("/root/.ssh")


class RehearsalUnavailable(RuntimeError):
    """This machine cannot host the rehearsal's nodes; `str()` says why and what to do."""


@dataclass(frozen=True)
class Node:
    index: int  # 0 is the primary
    namespace: str
    address: str
    hostname: str
    home: Path  # this node's folders on the host: batch/ (its Batch tree), ssh/ (its /root/.ssh)

    @property
    def batch_root(self) -> Path:
        """The node's Batch tree as the rehearsal (outside the node) sees it."""
        return self.home / "batch"

    def host_path(self, node_path: str | Path) -> Path:
        """Where a path under BATCH_ROOT on the node is on the host."""
        return self.batch_root / Path(node_path).relative_to(BATCH_ROOT)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class Pool:
    """`count` nodes on 10.<x>.<y>.0/24 behind bridge `name`; `export` is the NFS share every node mounts."""

    def __init__(self, work: Path, count: int, export: Path, mount_name: str, tag: str | None = None):
        if os.geteuid() != 0:
            raise RehearsalUnavailable("the rehearsal needs root: network namespaces, bind mounts, and the job's "
                                       "sshd logs in as root as it does in the container (run it as root)")
        for tool in ("ip", "unshare", "mount"):
            if not shutil.which(tool):
                raise RehearsalUnavailable(f"`{tool}` is not installed (iproute2 / util-linux)")
        self.tag = tag or f"{os.getpid() % 100000}"
        self.bridge = f"dlr{self.tag}"[:15]
        octet = 100 + os.getpid() % 150
        self.subnet = ipaddress.IPv4Network(f"10.{octet}.{os.getpid() % 250}.0/24")
        self.gateway = str(self.subnet[1])
        self.export, self.mount_name = export, mount_name
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
        ROOT_SSH.mkdir(mode=0o700, exist_ok=True)  # the mount point for each node's own .ssh
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for node in self.nodes:
            _ip("netns", "add", node.namespace)
            peer = f"{self.bridge}v{node.index}"[:15]
            _ip("link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", node.namespace)
            _ip("link", "set", peer, "master", self.bridge, "up")
            for args in (("addr", "add", f"{node.address}/{self.subnet.prefixlen}", "dev", "eth0"),
                         ("link", "set", "eth0", "up"), ("link", "set", "lo", "up")):
                _ip("netns", "exec", node.namespace, "ip", *args)
            # `ip netns exec` shows /etc/netns/<ns>/hosts as /etc/hosts: the node's name resolves to its address.
            hosts = Path("/etc/netns") / node.namespace / "hosts"
            hosts.parent.mkdir(parents=True, exist_ok=True)
            hosts.write_text(f"127.0.0.1 localhost\n{node.address} {node.hostname}\n")
            for folder in ("batch", "ssh"):
                (node.home / folder).mkdir(parents=True, exist_ok=True)
            (node.home / "ssh").chmod(0o700)
            (node.host_path(BATCH_ROOT / "fsmounts" / self.mount_name)).mkdir(parents=True, exist_ok=True)

    def command(self, node: Node, argv: list[str], cwd: str | Path = "/") -> list[str]:
        """`argv` as a process of `node`: its network, hostname, Batch tree, NFS mount and /root/.ssh."""
        inner = ('hostname "$1" && mount --bind "$2" "$3" && mount --bind "$4" "$5" && mount --bind "$6" "$7" '
                 '&& cd "$8" && shift 8 && exec "$@"')
        mount_point = BATCH_ROOT / "fsmounts" / self.mount_name
        BATCH_ROOT.mkdir(parents=True, exist_ok=True)  # an empty mount point on the host
        return ["ip", "netns", "exec", node.namespace, "taskset", "-c", self.cores(node), "unshare", "-m", "-u",
                "--propagation", "private", "bash", "-c", inner, "node", node.hostname, str(node.batch_root),
                str(BATCH_ROOT), str(self.export), str(mount_point), str(node.home / "ssh"), str(ROOT_SSH), str(cwd),
                *argv]

    def cores(self, node: Node) -> str:
        """The node's own cores (round robin over this machine's), as a VM has its own: the training processes
        size their thread pools by them. With fewer cores than nodes, nodes share them all."""
        cores = sorted(os.sched_getaffinity(0))
        mine = cores[node.index::len(self.nodes)] if len(cores) >= len(self.nodes) else cores
        return ",".join(map(str, mine))

    def kill(self, node: Node) -> int:
        """Stop every process of the node (what removing its container does); returns how many."""
        pids = [int(p) for p in _ip("netns", "pids", node.namespace, check=False).stdout.split()]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(pids)

    def close(self) -> None:
        for node in self.nodes:
            self.kill(node)
            _ip("netns", "del", node.namespace, check=False)
            shutil.rmtree(Path("/etc/netns") / node.namespace, ignore_errors=True)
        _ip("link", "del", self.bridge, check=False)
