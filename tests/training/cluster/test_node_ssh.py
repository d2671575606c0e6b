"""The job's own SSH between Batch nodes (training/cluster/node_ssh.py): its files, and Debian's real sshd and ssh on
the rehearsal's nodes, which see the image's users (no test adds or needs a user on this machine)."""
import os
import subprocess
from pathlib import Path

import pytest

from devtools.rehearsal.nodes import IMAGE_USERS
from tests.infra.backends.batch import job_nodes
from tests.infra.backends.batch.job_nodes import DEBS
from training.cluster import node_ssh
from training.errors import UsageError

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


def test_sshds_own_message_and_the_fix_make_one_line():
    stderr = "debug1: sshd version OpenSSH_9.2\nPrivilege separation user sshd does not exist\n"
    line = node_ssh.sshd_failure(stderr, 255)
    assert line.startswith("sshd did not start (exit 255): Privilege separation user sshd does not exist; the image "
                           "needs sshd's privilege-separation user: install openssh-server") and "\n" not in line
    assert node_ssh.sshd_failure("Bind to port 2222 on 10.0.0.4 failed: Address already in use.\n", 255).endswith(
        "give node-ssh another --port")
    assert node_ssh.sshd_failure("", 1) == "sshd did not start (exit 1): no message"


NODES_UNAVAILABLE = job_nodes.unavailable()
needs_nodes = pytest.mark.skipif(bool(NODES_UNAVAILABLE), reason=NODES_UNAVAILABLE or "-")
KEYS = "/mnt/batch/fsmounts/data/.jobs/j"  # on the NFS share every node mounts


def start_node_ssh(nodes, node):
    shared = job_nodes.download_scripts(node, "j")
    environment = job_nodes.env(nodes, node, "j", {"PYTHONPATH": str(shared)})
    return job_nodes.run(nodes, node, f"python -m training node-ssh --port 2222 --keys-dir {KEYS}", environment, shared)


@needs_nodes
def test_two_nodes_log_in_with_the_jobs_key_and_nothing_else(tmp_path):
    """Debian's real sshd and ssh on two nodes that see the image's users (whatever users this machine has)."""
    with job_nodes.pool(tmp_path, 2) as nodes:
        for node in reversed(nodes.nodes):  # the other node may start first: it reads the key at login time
            started = start_node_ssh(nodes, node)
            assert started.returncode == 0, started.stderr
        primary = nodes.nodes[0]
        environment = job_nodes.env(nodes, primary, "j")

        def on_primary(command):
            return job_nodes.run(nodes, primary, command, environment, "/", timeout=30)

        for node in nodes.nodes:  # what mpirun does: ssh to every host of the job, including itself
            result = on_primary(f"ssh {node.address} hostname")
            assert result.returncode == 0 and result.stdout.strip() == node.hostname, result.stderr
        # Bound to its own address: nothing answers on loopback at that port.
        refused = on_primary("python -c 'import socket; socket.create_connection((\"127.0.0.1\", 2222), timeout=2)'")
        assert refused.returncode == 1 and "ConnectionRefusedError" in refused.stderr
        # Another key is refused, and there is no password to fall back on.
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "stranger")], check=True,
                       env={**os.environ, "PATH": f"{DEBS}/usr/bin:{os.environ['PATH']}", "LD_LIBRARY_PATH": LIBS})
        stranger = on_primary(f"ssh -F /dev/null -p 2222 -i {tmp_path}/stranger -o IdentitiesOnly=yes -o BatchMode=yes "
                              "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                              f"root@{nodes.nodes[1].address} true")
        assert stranger.returncode == 255 and "Permission denied (publickey)" in stranger.stderr


@needs_nodes
def test_an_image_without_sshds_user_fails_node_ssh_in_one_line_with_the_fix(tmp_path):
    """The failure a fresh machine met in `make demo`, now on a node whose image lacks the user: one line."""
    with job_nodes.pool(tmp_path, 1, users=IMAGE_USERS.without("sshd")) as nodes:
        result = start_node_ssh(nodes, nodes.nodes[0])
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("error: sshd did not start (exit 255): Privilege separation user sshd does not "
                                    "exist; the image needs sshd's privilege-separation user"), result.stderr
