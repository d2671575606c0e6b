"""The account's endpoints as a node reaches them: the rehearsal's Batch endpoint and managed identity endpoint
listen on the host's 127.0.0.1 (their TLS certificates name 127.0.0.1), and a node is its own network namespace,
whose 127.0.0.1 is its own. So each such port is also opened on every node's 127.0.0.1, by the rehearsal's process,
and what a node's process sends there is relayed to the host's port: the node calls the very URL the host does
(AZ_BATCH_ACCOUNT_URL, IDENTITY_ENDPOINT), and TLS runs end to end between the node's client and the endpoint.

On Azure a node reaches its account's public endpoint (AZ_BATCH_ACCOUNT_URL, "the URL of the Batch account", set for
all tasks: https://learn.microsoft.com/azure/batch/batch-compute-node-environment-variables) and gets its tokens from
IMDS; here both are the host's local endpoints, relayed.

How: a socket belongs to the network namespace its creating thread was in. A short-lived thread joins the node's
namespace (setns(2) on /proc/<pid>/ns/net of the process holding the node's namespaces: network namespaces may be
joined per thread), creates and binds the listening socket there, and ends; the relay threads, in the host's
namespace, accept on it and connect to the host's port. Needs root, as the nodes do.
"""
from __future__ import annotations

import ctypes
import os
import socket
import threading
from urllib.parse import urlsplit

CLONE_NEWNET = 0x40000000  # <sched.h>: setns(fd, CLONE_NEWNET) joins a network namespace
_CHUNK = 65536


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def listen_in(pid: int, port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:`port` in the network namespace of process `pid`."""
    made: dict[str, object] = {}

    def inside() -> None:  # this thread only: it joins the node's namespace and ends there
        try:
            with open(f"/proc/{pid}/ns/net") as target:
                _setns(target.fileno())
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(32)
            made["socket"] = sock
        except OSError as err:
            made["error"] = err

    thread = threading.Thread(target=inside, name=f"node-port-{pid}-{port}")
    thread.start()
    thread.join()
    if "error" in made:
        raise made["error"]  # type: ignore[misc]
    return made["socket"]  # type: ignore[return-value]


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(_CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


def _connection(client: socket.socket, port: int) -> None:
    try:
        upstream = socket.create_connection(("127.0.0.1", port), timeout=30)  # made here: the host's namespace
    except OSError:
        client.close()
        return
    upstream.settimeout(None)
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _relay(listener: socket.socket, port: int) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return  # closed
        threading.Thread(target=_connection, args=(client, port), daemon=True).start()


class NodePorts:
    """The host's 127.0.0.1 ports of `urls` opened on every node (holder PIDs `pids`), until `close()` or the end of
    a `with` block."""

    def __init__(self, pids: list[int], urls: list[str]):
        ports = sorted({urlsplit(url).port for url in urls if urlsplit(url).hostname == "127.0.0.1"} - {None})
        self.listeners: list[socket.socket] = []
        try:
            for pid in pids:
                for port in ports:
                    listener = listen_in(pid, port)
                    self.listeners.append(listener)
                    threading.Thread(target=_relay, args=(listener, port), daemon=True,
                                     name=f"node-port-relay-{pid}-{port}").start()
        except OSError:
            self.close()
            raise
        self.ports = ports

    def close(self) -> None:
        for listener in self.listeners:
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        self.listeners = []

    def __enter__(self) -> "NodePorts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
