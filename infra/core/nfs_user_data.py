"""The NFS file server's user data (one #cloud-config document) and the scripts and unit it carries (pure).

cloud-init (one cloud-config document: https://cloudinit.readthedocs.io/en/latest/reference/merging.html: parts
would need `Merge-Type` headers, and the default merge replaces one part's `write_files` with the next's) builds
the array, records it in mdadm.conf, mounts it by filesystem UUID and exports it; a systemd unit then stages
the `data` container into /data/imagenet with the same `python -m training stage` as everyone else (fetched
from the `scripts` container), reaching storage with the VM's own managed identity, and reports to `status`.
The component (infra/components/nfs.py) puts this on the VM; tests run it through cloud-init's own code.
"""
from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass

import yaml

from infra import REPO_ROOT
from infra.core.batch_spec import DATASET, SCRIPTS_PREFIX, STAGED_BLOB, STAGED_MARKER

EXPORT_PATH = "/data"
ADMIN_USER = "nfsadmin"
SHARE = "data"
RAID_DEVICE = "/dev/md/dltrain"  # a named array: mdadm.conf assembles it under this name after a reboot
STAGE_UNIT = "dltrain-stage.service"
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
echo "{EXPORT_PATH} {compute_cidr}(rw,async,no_subtree_check,no_root_squash)" > /etc/exports.d/dltrain.exports
systemctl enable --now nfs-server
exportfs -ra
"""


def stage_script() -> str:
    """Stage the data container onto the export; run by the systemd unit until it succeeds once."""
    dataset = f"{EXPORT_PATH}/{DATASET}"
    return f"""#!/bin/bash
# Stage the data container into {dataset} with the VM's managed identity; resumable, then mark it complete.
set -euo pipefail
[ -x /opt/dltrain/venv/bin/python ] || python3 -m venv /opt/dltrain/venv
/opt/dltrain/venv/bin/pip install --quiet {STAGER_PACKAGES}
mkdir -p /opt/dltrain
cd /opt/dltrain
# The stager comes from the scripts container (the same code the jobs run).
/opt/dltrain/venv/bin/python - <<'PY'
import os, pathlib
from azure.identity import DefaultAzureCredential
from azure.storage.blob import ContainerClient
scripts = ContainerClient.from_container_url(os.environ["SCRIPTS_CONTAINER_URL"], credential=DefaultAzureCredential())
for blob in scripts.list_blobs(name_starts_with="{SCRIPTS_PREFIX}"):
    path = pathlib.Path(blob.name); path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(scripts.download_blob(blob.name).readall())
PY
/opt/dltrain/venv/bin/python -m training stage "$DATA_CONTAINER_URL" {dataset}
touch {dataset}/{STAGED_MARKER}
# Tell the deployer (`infra submit` and `pulumi up` submit only once this blob exists).
/opt/dltrain/venv/bin/python - <<'PY'
import os, socket
from azure.identity import DefaultAzureCredential
from azure.storage.blob import ContainerClient
status = ContainerClient.from_container_url(os.environ["STATUS_CONTAINER_URL"], credential=DefaultAzureCredential())
status.upload_blob("{STAGED_BLOB}", f"staged by {{socket.gethostname()}}\\n", overwrite=True)
PY
"""


def stage_unit() -> str:
    dataset = f"{EXPORT_PATH}/{DATASET}"
    return f"""[Unit]
Description=Stage the training data from blob storage into {dataset} (resumes after a reboot)
Wants=network-online.target
After=network-online.target nfs-server.service
RequiresMountsFor={EXPORT_PATH}
ConditionPathExists=!{dataset}/{STAGED_MARKER}

[Service]
Type=oneshot
EnvironmentFile=/etc/dltrain/stage.env
ExecStart=/usr/local/sbin/dltrain-stage
# Role assignments can take minutes to reach storage, and networks fail: try again until it is done.
Restart=on-failure
RestartSec=60

[Install]
WantedBy=multi-user.target
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


def cloud_config(compute_cidr: str, disk_count: int, urls: StagingUrls, client_id: str) -> str:
    """The whole user data: one #cloud-config document (no MIME parts, so nothing to merge)."""
    files = [
        ("/usr/local/sbin/dltrain-nfs-setup", "0700", setup_script(compute_cidr, disk_count)),
        ("/usr/local/sbin/dltrain-stage", "0700", stage_script()),
        ("/etc/dltrain/stage.env", "0644", stage_env(urls, client_id)),
        (f"/etc/systemd/system/{STAGE_UNIT}", "0644", stage_unit()),
        ("/etc/systemd/system/nfs-server.service.d/dltrain.conf", "0644", NFS_SERVER_DROP_IN),
    ]
    document = {
        "package_update": True,
        "packages": ["nfs-kernel-server", "mdadm", "xfsprogs", "python3-venv"],
        "write_files": [{"path": path, "permissions": mode, "content": content} for path, mode, content in files],
        "runcmd": [["/usr/local/sbin/dltrain-nfs-setup"], ["systemctl", "daemon-reload"],
                   ["systemctl", "enable", "--now", "--no-block", STAGE_UNIT]],
    }
    return "#cloud-config\n" + yaml.dump(document, Dumper=_LiteralDumper, sort_keys=False, width=1000)


class _LiteralDumper(yaml.SafeDumper):
    """Multi-line strings as `|` blocks, so the user data reads like the files it writes."""


_LiteralDumper.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))


def custom_data(compute_cidr: str, disk_count: int, urls: StagingUrls, client_id: str) -> str:
    return base64.b64encode(cloud_config(compute_cidr, disk_count, urls, client_id).encode()).decode()
