"""The security invariants of one resource's own settings: storage, network, VMs, Batch, Azure ML, Key Vault.

Each check takes a resource's properties as the Pulumi engine passes them (camelCase keys, enum values as strings)
and returns None when they comply, or one line saying what is wrong; infra/core/security/resources.py's RESOURCE_TYPES names
the resource types each applies to. Role assignments: roles.py; SAS: sas.py; the firewalls' IP
and VNet rules: firewalls.py.
"""
from __future__ import annotations

from typing import Any

from infra.core.config.sections import NfsConfig

INTERNET_SOURCES = {"*", "Internet", "0.0.0.0/0", "Any", "any"}


def storage_https(props: dict[str, Any]) -> str | None:
    if props.get("enableHttpsTrafficOnly") is True:
        return None
    # NFS 4.1 on Azure Files has no TLS and needs secure transfer off; acceptable only for a FileStorage
    # account that takes no shared keys and admits nothing but the VNet.
    nfs_only = (props.get("kind") == "FileStorage" and props.get("allowSharedKeyAccess") is False
                and (props.get("networkRuleSet") or {}).get("defaultAction") == "Deny")
    return None if nfs_only else "enableHttpsTrafficOnly must be true (or: a FileStorage NFS account, no shared keys, VNet only)"


def storage_tls(props: dict[str, Any]) -> str | None:
    if props.get("minimumTlsVersion") not in ("TLS1_2", "TLS1_3"):
        return f"minimumTlsVersion is {props.get('minimumTlsVersion')!r}; it must be TLS1_2 or later"
    return None


# Encryption at host (a VM's securityProfile.encryptionAtHost) needs the subscription feature
# Microsoft.Compute/EncryptionAtHost registered, or Azure refuses the VM; an existing VM takes the change only while
# deallocated (https://learn.microsoft.com/azure/virtual-machines/disks-enable-host-based-encryption-portal).
ENCRYPTION_AT_HOST_FEATURE = "az feature register --namespace Microsoft.Compute --name EncryptionAtHost"


def encryption_at_host_line(nfs: NfsConfig) -> str | None:
    """Plan's line when the stack turns on encryption at host for its NFS VM (nfsEncryptionAtHost)."""
    if not (nfs.encryption_at_host and nfs.kind == "vm"):
        return None
    return ("nfsEncryptionAtHost is on: the subscription must have the feature Microsoft.Compute/EncryptionAtHost "
            f"registered before `pulumi up`, or Azure refuses the NFS VM (`{ENCRYPTION_AT_HOST_FEATURE}`, wait for "
            "`az feature show --namespace Microsoft.Compute --name EncryptionAtHost` to say Registered, then `az "
            "provider register --namespace Microsoft.Compute`); an NFS VM that exists already takes it only while "
            "deallocated (`az vm deallocate`, then `pulumi up`)")


def storage_no_public_blob(props: dict[str, Any]) -> str | None:
    if props.get("allowBlobPublicAccess") is not False:
        return "allowBlobPublicAccess must be false"
    return None


def storage_default_deny(props: dict[str, Any]) -> str | None:
    rules = props.get("networkRuleSet") or {}
    if rules.get("defaultAction") != "Deny":
        return "networkRuleSet.defaultAction must be Deny (admit the VNet subnets with virtualNetworkRules)"
    if not rules.get("virtualNetworkRules"):
        return "networkRuleSet has no virtualNetworkRules: the compute subnet could not reach the data"
    return None


def storage_infra_encryption(props: dict[str, Any]) -> str | None:
    if (props.get("encryption") or {}).get("requireInfrastructureEncryption") is not True:
        return "encryption.requireInfrastructureEncryption must be true"
    return None


def container_private(props: dict[str, Any]) -> str | None:
    if props.get("publicAccess") not in (None, "None"):
        return f"publicAccess is {props.get('publicAccess')!r}; containers must be private (None)"
    return None


def registry_admin_disabled(props: dict[str, Any]) -> str | None:
    if props.get("adminUserEnabled") is not False:
        return "adminUserEnabled must be false: pull with a managed identity, push with a scoped token"
    return None


def nsg_denies_internet(props: dict[str, Any]) -> str | None:
    inbound = [r for r in props.get("securityRules") or [] if r.get("direction") == "Inbound"]
    for rule in inbound:
        if rule.get("access") == "Allow" and rule.get("sourceAddressPrefix") in INTERNET_SOURCES:
            return f"rule {rule.get('name')!r} allows inbound traffic from {rule.get('sourceAddressPrefix')}"
    if not any(r.get("access") == "Deny" and r.get("sourceAddressPrefix") in INTERNET_SOURCES for r in inbound):
        return "no rule denies inbound traffic from the Internet"
    return None


def nic_no_public_ip(props: dict[str, Any]) -> str | None:
    for ip_config in props.get("ipConfigurations") or []:
        if ip_config.get("publicIPAddress"):
            return f"ipConfiguration {ip_config.get('name')!r} has a public IP; nodes and servers stay private"
    return None


def vm_no_password(props: dict[str, Any]) -> str | None:
    linux = ((props.get("osProfile") or {}).get("linuxConfiguration") or {})
    if linux.get("disablePasswordAuthentication") is not True:
        return "osProfile.linuxConfiguration.disablePasswordAuthentication must be true"
    if (props.get("osProfile") or {}).get("adminPassword"):
        return "osProfile.adminPassword is set; VMs get no password"
    return None


def batch_account_locked(props: dict[str, Any]) -> str | None:
    modes = props.get("allowedAuthenticationModes") or []
    if modes != ["AAD"]:
        return f"allowedAuthenticationModes is {modes!r}; it must be ['AAD'] (no shared keys)"
    access = ((props.get("networkProfile") or {}).get("accountAccess") or {})
    if props.get("publicNetworkAccess") != "Disabled" and access.get("defaultAction") != "Deny":
        return "networkProfile.accountAccess.defaultAction must be Deny (admit allowedIpRanges only)"
    return None


def pool_private(props: dict[str, Any]) -> str | None:
    network = props.get("networkConfiguration") or {}
    if not network.get("subnetId"):
        return "networkConfiguration.subnetId is missing: nodes must join the compute subnet"
    provision = (network.get("publicIPAddressConfiguration") or {}).get("provision")
    if provision != "NoPublicIPAddresses":
        return f"publicIPAddressConfiguration.provision is {provision!r}; it must be NoPublicIPAddresses"
    return None


def pool_image_pinned(props: dict[str, Any]) -> str | None:
    """A marketplace image by version, never `latest` (the default when none is given): Batch then resolves it
    per node, and nodes of one job could boot different images and drivers
    (imageReference.version, https://learn.microsoft.com/azure/templates/microsoft.batch/batchaccounts/pools)."""
    vm = (props.get("deploymentConfiguration") or {}).get("virtualMachineConfiguration") or {}
    image = vm.get("imageReference") or {}
    if image.get("id") or not image:
        return None  # a gallery image (its ID names its version) or no VM configuration to check
    version = str(image.get("version") or "latest")
    if version.lower() != "latest":
        return None
    return (f"imageReference.version is {version!r}: pin the image version (infra/backends/batch/cluster.py "
            "HPC_IMAGE_VERSION) so every node of a pool boots the same image and driver")


# The tag a workspace carries when the stack chose to open it (amlWorkspaceAccess: public): public access is then
# a declared decision, visible in the portal, never a default or a typo.
PUBLIC_ACCESS_TAG = "network-access"


def aml_workspace_access(props: dict[str, Any]) -> str | None:
    public_by_choice = (props.get("tags") or {}).get(PUBLIC_ACCESS_TAG) == "public"
    if props.get("publicNetworkAccess") != "Disabled" and not public_by_choice:
        return ("publicNetworkAccess must be Disabled (reached through its private endpoint in the VNet), unless the "
                f"stack opens it on purpose (amlWorkspaceAccess: public sets the tag {PUBLIC_ACCESS_TAG}: public)")
    if props.get("systemDatastoresAuthMode") != "identity":
        return "systemDatastoresAuthMode must be identity (no storage account keys in the workspace)"
    return None


def aml_compute_private(props: dict[str, Any]) -> str | None:
    compute = props.get("properties") or {}
    inner = compute.get("properties") or {}
    if not (inner.get("subnet") or {}).get("id"):
        return "properties.subnet is missing: nodes must join the compute subnet"
    if inner.get("enableNodePublicIp") is not False:
        return "enableNodePublicIp must be false"
    if inner.get("remoteLoginPortPublicAccess") != "Disabled":
        return "remoteLoginPortPublicAccess must be Disabled (no SSH into the nodes)"
    if compute.get("disableLocalAuth") is not True:
        return "disableLocalAuth must be true (Azure AD only)"
    return None


def aml_datastore_no_secret(props: dict[str, Any]) -> str | None:
    credentials = ((props.get("properties") or {}).get("credentials") or {}).get("credentialsType")
    if credentials != "None":
        return f"credentials are {credentials!r}; a datastore holds no key or SAS (credentialsType None: identity)"
    return None


def key_vault_locked(props: dict[str, Any]) -> str | None:
    vault = props.get("properties") or {}
    if vault.get("enableRbacAuthorization") is not True:
        return "enableRbacAuthorization must be true (Azure RBAC, no access policies)"
    if vault.get("enablePurgeProtection") is not True:
        return "enablePurgeProtection must be true"
    if (vault.get("networkAcls") or {}).get("defaultAction") != "Deny" and vault.get("publicNetworkAccess") != "Disabled":
        return "networkAcls.defaultAction must be Deny (admit the VNet and allowedIpRanges only)"
    return None



def blob_soft_delete(props: dict[str, Any]) -> str | None:
    """Blob and container soft delete (https://learn.microsoft.com/azure/storage/blobs/soft-delete-blob-overview,
    soft-delete-container-overview): without them a deleted container or blob is gone at once."""
    off = [key for key in ("deleteRetentionPolicy", "containerDeleteRetentionPolicy")
           if not (props.get(key) or {}).get("enabled")]
    return f"{' and '.join(off)} not enabled: a deleted blob or container could not be restored" if off else None
