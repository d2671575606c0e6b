"""The job's own SSH between Batch nodes (training/cluster/node_ssh.py): its files, and Debian's real sshd and ssh."""
import os
import pwd
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from infra import REPO_ROOT
from training.cluster import node_ssh
from training.errors import UsageError

DEBS = REPO_ROOT / ".cache" / "debs" / "root"
LIBS = f"{DEBS}/usr/lib/x86_64-linux-gnu:{DEBS}/lib/x86_64-linux-gnu"


def node(tmp_path, address, primary, port=2222):
    return node_ssh.NodeSsh(ssh_dir=tmp_path / address / "shared" / "ssh", keys_dir=tmp_path / "nfs" / ".jobs" / "j",
                            address=address, hosts=("127.0.0.2", "127.0.0.3"), port=port, primary=primary)


def test_sshd_is_key_only_on_the_nodes_own_address(tmp_path):
    text = node_ssh.sshd_config(node(tmp_path, "127.0.0.3", False))
    lines = set(text.splitlines())
    assert {"Port 2222", "ListenAddress 127.0.0.3", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password", "UsePAM no"} <= lines
    assert "0.0.0.0" not in text
    assert f"AuthorizedKeysFile {tmp_path}/nfs/.jobs/j/authorized_keys" in lines


def test_client_config_covers_the_jobs_hosts_only():
    text = node_ssh.ssh_client_config(node(Path("/t"), "127.0.0.2", True))
    assert text.splitlines()[0] == "Host 127.0.0.2 127.0.0.3"
    assert "  Port 2222" in text and "  StrictHostKeyChecking accept-new" in text and "  BatchMode yes" in text
    assert "  UserKnownHostsFile /t/127.0.0.2/shared/ssh/known_hosts" in text


def test_own_address_is_the_one_this_machine_can_bind():
    assert node_ssh.own_address(("10.0.0.4", "10.0.0.5"), can_bind=lambda a: a == "10.0.0.5") == "10.0.0.5"
    with pytest.raises(UsageError, match="exactly one address of this node"):
        node_ssh.own_address(("10.0.0.4", "10.0.0.5"), can_bind=lambda a: False)
    assert node_ssh.own_address(("127.0.0.1", "203.0.113.9")) == "127.0.0.1"  # a real bind: only loopback is ours


def test_outside_a_batch_task_it_says_so(tmp_path):
    with pytest.raises(UsageError, match="AZ_BATCH_HOST_LIST is not set"):
        node_ssh.node_from_env({}, 2222, tmp_path)


def test_the_primary_publishes_only_its_public_key(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{DEBS}/usr/bin:{os.environ['PATH']}")
    monkeypatch.setenv("LD_LIBRARY_PATH", LIBS)
    primary, other = node(tmp_path, "127.0.0.2", True), node(tmp_path, "127.0.0.3", False)
    node_ssh.prepare(other, tmp_path / "home-other")
    node_ssh.prepare(primary, tmp_path / "home")
    published = (primary.keys_dir / "authorized_keys").read_text()
    assert published.startswith("ssh-ed25519 ") and "PRIVATE" not in published
    assert published == primary.identity.with_suffix(".pub").read_text()
    assert (primary.keys_dir.stat().st_mode & 0o777) == 0o700
    assert ((primary.keys_dir / "authorized_keys").stat().st_mode & 0o777) == 0o600
    assert not list(primary.keys_dir.glob("id_*")) and not other.identity.exists()  # the private key stays put
    assert not (tmp_path / "home-other" / ".ssh" / "config").exists()  # only the primary launches
    assert (tmp_path / "home" / ".ssh" / "config").read_text() == node_ssh.ssh_client_config(primary)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def sshd_ready():
    """Debian's sshd, unpacked by `make setup`; as root it needs its privilege-separation user."""
    if not (DEBS / "usr" / "sbin" / "sshd").exists():
        pytest.fail("Debian's OpenSSH is not unpacked in .cache/debs: run `make setup`")
    if os.geteuid() != 0:
        pytest.skip("the job's sshd logs in as root, as in the container: this test needs root")
    try:
        pwd.getpwnam("sshd")
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "sshd"], check=True)


def test_two_nodes_log_in_with_the_jobs_key_and_nothing_else(tmp_path, monkeypatch, sshd_ready):
    monkeypatch.setenv("PATH", f"{DEBS}/usr/bin:{os.environ['PATH']}")
    monkeypatch.setenv("LD_LIBRARY_PATH", LIBS)
    port = _free_port()
    nodes = [node(tmp_path, "127.0.0.2", True, port), node(tmp_path, "127.0.0.3", False, port)]
    home = tmp_path / "home"
    try:
        for n in reversed(nodes):  # the other node may start first: it reads the key at login time
            node_ssh.prepare(n, home if n.primary else tmp_path / "home-other")
            node_ssh.start(n, sshd=str(DEBS / "usr" / "sbin" / "sshd"))
        ssh = [str(DEBS / "usr" / "bin" / "ssh"), "-F", str(home / ".ssh" / "config")]
        for n in nodes:  # what mpirun does: ssh to every host of the job, including itself
            result = subprocess.run([*ssh, n.address, "echo", "on", n.address], capture_output=True, text=True,
                                    timeout=30)
            assert result.returncode == 0 and result.stdout.strip() == f"on {n.address}", result.stderr
        # Bound to its own address: nothing answers on another loopback address at that port.
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.4", port), timeout=2)
        # Another key is refused, and there is no password to fall back on.
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "stranger")], check=True)
        stranger = [str(DEBS / "usr" / "bin" / "ssh"), "-F", "/dev/null", "-p", str(port), "-i",
                    str(tmp_path / "stranger"), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                    "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "root@127.0.0.3", "true"]
        refused = subprocess.run(stranger, capture_output=True, text=True, timeout=30)
        assert refused.returncode == 255 and "Permission denied (publickey)" in refused.stderr
    finally:
        for n in nodes:
            pid_file = n.ssh_dir / "sshd.pid"
            if pid_file.exists():
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
