"""The job's ssh client config is where OpenSSH reads it (training/cluster/node_ssh.py): Debian's real `ssh -G`
(openssh-client, unpacked in .cache/debs by `make setup`) run as the launch runs ssh, by a user whose passwd home
is not $HOME.

OpenSSH reads ~/.ssh/config from the passwd entry's home and ignores $HOME (ssh.c's process_config_files), so
the test gives this user another home in a private mount namespace (a copy of /etc/passwd bind-mounted over
the host's, which is never changed) and sets HOME elsewhere; node-ssh writes the config, then `ssh -G HOST` prints
the options in effect for the job's other host. The job's port and key must be among them."""
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.backends.batch.job_nodes import DEBS
from training.cluster import launch

OTHER = "192.0.2.10"  # TEST-NET-1 (RFC 5737): the job's other host, never an address of this machine
HOSTS = f"127.0.0.1,{OTHER}"  # node-ssh finds this node's address by binding: 127.0.0.1 is the only one it can


def namespace_prefix() -> list[str]:
    """A private mount namespace: as root directly, otherwise in a user namespace mapping this user to root."""
    return ["unshare", "--mount", "--propagation", "private"] if os.geteuid() == 0 else \
        ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]


def passwd_with_home(passwd: str, uid: int, home: Path) -> str:
    """/etc/passwd's text with the home of `uid`'s entry replaced (name:x:uid:gid:gecos:home:shell)."""
    lines = []
    for line in passwd.splitlines():
        fields = line.split(":")
        if len(fields) == 7 and fields[2] == str(uid):
            fields[5] = str(home)
        lines.append(":".join(fields))
    return "\n".join(lines) + "\n"


def test_passwd_copy_changes_only_the_users_home():
    text = "root:x:0:0:root:/root:/bin/bash\nbin:x:2:2:bin:/bin:/usr/sbin/nologin\n"
    assert passwd_with_home(text, 0, Path("/t/h")) == "root:x:0:0:root:/t/h:/bin/bash\nbin:x:2:2:bin:/bin:/usr/sbin/nologin\n"


def test_ssh_as_the_launch_runs_it_uses_the_jobs_port_and_key_when_home_is_elsewhere(tmp_path):
    ssh = DEBS / "usr" / "bin" / "ssh"
    if not ssh.exists():
        raise AssertionError("Debian's OpenSSH client is not unpacked in .cache/debs: run `make setup`")
    if shutil.which("unshare") is None or subprocess.run([*namespace_prefix(), "true"], capture_output=True).returncode:
        pytest.skip("not played: the ssh config's location under a passwd home other than $HOME (no private mount "
                    "namespace here: needs root or unprivileged user namespaces)")
    passwd_home, elsewhere, task = tmp_path / "passwd-home", tmp_path / "home-elsewhere", tmp_path / "task"
    for folder in (passwd_home, elsewhere):
        folder.mkdir()
    # Inside the namespace this user is uid 0 (root already, or mapped to root): its entry gets passwd_home.
    (tmp_path / "passwd").write_text(passwd_with_home(Path("/etc/passwd").read_text(), 0, passwd_home))
    # How the launch reaches another host (launch.native_workers: `ssh HOST COMMAND`; horovodrun's and mpirun's
    # ssh add only -p and -o options): its first two words, with -G to print the options in effect.
    plan = launch.native_workers([launch.Host("127.0.0.1", 1), launch.Host(OTHER, 1)], "127.0.0.1", ["--steps", "1"],
                                 python=sys.executable, cwd="/", env={})
    remote = plan[1][0]
    assert remote[:2] == ["ssh", OTHER], remote
    show = ["ssh", "-G", OTHER]
    script = " && ".join([
        f"mount -n --bind {shlex.quote(str(tmp_path / 'passwd'))} /etc/passwd",
        f"{shlex.quote(sys.executable)} -m training node-ssh --port 2222 --keys-dir {shlex.quote(str(tmp_path / 'keys'))} "
        "--no-start",
        shlex.join(show),
    ])
    env = {"PATH": f"{DEBS}/usr/bin:{os.environ['PATH']}", "HOME": str(elsewhere), "LANG": "C.UTF-8",
           "LD_LIBRARY_PATH": f"{DEBS}/usr/lib/x86_64-linux-gnu:{DEBS}/lib/x86_64-linux-gnu",
           "PYTHONPATH": str(Path(__file__).resolve().parents[3]), "PYTHONDONTWRITEBYTECODE": "1",
           "AZ_BATCH_HOST_LIST": HOSTS, "AZ_BATCH_TASK_SHARED_DIR": str(task),
           "AZ_BATCH_IS_CURRENT_NODE_MASTER": "true"}
    result = subprocess.run([*namespace_prefix(), "sh", "-c", script], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    options = set(result.stdout.splitlines())
    in_effect = sorted(o for o in options if o.startswith(("port ", "identityfile ", "user ", "batchmode ",
                                                            "userknownhostsfile ")))
    assert "port 2222" in options, f"the job's port is not in effect for {OTHER}: {in_effect}"
    assert f"identityfile {task}/ssh/id_ed25519" in options, f"the job's key is not in effect: {in_effect}"
    assert {"user root", "batchmode yes", f"userknownhostsfile {task}/ssh/known_hosts"} <= options, in_effect
    assert (passwd_home / ".ssh" / "config").exists() and not (elsewhere / ".ssh").exists()


def test_client_only_writes_the_primarys_config_from_the_job_key_the_coordination_made(tmp_path):
    """The application command's first step (--client-only): its container may not be the coordination command's, so
    it writes the client config again from the task-shared folder; without the job key it says who makes it."""
    from training.cluster import node_ssh

    shared = tmp_path / "task"
    env = {"AZ_BATCH_HOST_LIST": HOSTS, "AZ_BATCH_TASK_SHARED_DIR": str(shared),
           "AZ_BATCH_IS_CURRENT_NODE_MASTER": "true"}
    node = node_ssh.node_from_env(env, 2222, tmp_path / "keys")
    with pytest.raises(node_ssh.UsageError, match="no job key at .*coordination command"):
        node_ssh.client_only(node, tmp_path / "home")
    assert not (tmp_path / "home" / ".ssh" / "config").exists()
    node.ssh_dir.mkdir(parents=True)
    node.identity.write_text("key")  # what the coordination command's node-ssh made on the primary
    node_ssh.client_only(node, tmp_path / "home")
    config = (tmp_path / "home" / ".ssh" / "config").read_text()
    assert config == node_ssh.ssh_client_config(node) and f"IdentityFile {node.identity}" in config
    other = node_ssh.node_from_env({**env, "AZ_BATCH_IS_CURRENT_NODE_MASTER": "false"}, 2222, tmp_path / "keys")
    with pytest.raises(node_ssh.UsageError, match="for the primary"):
        node_ssh.client_only(other, tmp_path / "home")
