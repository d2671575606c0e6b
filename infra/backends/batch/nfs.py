"""NFS file server for the training data, the reference architecture's file server, in one of two kinds.

`vm` (default): a Linux VM without a public IP in the storage subnet. Premium SSD data disks are striped
(RAID 0) into /data, exported over NFS to the compute subnet only. cloud-init (one cloud-config document:
https://cloudinit.readthedocs.io/en/latest/reference/merging.html: parts would need `Merge-Type` headers, and
the default merge replaces one part's `write_files` with the next's) builds the array, records it in
mdadm.conf, mounts it by filesystem UUID and exports it; a systemd timer then runs the staging unit every
minute for the server's life: it stages the `data` container into /data/imagenet with the same `python -m
training stage --mark` as everyone else (fetched from the `scripts` container) whenever the container changed,
reaching storage with the VM's own managed identity (no SAS on the VM), writes /data/imagenet/.staged, which
the job waits for, and reports to `status` (the server comes with the stack, so it first reports "waiting for
data": infra/backends/batch/nfs_user_data.py). After a reboot the array, the mount and the export come back by
themselves, and so does the timer (cloud-init's runcmd runs once per instance:
https://cloudinit.readthedocs.io/en/latest/reference/modules.html#runcmd). No one holds a password
or a private key for the VM: its SSH key is generated here and its private half discarded; admins log in
with Entra ID (`az ssh vm`).

`azure-files`: a premium FileStorage account with an NFS 4.1 share, reachable from the VNet only, with
shared-key access disabled. The training job stages the data onto it before its first run.

Either way `mount_source` is what the Batch pool mounts.
"""
from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_azure_native import compute, managedidentity, network, storage

from infra.backends.batch.nfs_user_data import (ADMIN_USER, AZURE_FILES_MOUNT_OPTIONS, EXPORT_PATH, SHARE,
                                                VM_MOUNT_OPTIONS, StagingUrls, custom_data)
from infra.components import roles
from infra.core.security import sas as security_sas
from infra.core.config.sections import NfsConfig

# Azure does not support host caching on disks of 4 TiB (4096 GiB) and more
# (https://learn.microsoft.com/azure/virtual-machines/premium-storage-performance#disk-caching).
CACHING_LIMIT_GB = 4096


def data_disk_caching(size_gb: int) -> compute.CachingTypes:
    """ReadOnly caching (training reads the same files every epoch) where Azure allows it."""
    return compute.CachingTypes.READ_ONLY if size_gb < CACHING_LIMIT_GB else compute.CachingTypes.NONE


def throwaway_ssh_public_key() -> str:
    """An RSA public key whose private half is never kept: Azure requires a key, nobody needs it."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                         serialization.PublicFormat.OpenSSH).decode()


@dataclass(frozen=True)
class NfsNames:
    """Azure names: the VM and its host name (kind vm), the FileStorage account (kind azure-files)."""
    vm: str
    host: str
    account: str


@dataclass
class NfsArgs:
    nfs: NfsConfig
    resource_group_name: pulumi.Input[str]
    location: str
    tags: dict[str, str]
    names: NfsNames
    export_to: str  # the CIDR the VM exports /data to: the compute subnet
    storage_subnet_id: pulumi.Input[str]
    compute_subnet_id: pulumi.Input[str]
    container_urls: dict[str, pulumi.Input[str]]  # data, scripts, status (no SAS: the VM uses its identity)
    container_ids: dict[str, pulumi.Input[str]]  # the same containers' resource IDs, for the VM identity's roles
    writer_role_id: pulumi.Input[str] | None = None  # the stack's Blob Data Writer (roles.custom_role), for `status`


class NfsServer(pulumi.ComponentResource):
    mount_source: pulumi.Output[str]
    mount_options: str

    def __init__(self, name: str, args: NfsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("dltrain:nfs:NfsServer", name, None, opts)
        if args.nfs.kind == "vm":
            self._vm(name, args)
        else:
            self._azure_files(name, args)
        self.register_outputs({"mount_source": self.mount_source})

    def _vm(self, name: str, args: NfsArgs) -> None:
        cfg = args.nfs
        child = pulumi.ResourceOptions(parent=self)
        common = dict(resource_group_name=args.resource_group_name, location=args.location, tags=args.tags)
        self.nic = network.NetworkInterface(
            f"{name}-nic", **common, enable_accelerated_networking=True,
            ip_configurations=[network.NetworkInterfaceIPConfigurationArgs(
                name="private", subnet=network.SubnetArgs(id=args.storage_subnet_id),
                private_ip_allocation_method=network.IPAllocationMethod.DYNAMIC)],
            opts=child)
        # Its own identity, granted before the VM boots (the staging unit retries until the assignments have
        # reached storage): read `data` and `scripts`, write its report to `status`. With dataTier node-local the
        # server stages nothing (the nodes do), so its identity is granted nothing on storage.
        self.identity = managedidentity.UserAssignedIdentity(f"{name}-id", **common, opts=child)
        self.grants = [] if cfg.data_tier != "nfs" else [roles.assign(f"{name}-{container}-{label}", role=role,
                                    principal_id=self.identity.principal_id, scope=args.container_ids[container],
                                    parent=self, definition=args.writer_role_id if role == roles.BLOB_DATA_WRITER else None)
                       for container, label, role in (("data", "read", roles.BLOB_DATA_READER),
                                                      ("scripts", "read", roles.BLOB_DATA_READER),
                                                      ("status", "write", roles.BLOB_DATA_WRITER))]
        urls = args.container_urls
        data = pulumi.Output.all(urls["data"], urls["scripts"], urls["status"], self.identity.client_id).apply(
            lambda v: custom_data(args.export_to, cfg.disk_count, StagingUrls(v[0], v[1], v[2]), v[3],
                                  stage_data=cfg.data_tier == "nfs"))  # node-local: the nodes stage, not the server
        self.vm = compute.VirtualMachine(
            f"{name}-vm", **common, vm_name=args.names.vm,
            hardware_profile=compute.HardwareProfileArgs(vm_size=cfg.vm_size),
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
                    lun=lun, create_option=compute.DiskCreateOptionTypes.EMPTY, disk_size_gb=cfg.disk_size_gb,
                    caching=data_disk_caching(cfg.disk_size_gb),
                    managed_disk=compute.ManagedDiskParametersArgs(
                        storage_account_type=compute.StorageAccountTypes.PREMIUM_LRS),
                    delete_option=compute.DiskDeleteOptionTypes.DELETE) for lun in range(cfg.disk_count)]),
            os_profile=compute.OSProfileArgs(
                computer_name=args.names.host, admin_username=ADMIN_USER, custom_data=data,
                linux_configuration=compute.LinuxConfigurationArgs(
                    disable_password_authentication=True,
                    ssh=compute.SshConfigurationArgs(public_keys=[compute.SshPublicKeyArgs(
                        path=f"/home/{ADMIN_USER}/.ssh/authorized_keys", key_data=throwaway_ssh_public_key())]))),
            # Encryption at host (temp disk and disk caches encrypted on the host) only where the stack says the
            # subscription has the Microsoft.Compute/EncryptionAtHost feature: Azure refuses the VM without it
            # (https://learn.microsoft.com/azure/virtual-machines/disks-enable-host-based-encryption-portal).
            security_profile=compute.SecurityProfileArgs(
                encryption_at_host=True if cfg.encryption_at_host else None,
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
            f"{name}-entra-login", resource_group_name=args.resource_group_name, location=args.location,
            vm_name=self.vm.name, publisher="Microsoft.Azure.ActiveDirectory", type="AADSSHLoginForLinux",
            type_handler_version="1.0", auto_upgrade_minor_version=True, tags=args.tags, opts=child)
        ip = self.nic.ip_configurations.apply(lambda configs: (configs or [{}])[0].private_ip_address)
        self.mount_source = pulumi.Output.concat(ip, ":", EXPORT_PATH)
        self.mount_options = VM_MOUNT_OPTIONS

    def _azure_files(self, name: str, args: NfsArgs) -> None:
        child = pulumi.ResourceOptions(parent=self)
        self.account = storage.StorageAccount(
            f"{name}-account", account_name=args.names.account, resource_group_name=args.resource_group_name,
            location=args.location, tags=args.tags, kind=storage.Kind.FILE_STORAGE,
            sku=storage.SkuArgs(name=storage.SkuName.PREMIUM_LRS),
            # NFS has no TLS, so Azure requires secure transfer off for NFS shares; what keeps it private is
            # the firewall (compute subnet only) and no shared keys at all.
            enable_https_traffic_only=False, allow_shared_key_access=False,
            minimum_tls_version=storage.MinimumTlsVersion.TLS1_2, allow_blob_public_access=False,
            # No SAS can be signed here (no shared keys); the policy is for organisations' sasPolicy rules.
            sas_policy=storage.SasPolicyArgs(sas_expiration_period=security_sas.sas_expiration_period(1),
                                             expiration_action=storage.ExpirationAction.BLOCK),
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
            resource_group_name=args.resource_group_name, share_quota=args.nfs.disk_size_gb,
            enabled_protocols=storage.EnabledProtocols.NFS, root_squash=storage.RootSquashType.NO_ROOT_SQUASH,
            opts=child)
        self.mount_source = pulumi.Output.concat(self.account.name, ".file.core.windows.net:/", self.account.name,
                                                 "/", SHARE)
        self.mount_options = AZURE_FILES_MOUNT_OPTIONS
