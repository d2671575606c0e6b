"""NFS file server for the training data, the reference architecture's file server, in one of two kinds.

`vm` (default): a Linux VM without a public IP in the storage subnet. Premium SSD data disks are striped
(RAID 0) into /data, exported over NFS to the compute subnet only. On first boot cloud-init installs what
it needs and stages the `data` container into /data/imagenet with the read-only SAS, using the same
`python -m training stage` as everyone else (fetched from the `scripts` container), then writes
/data/imagenet/.staged, which the job waits for. No one holds a password or a private key for the VM:
its SSH key is generated here and its private half discarded; admins log in with Entra ID (`az ssh vm`).

`azure-files`: a premium FileStorage account with an NFS 4.1 share, reachable from the VNet only, with
shared-key access disabled. The training job stages the data onto it before its first run.

Either way `mount_source` is what the Batch pool mounts.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import compute, network, storage

from infra import naming
from infra.config import REPO_ROOT, StackConfig
from infra.jobspec import DATASET, STAGED_MARKER

EXPORT_PATH = "/data"
ADMIN_USER = "nfsadmin"
SHARE = "data"
# The stager's pins, the same file .venv and the training images install.
_STAGER_LINES = (REPO_ROOT / "training" / "requirements-stage.txt").read_text().splitlines()
STAGER_PACKAGES = " ".join(pin for pin in (line.split("#")[0].strip() for line in _STAGER_LINES) if pin)
VM_MOUNT_OPTIONS = "-o rw,hard,nfsvers=4.1,rsize=1048576,wsize=1048576"
AZURE_FILES_MOUNT_OPTIONS = "-o vers=4,minorversion=1,sec=sys,nconnect=4"


def cloud_init(compute_cidr: str, disk_count: int) -> str:
    """cloud-config for the `vm` kind. The SAS URLs are not in it: they arrive in a separate root-only file
    (`stage_env`) so the script itself holds no secret."""
    disks = "$(ls /dev/disk/azure/scsi1/lun* | sort)"
    if disk_count == 1:
        device_setup = f"device={disks}"
    else:
        device_setup = (f"device=/dev/md0; [ -e /dev/md0 ] || mdadm --create /dev/md0 --level=0 "
                        f"--raid-devices={disk_count} {disks} --run")
    dataset = f"{EXPORT_PATH}/{DATASET}"
    script = f"""#!/bin/bash
# Build /data, export it to the compute subnet, then stage the dataset once (a reboot resumes it).
set -euo pipefail
{device_setup}
blkid "$device" >/dev/null || mkfs.xfs -f "$device"
mkdir -p {EXPORT_PATH}
grep -q " {EXPORT_PATH} " /etc/fstab || echo "$device {EXPORT_PATH} xfs defaults,nofail 0 2" >> /etc/fstab
mountpoint -q {EXPORT_PATH} || mount {EXPORT_PATH}
echo "{EXPORT_PATH} {compute_cidr}(rw,async,no_subtree_check,no_root_squash)" > /etc/exports.d/dltrain.exports
exportfs -ra
[ -f {dataset}/{STAGED_MARKER} ] && exit 0
python3 -m venv /opt/dltrain/venv
/opt/dltrain/venv/bin/pip install --quiet {STAGER_PACKAGES}
set -a; . /etc/dltrain/stage.env; set +a
cd /opt/dltrain
# The stager comes from the scripts container (the same code the jobs run), then stages the data.
/opt/dltrain/venv/bin/python - <<'PY'
import os, pathlib
from azure.storage.blob import ContainerClient
scripts = ContainerClient.from_container_url(os.environ["SCRIPTS_CONTAINER_URL"])
for blob in scripts.list_blobs(name_starts_with="training/"):
    path = pathlib.Path(blob.name); path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(scripts.download_blob(blob.name).readall())
PY
/opt/dltrain/venv/bin/python -m training stage env:DATA_CONTAINER_URL {dataset}
touch {dataset}/{STAGED_MARKER}
"""
    indented = "\n".join("      " + line if line else "" for line in script.splitlines())
    return f"""#cloud-config
package_update: true
packages: [nfs-kernel-server, mdadm, xfsprogs, python3-venv]
write_files:
  - path: /usr/local/sbin/dltrain-nfs-setup
    permissions: '0700'
    content: |
{indented}
runcmd:
  - [mkdir, -p, /etc/exports.d]
  - [/usr/local/sbin/dltrain-nfs-setup]
"""


def stage_env(data_url: str, scripts_url: str) -> str:
    """The root-only environment file with the read SAS URLs (written by cloud-init, mode 0600)."""
    return f"DATA_CONTAINER_URL='{data_url}'\nSCRIPTS_CONTAINER_URL='{scripts_url}'\n"


def custom_data(compute_cidr: str, disk_count: int, data_url: str, scripts_url: str) -> str:
    """cloud-init as a MIME multi-part: the script, plus the secret env file as a second cloud-config."""
    env_part = ("#cloud-config\nwrite_files:\n  - path: /etc/dltrain/stage.env\n    permissions: '0600'\n"
                "    content: |\n" + "".join(f"      {line}\n" for line in stage_env(data_url, scripts_url).splitlines()))
    boundary = "==dltrain=="
    parts = [cloud_init(compute_cidr, disk_count), env_part]
    body = "".join(f"--{boundary}\nContent-Type: text/cloud-config; charset=\"us-ascii\"\n"
                   f"Content-Type-Merge: list(append)+dict(recurse_array)+str()\n\n{part}\n" for part in parts)
    mime = f"Content-Type: multipart/mixed; boundary=\"{boundary}\"\nMIME-Version: 1.0\n\n{body}--{boundary}--\n"
    return base64.b64encode(mime.encode()).decode()


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
    data_url: pulumi.Input[str]  # data container URL with its read SAS (secret)
    scripts_url: pulumi.Input[str]  # scripts container URL with its read SAS (secret)


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
        data = pulumi.Output.all(args.data_url, args.scripts_url).apply(
            lambda urls: custom_data(str(cfg.compute_subnet), cfg.nfs_disk_count, urls[0], urls[1]))
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
                    caching=compute.CachingTypes.READ_ONLY,  # training reads the same files every epoch
                    managed_disk=compute.ManagedDiskParametersArgs(
                        storage_account_type=compute.StorageAccountTypes.PREMIUM_LRS),
                    delete_option=compute.DiskDeleteOptionTypes.DELETE) for lun in range(cfg.nfs_disk_count)]),
            os_profile=compute.OSProfileArgs(
                computer_name=f"nfs-{cfg.team}", admin_username=ADMIN_USER, custom_data=pulumi.Output.secret(data),
                linux_configuration=compute.LinuxConfigurationArgs(
                    disable_password_authentication=True,
                    ssh=compute.SshConfigurationArgs(public_keys=[compute.SshPublicKeyArgs(
                        path=f"/home/{ADMIN_USER}/.ssh/authorized_keys", key_data=throwaway_ssh_public_key())]))),
            security_profile=compute.SecurityProfileArgs(
                security_type=compute.SecurityTypes.TRUSTED_LAUNCH,
                uefi_settings=compute.UefiSettingsArgs(secure_boot_enabled=True, v_tpm_enabled=True)),
            identity=compute.VirtualMachineIdentityArgs(type=compute.ResourceIdentityType.SYSTEM_ASSIGNED),
            # osProfile is fixed at creation (Azure cannot change it; a new throwaway key or a renewed SAS each
            # run must not replace the server and its data).
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["osProfile"]))
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
