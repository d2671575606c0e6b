"""The NFS file server's user data (one #cloud-config document) and the scripts and unit it carries (pure).

cloud-init (one cloud-config document: https://cloudinit.readthedocs.io/en/latest/reference/merging.html: parts
would need `Merge-Type` headers, and the default merge replaces one part's `write_files` with the next's) builds
the array, records it in mdadm.conf, mounts it by filesystem UUID and exports it. A systemd timer then runs
the staging unit every minute, for as long as the server lives: it stages the `data` container into
/data/imagenet with the same `python -m training stage --mark` as everyone else (fetched from the `scripts`
container), reaching storage with the VM's own managed identity, and reports each state to `status`
(training/data/staged.py). The server is created in the same `up` as the empty `data` container, so the
first runs report "waiting for data"; the run after the upload stages it; a later change of the container
(seen by a listing every STAGE_RECHECK_MINUTES) or a restage request (`python -m infra restage`, seen within a
minute) stages it again. The Batch backend's component (infra/backends/batch/nfs.py) puts this on the VM; tests
run it through cloud-init's own code.

With dataTier node-local (the default) the server stages nothing: each node stages the job's dataset from `data`
onto its own local volume (infra/backends/batch/spec.py, node_stage), and the share keeps checkpoints, outputs and
what the ranks share. The user data then only builds and exports /data: no staging unit, timer or stager.
"""
from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass

import yaml

from infra import REPO_ROOT
from infra.core.containers import DATASET, SCRIPTS_PREFIX
from training.data.staged import EXIT_NO_DATA

EXPORT_PATH = "/data"
ADMIN_USER = "nfsadmin"
SHARE = "data"
RAID_DEVICE = "/dev/md/dltrain"  # a named array: mdadm.conf assembles it under this name after a reboot
STAGE_UNIT = "dltrain-stage.service"
STAGE_TIMER = "dltrain-stage.timer"
STAGE_RECHECK_MINUTES = 15  # a staged container is listed again this often (infra/backends/staging.py says so)
# The stager's pins, the same file .venv and the training images install.
_STAGER_LINES = (REPO_ROOT / "training" / "requirements-stage.txt").read_text().splitlines()
STAGER_PACKAGES = " ".join(pin for pin in (line.split("#")[0].strip() for line in _STAGER_LINES) if pin)
VM_MOUNT_OPTIONS = "-o rw,hard,nfsvers=4.1,rsize=1048576,wsize=1048576"
AZURE_FILES_MOUNT_OPTIONS = "-o vers=4,minorversion=1,sec=sys,nconnect=4"


def setup_script(compute_cidr: str, disk_count: int) -> str:
    """Build /data once, export it; every step finds its result in place on a second run."""
    if disk_count == 1:
        device = 'device="${disks[0]}"'
    else:
        device = f"""device={RAID_DEVICE}
if [ ! -e "$device" ]; then
  mdadm --assemble --scan || true
fi
if [ ! -e "$device" ]; then
  mdadm --create "$device" --name=dltrain --level=0 --raid-devices={disk_count} "${{disks[@]}}" --run
fi
# Recorded in mdadm.conf and the initramfs, the array is assembled under its name at boot.
if ! grep -q "name=.*dltrain" /etc/mdadm/mdadm.conf; then
  mdadm --detail --brief "$device" >> /etc/mdadm/mdadm.conf
  update-initramfs -u
fi"""
    return f"""#!/bin/bash
# Build {EXPORT_PATH} from the data disks (RAID 0 when more than one), mount it by UUID, export it.
set -euo pipefail
disks=(/dev/disk/azure/scsi1/lun*)
{device}
blkid "$device" >/dev/null || mkfs.xfs -f "$device"
uuid=$(blkid -s UUID -o value "$device")
mkdir -p {EXPORT_PATH}
grep -q "UUID=$uuid " /etc/fstab || echo "UUID=$uuid {EXPORT_PATH} xfs defaults,nofail 0 2" >> /etc/fstab
systemctl daemon-reload
mountpoint -q {EXPORT_PATH} || mount {EXPORT_PATH}
mkdir -p /etc/exports.d
# sync: the server replies only once a write is on its disks (exports(5): "Reply to requests only after the changes
# have been committed to stable storage"), so a node's fsync of a checkpoint means the checkpoint survives the server.
echo "{EXPORT_PATH} {compute_cidr}(rw,sync,no_subtree_check,no_root_squash)" > /etc/exports.d/dltrain.exports
systemctl enable --now nfs-server
exportfs -ra
"""


def stage_script() -> str:
    """One run of the staging unit: fetch the stager, then stage the data container if it changed (or a restage
    was asked), reporting to `status`; run by the timer every minute."""
    dataset = f"{EXPORT_PATH}/{DATASET}"
    return f"""#!/bin/bash
# Stage the data container into {dataset} with the VM's managed identity when it changed; report to `status`.
set -euo pipefail
mkdir -p /opt/dltrain
cd /opt/dltrain
pins="{STAGER_PACKAGES}"
if [ ! -x /opt/dltrain/venv/bin/python ] || [ "$(cat /opt/dltrain/stager-pins 2>/dev/null)" != "$pins" ]; then
  [ -x /opt/dltrain/venv/bin/python ] || python3 -m venv /opt/dltrain/venv
  # shellcheck disable=SC2086  # one word per pin
  /opt/dltrain/venv/bin/pip install --quiet $pins
  echo "$pins" > /opt/dltrain/stager-pins
fi
# The stager comes from the scripts container (the same code the jobs run, as the last `pulumi up` uploaded it);
# one listing a run, and only blobs whose ETag changed are fetched again.
/opt/dltrain/venv/bin/python - <<'PY'
import json, os, pathlib
from azure.identity import DefaultAzureCredential
from azure.storage.blob import ContainerClient
scripts = ContainerClient.from_container_url(os.environ["SCRIPTS_CONTAINER_URL"], credential=DefaultAzureCredential())
record = pathlib.Path("scripts-etags.json")
fetched = json.loads(record.read_text()) if record.is_file() else {{}}
current = {{}}
for blob in scripts.list_blobs(name_starts_with="{SCRIPTS_PREFIX}"):
    path = pathlib.Path(blob.name)
    if fetched.get(blob.name) != blob.etag or not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(scripts.download_blob(blob.name).readall())
    current[blob.name] = blob.etag
record.write_text(json.dumps(current))
PY
# Exit status {EXIT_NO_DATA}: the container is empty (reported as "waiting for data"); the unit counts it a success.
exec /opt/dltrain/venv/bin/python -m training stage env:DATA_CONTAINER_URL {dataset} --mark \\
  --report env:STATUS_CONTAINER_URL --recheck-minutes {STAGE_RECHECK_MINUTES}
"""


STAGE_TIMEOUT_HOURS = 12  # the longest one staging run may take before systemd stops it

def stage_unit() -> str:
    """A oneshot run, started by the timer only (no [Install]): systemd leaves a run that is still going alone
    when the timer elapses (https://manpages.ubuntu.com/manpages/noble/man5/systemd.timer.5.html)."""
    dataset = f"{EXPORT_PATH}/{DATASET}"
    return f"""[Unit]
Description=Stage the training data from blob storage into {dataset} when the container changed
Wants=network-online.target
After=network-online.target nfs-server.service
RequiresMountsFor={EXPORT_PATH}

[Service]
Type=oneshot
EnvironmentFile=/etc/dltrain/stage.env
ExecStart=/usr/local/sbin/dltrain-stage
# "waiting for data" (https://manpages.ubuntu.com/manpages/noble/man5/systemd.service.5.html, SuccessExitStatus=)
SuccessExitStatus={EXIT_NO_DATA}
# A oneshot has no start timeout by default (same page, TimeoutStartSec=), and a run that hangs (a stuck
# connection) would hold the unit in "activating" for good: the timer counts from the unit's end, so staging and
# restage requests would stop. A bound far above a whole ImageNet copy; the next run resumes where it stopped.
TimeoutStartSec={STAGE_TIMEOUT_HOURS}h
"""


def stage_timer() -> str:
    """Every minute from the timer's start (each boot: timers.target) and a minute after each run ends, whatever
    its result: role assignments that have not reached storage yet, a network error, data not uploaded yet
    (OnActiveSec=, OnUnitInactiveSec=: https://manpages.ubuntu.com/manpages/noble/man5/systemd.timer.5.html).
    Not OnUnitActiveSec=: a oneshot service goes from activating straight to inactive, so a timer counting from
    its activation never fires again (https://github.com/systemd/systemd/issues/6680); OnActiveSec= anchors the
    first run, also after a restart of the timer."""
    return f"""[Unit]
Description=Check the training data container for changes every minute ({STAGE_UNIT})

[Timer]
OnActiveSec=30s
OnUnitInactiveSec=1min
Unit={STAGE_UNIT}

[Install]
WantedBy=timers.target
"""


# nfs-server must not export an empty mount point when the array did not come back.
NFS_SERVER_DROP_IN = f"[Unit]\nRequiresMountsFor={EXPORT_PATH}\n"


@dataclass(frozen=True)
class StagingUrls:
    """The containers the staging unit reads (data, scripts) and reports to (status), without SAS."""

    data: str
    scripts: str
    status: str


def stage_env(urls: StagingUrls, client_id: str) -> str:
    """What the staging unit needs; no secret (the identity's client ID picks it for DefaultAzureCredential)."""
    return "".join(f"{name}={shlex.quote(value)}\n" for name, value in (
        ("AZURE_CLIENT_ID", client_id), ("DATA_CONTAINER_URL", urls.data), ("SCRIPTS_CONTAINER_URL", urls.scripts),
        ("STATUS_CONTAINER_URL", urls.status)))


def cloud_config(compute_cidr: str, disk_count: int, urls: StagingUrls, client_id: str,
                 stage_data: bool = True) -> str:
    """The whole user data: one #cloud-config document (no MIME parts, so nothing to merge). `stage_data`: dataTier
    nfs, the server stages `data` onto the share; without it (node-local) it only builds and exports /data."""
    staging = [
        ("/usr/local/sbin/dltrain-stage", "0700", stage_script()),
        ("/etc/dltrain/stage.env", "0644", stage_env(urls, client_id)),
        (f"/etc/systemd/system/{STAGE_UNIT}", "0644", stage_unit()),
        (f"/etc/systemd/system/{STAGE_TIMER}", "0644", stage_timer()),
    ] if stage_data else []
    files = [
        ("/usr/local/sbin/dltrain-nfs-setup", "0700", setup_script(compute_cidr, disk_count)),
        *staging,
        ("/etc/systemd/system/nfs-server.service.d/dltrain.conf", "0644", NFS_SERVER_DROP_IN),
    ]
    document = {
        "package_update": True,
        "packages": ["nfs-kernel-server", "mdadm", "xfsprogs", *(["python3-venv"] if stage_data else [])],
        "write_files": [{"path": path, "permissions": mode, "content": content} for path, mode, content in files],
        "runcmd": [["/usr/local/sbin/dltrain-nfs-setup"], ["systemctl", "daemon-reload"],
                   *([["systemctl", "enable", "--now", STAGE_TIMER]] if stage_data else [])],
    }
    return "#cloud-config\n" + yaml.dump(document, Dumper=_LiteralDumper, sort_keys=False, width=1000)


class _LiteralDumper(yaml.SafeDumper):
    """Multi-line strings as `|` blocks, so the user data reads like the files it writes."""


_LiteralDumper.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))


def custom_data(compute_cidr: str, disk_count: int, urls: StagingUrls, client_id: str, stage_data: bool = True) -> str:
    return base64.b64encode(cloud_config(compute_cidr, disk_count, urls, client_id, stage_data).encode()).decode()
