"""The NFS server's part: the VM's user data as cloud-init reads it, then its staging unit run as systemd runs it.

1. The program's customData for the VM (one #cloud-config document, base64) goes through cloud-init's own code
   (Debian's cloud-init, unpacked by `make setup` into .cache/debs): UserDataProcessor splits it into parts, the
   cloud-config handler merges them as on first boot, and cc_write_files writes the files, here under the VM's
   own root folder instead of /.
2. The setup script (mdadm, mkfs.xfs, fstab, nfs-kernel-server) needs a VM's disks and kernel: not run here (the
   tests check it with bash -n and ShellCheck, and what brings it back after a reboot).
3. The staging unit, as its timer starts it (https://www.freedesktop.org/software/systemd/man/latest/systemd.unit.html,
   systemd.timer's Unit=, systemd.exec's EnvironmentFile=, systemd.service's SuccessExitStatus=): each call of
   `run_staging_unit` is one elapse of the timer the user data enables (the caller decides when: before and after
   the deployer's upload); skipped when a ConditionPathExists= fails; otherwise its ExecStart runs with
   the variables of its EnvironmentFile, in a mount namespace where the VM's paths are the rehearsal's folders:
   /data is the export; /opt/dltrain is the VM's own folder, whose venv is this checkout's .venv (it has the
   stager's pinned packages, so the script's `pip install` finds them installed and needs no index); the
   account's URLs lead to the rehearsal's storage; the identity signs in through DefaultAzureCredential
   (devtools/rehearsal/azure_ad.py). A run that fails is not retried here (the timer would, a minute later):
   one failure fails the rehearsal.
"""
from __future__ import annotations

import base64
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from infra import REPO_ROOT
from infra.backends.batch import nfs_user_data

CLOUD_INIT = REPO_ROOT / ".cache" / "debs" / "root" / "usr" / "lib" / "python3" / "dist-packages"
STAGER_VENV = REPO_ROOT / ".venv"


# In a private mount namespace: $1 becomes a root where each top-level folder of this machine is bound as it is
# (symlinks such as bin -> usr/bin copied), but /opt and the export's folder, which are the VM's: /opt/dltrain is
# $2 with the stager's venv $3 at venv, the export ($5) is $4; then $6 (the unit's ExecStart, where the VM's root
# folder has it) runs in it.
VM_ROOT_SCRIPT = r"""
set -e
root=$1 export_path=$5
mount -n -t tmpfs vm-root "$root"
for entry in /* /.[!.]*; do
  [ -e "$entry" ] || [ -L "$entry" ] || continue
  name=${entry#/}
  case "/$name" in /opt|"$export_path") continue ;; esac
  if [ -L "$entry" ]; then ln -s "$(readlink "$entry")" "$root/$name"
  elif [ -d "$entry" ]; then mkdir "$root/$name" && mount -n --rbind "$entry" "$root/$name"
  fi
done
mkdir -p "$root/opt/dltrain" "$root$export_path"
mount -n --bind "$2" "$root/opt/dltrain"
mount -n --bind "$3" "$root/opt/dltrain/venv"
mount -n --bind "$4" "$root$export_path"
exec chroot "$root" "$6"
"""


def run_in_vm_root(program: Path, opt: Path, export: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run `program` as the VM runs it: /opt/dltrain is `opt` (its venv this checkout's .venv) and the export
    folder is `export`, in a root of its own (VM_ROOT_SCRIPT) inside a private mount namespace. Nothing is made
    or mounted on this machine (util-linux's `-n` records nothing in its /run/mount either), so two rehearsals at
    once do not meet there."""
    new_root = Path(tempfile.mkdtemp(prefix="nfs-vm-root-"))
    try:
        return subprocess.run(
            ["unshare", "-m", "--propagation", "private", "bash", "-c", VM_ROOT_SCRIPT, "unit", str(new_root),
             str(opt), str(STAGER_VENV), str(export), nfs_user_data.EXPORT_PATH, str(program)],
            env=env, capture_output=True, text=True)
    finally:
        new_root.rmdir()  # only a mount point inside the namespace, which ended with the program


class StagingFailed(RuntimeError):
    """The staging unit exited non-zero; `str()` has its exit code and the end of its output."""


def _cloudinit():
    if not (CLOUD_INIT / "cloudinit").is_dir():
        raise RuntimeError("Debian's cloud-init is not unpacked in .cache/debs: run `make setup`")
    if str(CLOUD_INIT) not in sys.path:
        sys.path.append(str(CLOUD_INIT))  # after our own packages: only `cloudinit` comes from there


def merged_cloud_config(user_data: bytes, scratch: Path) -> dict:
    """What cloud-init makes of the user data: its own processor splits it into parts, its own cloud-config
    handler merges them (by each part's Merge-Type header, or the default), as on first boot."""
    _cloudinit()
    from cloudinit import helpers
    from cloudinit.handlers.cloud_config import CloudConfigPartHandler
    from cloudinit.user_data import UserDataProcessor

    paths = helpers.Paths({"cloud_dir": str(scratch / "cloud"), "run_dir": str(scratch / "run")})
    message = UserDataProcessor(paths).process(user_data)
    handler = CloudConfigPartHandler(paths)
    handler.handle_part(None, "__begin__", None, None, None, None)
    for part in message.walk():
        if part.get_content_maintype() == "multipart":
            continue
        handler.handle_part(None, part.get_content_type(), part.get_filename(), part.get_payload(decode=True).decode(),
                            None, dict(part.items()))
    return handler.cloud_buf  # the merged config (cloud-init writes it to the instance folder at __end__)


def write_files(config: dict, root: Path) -> list[str]:
    """cloud-init's write_files module, each path under `root`; the paths as the VM has them."""
    _cloudinit()
    from cloudinit.config.cc_write_files import write_files as cloud_init_write_files

    files = [{**entry, "path": str(root / entry["path"].lstrip("/"))} for entry in config.get("write_files", [])]
    cloud_init_write_files("write_files", files, "root:root")
    return [entry["path"] for entry in config.get("write_files", [])]


def unit_settings(unit_text: str) -> dict[str, str]:
    """Key=value lines of a systemd unit file (later lines of a key win; enough for our one-valued keys)."""
    return dict(line.split("=", 1) for line in unit_text.splitlines() if "=" in line and not line.startswith("#"))


def environment_file(text: str) -> dict[str, str]:
    """systemd's EnvironmentFile=: KEY=VALUE lines, values unquoted (our values are shlex-quoted or bare)."""
    env = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith(("#", ";")):
            name, _, value = line.partition("=")
            env[name.strip()] = "".join(shlex.split(value))
    return env


def condition_met(condition: str, vm_path) -> bool:
    """ConditionPathExists=[!]PATH, the path as the VM sees it (`vm_path` maps it to the rehearsal's folder)."""
    negate = condition.startswith("!")
    exists = vm_path(condition.lstrip("!")).exists()
    return exists != negate


class NfsServer:
    """`root`: the VM's own root folder; `export`: the folder the rehearsal's nodes mount (its /data)."""

    def __init__(self, custom_data: str, root: Path, export: Path):
        self.user_data = base64.b64decode(custom_data)
        self.root, self.export = root, export
        self.enabled: list[str] = []  # the units the user data's runcmd enables (known after boot)

    def vm_path(self, path: str) -> Path:
        """Where a path of the VM is here: /data is the export, everything else under the VM's root."""
        if path == nfs_user_data.EXPORT_PATH or path.startswith(nfs_user_data.EXPORT_PATH + "/"):
            return self.export / path[len(nfs_user_data.EXPORT_PATH):].lstrip("/")
        return self.root / path.lstrip("/")

    def boot(self) -> dict:
        """First boot's user data: cloud-init's merge and write_files. Returns the merged config."""
        config = merged_cloud_config(self.user_data, self.root / "var" / "lib" / "cloud-rehearsal")
        write_files(config, self.root)
        self.enabled = [command[-1] for command in config.get("runcmd", [])
                        if isinstance(command, list) and command[:2] == ["systemctl", "enable"]]
        return config

    def _timer_of(self, unit_name: str) -> str:
        """The timer the user data enables that starts `unit_name` (Unit=, or the timer's own name), or ''."""
        for name in self.enabled:
            path = self.vm_path(f"/etc/systemd/system/{name}")
            if name.endswith(".timer") and path.is_file():
                target = unit_settings(path.read_text()).get("Unit", name[:-len(".timer")] + ".service")
                if target == unit_name:
                    return name
        return ""

    def run_staging_unit(self, account_urls: dict[str, str], extra_env: dict[str, str]) -> str:
        """The staging unit's one run, as systemd starts it. `account_urls`: each declared container URL -> the
        URL it has here; `extra_env`: what stands for the VM's platform (IMDS and its CA trust). Returns a line
        saying what happened; raises StagingFailed with the unit's exit code and output."""
        unit_path = f"/etc/systemd/system/{nfs_user_data.STAGE_UNIT}"
        if not self.vm_path(unit_path).is_file():
            raise StagingFailed(f"the user data wrote no {unit_path}: `systemctl enable --now` in its runcmd fails "
                                "and nothing stages the data")
        timer = self._timer_of(nfs_user_data.STAGE_UNIT)
        if not timer:
            raise StagingFailed(f"the user data enables no timer that starts {nfs_user_data.STAGE_UNIT}: nothing runs "
                                "it again once the deployer has uploaded the data")
        unit = unit_settings(self.vm_path(unit_path).read_text())
        if "ConditionPathExists" in unit and not condition_met(unit["ConditionPathExists"], self.vm_path):
            return f"skipped: ConditionPathExists={unit['ConditionPathExists']} is not met"
        for key in ("EnvironmentFile", "ExecStart"):
            if not self.vm_path(unit[key]).is_file():  # systemd: the unit fails (status=203/EXEC for ExecStart)
                raise StagingFailed(f"{nfs_user_data.STAGE_UNIT}: {key}={unit[key]} does not exist: the user data "
                                    "did not write it, so the unit fails on every start and nothing is staged")
        env = environment_file(self.vm_path(unit["EnvironmentFile"]).read_text())
        env = {name: account_urls.get(value, value) for name, value in env.items()}
        env.update(extra_env, PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME="/root",
                   LANG="C.UTF-8",
                   # The ready venv stands for the script's pip install: it must need nothing from an index.
                   PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
        opt = self.vm_path("/opt/dltrain")
        (opt / "venv").mkdir(parents=True, exist_ok=True)
        result = run_in_vm_root(self.vm_path(unit["ExecStart"]), opt, self.export, env)
        success = {0, *(int(code) for code in unit.get("SuccessExitStatus", "").split() if code.isdigit())}
        if result.returncode not in success:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-8:])
            raise StagingFailed(f"{nfs_user_data.STAGE_UNIT} exited with {result.returncode}:\n{tail}")
        said = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
        return f"{timer} started {nfs_user_data.STAGE_UNIT}: {unit['ExecStart']} exited {result.returncode}: {said}"
