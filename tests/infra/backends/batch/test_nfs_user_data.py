"""The NFS server's user data as cloud-init itself reads it (Debian's cloud-init 22.4, unpacked by `make setup`),
its scripts under bash -n and ShellCheck, and what brings it back after a reboot."""
import base64
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.rehearsal.nfs_server import merged_cloud_config
from infra.backends.batch import nfs_user_data
from infra.backends import staging
from training.data import staged
from infra import REPO_ROOT

CLOUD_INIT = REPO_ROOT / ".cache" / "debs" / "root" / "usr" / "lib" / "python3" / "dist-packages"
SHELLCHECK = Path(sys.executable).parent / "shellcheck"
URLS = nfs_user_data.StagingUrls(*(f"https://st.blob.core.windows.net/{c}" for c in ("data", "scripts", "status")))


@pytest.fixture(scope="module")
def cloudinit():
    if not (CLOUD_INIT / "cloudinit").is_dir():
        pytest.fail("Debian's cloud-init is not unpacked in .cache/debs: run `make setup`")
    sys.path.insert(0, str(CLOUD_INIT))
    import cloudinit

    yield cloudinit
    sys.path.remove(str(CLOUD_INIT))


def user_data(disks=4):
    return base64.b64decode(nfs_user_data.custom_data("10.10.0.0/20", disks, URLS, "client-nfs"))


def test_cloud_init_keeps_every_file_and_command(cloudinit, tmp_path):
    config = merged_cloud_config(user_data(), tmp_path)
    files = {f["path"]: f for f in config["write_files"]}
    assert set(files) == {"/usr/local/sbin/dltrain-nfs-setup", "/usr/local/sbin/dltrain-stage",
                          "/etc/dltrain/stage.env", "/etc/systemd/system/dltrain-stage.service",
                          "/etc/systemd/system/dltrain-stage.timer",
                          "/etc/systemd/system/nfs-server.service.d/dltrain.conf"}
    assert files["/usr/local/sbin/dltrain-nfs-setup"]["content"] == nfs_user_data.setup_script("10.10.0.0/20", 4)
    assert files["/usr/local/sbin/dltrain-stage"]["permissions"] == "0700"
    assert config["runcmd"][0] == ["/usr/local/sbin/dltrain-nfs-setup"]  # the script it runs is written
    # The timer runs the unit, every minute for as long as the server lives (not once: the data comes later).
    assert ["systemctl", "enable", "--now", nfs_user_data.STAGE_TIMER] in config["runcmd"]
    assert set(config["packages"]) >= {"nfs-kernel-server", "mdadm", "xfsprogs", "python3-venv"}


def test_the_user_data_passes_cloud_inits_own_schema(cloudinit):
    from cloudinit.config.schema import get_schema, validate_cloudconfig_schema
    from cloudinit.util import load_yaml

    text = nfs_user_data.cloud_config("10.10.0.0/20", 4, URLS, "client-nfs")
    assert text.startswith("#cloud-config\n")
    validate_cloudconfig_schema(load_yaml(text), get_schema(), strict=True)


def test_the_old_two_part_user_data_lost_the_setup_script(cloudinit, tmp_path):
    """Why the user data is one document: with a `Content-Type-Merge` header (which cloud-init does not read),
    cloud-init's default merge let the second part's write_files replace the first's."""
    boundary = "==b=="
    parts = ["#cloud-config\nwrite_files:\n  - path: /usr/local/sbin/setup\n    content: echo\n"
             "runcmd:\n  - [/usr/local/sbin/setup]\n",
             "#cloud-config\nwrite_files:\n  - path: /etc/dltrain/stage.env\n    content: X=1\n"]
    body = "".join(f"--{boundary}\nContent-Type: text/cloud-config\nContent-Type-Merge: list(append)+dict(recurse_array)"
                   f"+str()\n\n{part}\n" for part in parts)
    mime = f"Content-Type: multipart/mixed; boundary=\"{boundary}\"\nMIME-Version: 1.0\n\n{body}--{boundary}--\n"
    config = merged_cloud_config(mime.encode(), tmp_path)
    assert [f["path"] for f in config["write_files"]] == ["/etc/dltrain/stage.env"]
    assert config["runcmd"] == [["/usr/local/sbin/setup"]]  # runs a script that was never written


def test_the_rehearsals_nfs_server_stops_at_user_data_that_loses_the_stage_script(cloudinit, tmp_path):
    """The same two-part shape with the real files: cloud-init keeps only the second part's files, and the
    rehearsal's NFS server says which file the unit lacks, before running anything."""
    import yaml

    from devtools.rehearsal.nfs_server import NfsServer, StagingFailed

    config = yaml.safe_load(user_data().decode())
    first, second = config["write_files"][:2], config["write_files"][2:]  # the scripts | env, unit, drop-in
    parts = [yaml.safe_dump({**config, "write_files": first}), yaml.safe_dump({"write_files": second})]
    body = "".join(f"--b\nContent-Type: text/cloud-config\nContent-Type-Merge: list(append)+dict(recurse_array)"
                   f"+str()\n\n#cloud-config\n{part}\n" for part in parts)
    mime = f"Content-Type: multipart/mixed; boundary=\"b\"\nMIME-Version: 1.0\n\n{body}--b--\n"
    server = NfsServer(base64.b64encode(mime.encode()).decode(), tmp_path / "vm", tmp_path / "export")
    server.boot()
    with pytest.raises(StagingFailed, match="ExecStart=/usr/local/sbin/dltrain-stage does not exist"):
        server.run_staging_unit({}, {})
    # The one-document user data writes every file the unit needs.
    good = NfsServer(base64.b64encode(user_data()).decode(), tmp_path / "vm2", tmp_path / "export")
    good.boot()
    assert all(good.vm_path(p).is_file() for p in ("/usr/local/sbin/dltrain-stage", "/etc/dltrain/stage.env"))
    assert good.vm_path("/usr/local/sbin/dltrain-stage").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("disks", [1, 4])
def test_scripts_pass_bash_and_shellcheck(disks, tmp_path):
    for name, text in (("setup", nfs_user_data.setup_script("10.10.0.0/20", disks)), ("stage", nfs_user_data.stage_script())):
        path = tmp_path / name
        path.write_text(text)
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
        result = subprocess.run([str(SHELLCHECK), "--severity=warning", str(path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout


def test_the_python_the_stage_script_feeds_to_python_compiles():
    """bash -n and ShellCheck see a heredoc as text: a newline escape lost in the f-string that writes the script
    split a string literal in two, and the unit failed at its status report after every staging (found by the
    rehearsal). The rehearsal runs the script; this catches it without one."""
    blocks = re.findall(r"<<'PY'\n(.*?)\nPY\n", nfs_user_data.stage_script(), re.S)
    assert len(blocks) == 1
    for block in blocks:
        compile(block, "dltrain-stage heredoc", "exec")


def test_a_reboot_brings_the_array_mount_export_and_staging_back():
    setup = nfs_user_data.setup_script("10.10.0.0/20", 4)
    assert 'mdadm --detail --brief "$device" >> /etc/mdadm/mdadm.conf' in setup and "update-initramfs -u" in setup
    assert 'echo "UUID=$uuid /data xfs defaults,nofail 0 2" >> /etc/fstab' in setup  # not /dev/md0 (md127 later)
    unit, timer = nfs_user_data.stage_unit(), nfs_user_data.stage_timer()
    assert "RequiresMountsFor=/data" in unit and "[Install]" not in unit  # started by its timer only
    assert "WantedBy=timers.target" in timer and "OnActiveSec=30s" in timer  # every boot
    assert "OnUnitInactiveSec=1min" in timer  # and a minute after each run, whatever its result
    assert nfs_user_data.NFS_SERVER_DROP_IN == "[Unit]\nRequiresMountsFor=/data\n"  # no export of an empty mount point


def test_staging_never_stops_checking_the_container_and_reports_every_state():
    """The old unit ran until it had staged once (ConditionPathExists=!.staged), and an empty container staged
    "successfully": created with the stack, the server marked an empty dataset and never looked again."""
    unit, stage = nfs_user_data.stage_unit(), nfs_user_data.stage_script()
    assert "ConditionPathExists" not in unit and "touch" not in stage  # the stager marks, and only what it staged
    assert (f"exec /opt/dltrain/venv/bin/python -m training stage env:DATA_CONTAINER_URL /data/imagenet --mark \\\n"
            f"  --report env:STATUS_CONTAINER_URL --recheck-minutes {nfs_user_data.STAGE_RECHECK_MINUTES}") in stage
    assert f"SuccessExitStatus={staged.EXIT_NO_DATA}" in unit  # "waiting for data" is not a failure
    assert "TimeoutStartSec=12h" in unit  # a hung run cannot stop the timer for good (a oneshot has no timeout)
    assert "STATUS_CONTAINER_URL=https://st.blob.core.windows.net/status" in nfs_user_data.stage_env(URLS, "c")
    assert staging.RECHECK_MINUTES == nfs_user_data.STAGE_RECHECK_MINUTES  # what the deployer is told
