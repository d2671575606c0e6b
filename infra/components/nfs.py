"""NFS file server for the training data, the reference architecture's file server, in one of two kinds.

`vm` (default): a Linux VM without a public IP in the storage subnet. Premium SSD data disks are striped
(RAID 0) into /data, exported over NFS to the compute subnet only. cloud-init (one cloud-config document:
https://cloudinit.readthedocs.io/en/latest/reference/merging.html: parts would need `Merge-Type` headers, and
the default merge replaces one part's `write_files` with the next's) builds the array, records it in
mdadm.conf, mounts it by filesystem UUID and exports it; a systemd unit then stages the `data` container into
/data/imagenet with the same `python -m training stage` as everyone else (fetched from the `scripts`
container), reaching storage with the VM's own managed identity (no SAS on the VM), and writes
/data/imagenet/.staged, which the job waits for. After a reboot the array, the mount and the export come back
by themselves, and the unit resumes staging if it had not finished (cloud-init's runcmd runs once per
instance: https://cloudinit.readthedocs.io/en/latest/reference/modules.html#runcmd). No one holds a password
or a private key for the VM: its SSH key is generated here and its private half discarded; admins log in
with Entra ID (`az ssh vm`).

`azure-files`: a premium FileStorage account with an NFS 4.1 share, reachable from the VNet only, with
shared-key access disabled. The training job stages the data onto it before its first run.

Either way `mount_source` is what the Batch pool mounts.
"""
from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass

import pulumi
import yaml
from pulumi_azure_native import compute, managedidentity, network, storage

from infra.components import roles
from infra.core import naming
from infra import REPO_ROOT
from infra.core.config import StackConfig
from infra.core.batch_spec import DATASET, SCRIPTS_PREFIX, STAGED_BLOB, STAGED_MARKER

EXPORT_PATH = "/data"
ADMIN_USER = "nfsadmin"
SHARE = "data"
RAID_DEVICE = "/dev/md/dltrain"  # a named array: mdadm.conf assembles it under this name after a reboot
STAGE_UNIT = "dltrain-stage.service"
# Azure does not support host caching on disks of 4 TiB (4096 GiB) and more
# (https://learn.microsoft.com/azure/virtual-machines/premium-storage-performance#disk-caching).
CACHING_LIMIT_GB = 4096
# The stager's pins, the same file .venv and the training images install.
_STAGER_LINES = (REPO_ROOT / "training" / "requirements-stage.txt").read_text().splitlines()
STAGER_PACKAGES = " ".join(pin for pin in (line.split("#")[0].strip() for line in _STAGER_LINES) if pin)
VM_MOUNT_OPTIONS = "-o rw,hard,nfsvers=4.1,rsize=1048576,wsize=1048576"
AZURE_FILES_MOUNT_OPTIONS = "-o vers=4,minorversion=1,sec=sys,nconnect=4"


def data_disk_caching(size_gb: int) -> compute.CachingTypes:
    """ReadOnly caching (training reads the same files every epoch) where Azure allows it."""
    return compute.CachingTypes.READ_ONLY if size_gb < CACHING_LIMIT_GB else compute.CachingTypes.NONE


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
status.upload_blob("{STAGED_BLOB}", f"staged by {{socket.gethostname()}}\n", overwrite=True)
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


def throwaway_ssh_public_key() -> str:
    """An RSA public key whose private half is never kept: Azure requires a key, nobody needs it."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                         serialization.PublicFormat.OpenSSH).decode()


@dataclass
class NfsArgs:
    config: StackConfig
    resource_group_name: pulumi.Input[str]
    storage_subnet_id: pulumi.Input[str]
    compute_subnet_id: pulumi.Input[str]
    container_urls: dict[str, pulumi.Input[str]]  # data, scripts, status (no SAS: the VM uses its identity)
    container_ids: dict[str, pulumi.Input[str]]  # the same containers' resource IDs, for the VM identity's roles


class NfsServer(pulumi.ComponentResource):
    mount_source: pulumi.Output[str]
    mount_options: str

    def __init__(self, name: str, args: NfsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("dltrain:nfs:NfsServer", name, None, opts)
        if args.config.nfs_kind == "vm":
            self._vm(name, args)
        else:
            self._azure_files(name, args)
        self.register_outputs({"mount_source": self.mount_source})

    def _vm(self, name: str, args: NfsArgs) -> None:
        cfg = args.config
        child = pulumi.ResourceOptions(parent=self)
        common = dict(resource_group_name=args.resource_group_name, location=cfg.location, tags=cfg.tags)
        self.nic = network.NetworkInterface(
            f"{name}-nic", **common, enable_accelerated_networking=True,
            ip_configurations=[network.NetworkInterfaceIPConfigurationArgs(
                name="private", subnet=network.SubnetArgs(id=args.storage_subnet_id),
                private_ip_allocation_method=network.IPAllocationMethod.DYNAMIC)],
            opts=child)
        # Its own identity, granted before the VM boots (the staging unit retries until the assignments have
        # reached storage): read `data` and `scripts`, write its report to `status`.
        self.identity = managedidentity.UserAssignedIdentity(f"{name}-id", **common, opts=child)
        key = f"{cfg.team}/{cfg.stack}/nfs"
        self.grants = [roles.assign(f"{name}-{container}-{label}", key=f"{key}/{container}", role=role,
                                    principal_id=self.identity.principal_id, scope=args.container_ids[container],
                                    parent=self)
                       for container, label, role in (("data", "read", roles.BLOB_DATA_READER),
                                                      ("scripts", "read", roles.BLOB_DATA_READER),
                                                      ("status", "write", roles.BLOB_DATA_CONTRIBUTOR))]
        urls = args.container_urls
        data = pulumi.Output.all(urls["data"], urls["scripts"], urls["status"], self.identity.client_id).apply(
            lambda v: custom_data(str(cfg.compute_subnet), cfg.nfs_disk_count, StagingUrls(v[0], v[1], v[2]), v[3]))
        self.vm = compute.VirtualMachine(
            f"{name}-vm", **common, vm_name=f"nfs-{cfg.team}-{cfg.stack}",
            hardware_profile=compute.HardwareProfileArgs(vm_size=cfg.nfs_vm_size),
            network_profile=compute.NetworkProfileArgs(network_interfaces=[
                compute.NetworkInterfaceReferenceArgs(id=self.nic.id, primary=True)]),
            storage_profile=compute.StorageProfileArgs(
                image_reference=compute.ImageReferenceArgs(publisher="Canonical", offer="ubuntu-24_04-lts",
                                                           sku="server", version="latest"),
                os_disk=compute.OSDiskArgs(create_option=compute.DiskCreateOptionTypes.FROM_IMAGE,
                                           managed_disk=compute.ManagedDiskParametersArgs(
                                               storage_account_type=compute.StorageAccountTypes.PREMIUM_LRS),
                                           delete_option=compute.DiskDeleteOptionTypes.DELETE),
                data_disks=[compute.DataDiskArgs(
                    lun=lun, create_option=compute.DiskCreateOptionTypes.EMPTY, disk_size_gb=cfg.nfs_disk_size_gb,
                    caching=data_disk_caching(cfg.nfs_disk_size_gb),
                    managed_disk=compute.ManagedDiskParametersArgs(
                        storage_account_type=compute.StorageAccountTypes.PREMIUM_LRS),
                    delete_option=compute.DiskDeleteOptionTypes.DELETE) for lun in range(cfg.nfs_disk_count)]),
            os_profile=compute.OSProfileArgs(
                computer_name=f"nfs-{cfg.team}", admin_username=ADMIN_USER, custom_data=data,
                linux_configuration=compute.LinuxConfigurationArgs(
                    disable_password_authentication=True,
                    ssh=compute.SshConfigurationArgs(public_keys=[compute.SshPublicKeyArgs(
                        path=f"/home/{ADMIN_USER}/.ssh/authorized_keys", key_data=throwaway_ssh_public_key())]))),
            security_profile=compute.SecurityProfileArgs(
                security_type=compute.SecurityTypes.TRUSTED_LAUNCH,
                uefi_settings=compute.UefiSettingsArgs(secure_boot_enabled=True, v_tpm_enabled=True)),
            # System-assigned for the Entra ID login extension, user-assigned for storage.
            identity=compute.VirtualMachineIdentityArgs(
                type=compute.ResourceIdentityType.SYSTEM_ASSIGNED_USER_ASSIGNED,
                user_assigned_identities=[self.identity.id]),
            # osProfile is fixed at creation (Azure cannot change it; a new throwaway key each run must not
            # replace the server and its data).
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["osProfile"], depends_on=self.grants))
        compute.VirtualMachineExtension(
            f"{name}-entra-login", resource_group_name=args.resource_group_name, location=cfg.location,
            vm_name=self.vm.name, publisher="Microsoft.Azure.ActiveDirectory", type="AADSSHLoginForLinux",
            type_handler_version="1.0", auto_upgrade_minor_version=True, tags=cfg.tags, opts=child)
        ip = self.nic.ip_configurations.apply(lambda configs: (configs or [{}])[0].private_ip_address)
        self.mount_source = pulumi.Output.concat(ip, ":", EXPORT_PATH)
        self.mount_options = VM_MOUNT_OPTIONS

    def _azure_files(self, name: str, args: NfsArgs) -> None:
        cfg = args.config
        child = pulumi.ResourceOptions(parent=self)
        account_name = naming.nfs_storage_account(cfg.team, cfg.stack, cfg.location)
        self.account = storage.StorageAccount(
            f"{name}-account", account_name=account_name, resource_group_name=args.resource_group_name,
            location=cfg.location, tags=cfg.tags, kind=storage.Kind.FILE_STORAGE,
            sku=storage.SkuArgs(name=storage.SkuName.PREMIUM_LRS),
            # NFS has no TLS, so Azure requires secure transfer off for NFS shares; what keeps it private is
            # the firewall (compute subnet only) and no shared keys at all.
            enable_https_traffic_only=False, allow_shared_key_access=False,
            minimum_tls_version=storage.MinimumTlsVersion.TLS1_2, allow_blob_public_access=False,
            network_rule_set=storage.NetworkRuleSetArgs(
                default_action=storage.DefaultAction.DENY, bypass=storage.Bypass.NONE,
                virtual_network_rules=[storage.VirtualNetworkRuleArgs(
                    virtual_network_resource_id=args.compute_subnet_id, action=storage.Action.ALLOW)]),
            encryption=storage.EncryptionArgs(
                key_source=storage.KeySource.MICROSOFT_STORAGE, require_infrastructure_encryption=True,
                services=storage.EncryptionServicesArgs(
                    file=storage.EncryptionServiceArgs(enabled=True, key_type=storage.KeyType.ACCOUNT))),
            opts=child)
        self.share = storage.FileShare(
            f"{name}-share", share_name=SHARE, account_name=self.account.name,
            resource_group_name=args.resource_group_name, share_quota=cfg.nfs_disk_size_gb,
            enabled_protocols=storage.EnabledProtocols.NFS, root_squash=storage.RootSquashType.NO_ROOT_SQUASH,
            opts=child)
        self.mount_source = pulumi.Output.concat(self.account.name, ".file.core.windows.net:/", self.account.name,
                                                 "/", SHARE)
        self.mount_options = AZURE_FILES_MOUNT_OPTIONS
