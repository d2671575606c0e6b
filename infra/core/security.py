"""The security invariants as pure validators: one place, used by the tests, `plan` and the policy pack.

A resource check takes a resource's properties as the Pulumi engine passes them (camelCase keys, enum
values as strings) and returns None when they comply, or one line saying what is wrong. SAS requests are
invocations rather than resources, so `plan` and the tests check them with `check_sas_request`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from infra.core.config import SAS_EXPIRY_HOURS
from infra.core.containers import SAS_PERMISSIONS

Props = dict[str, Any]
INTERNET_SOURCES = {"*", "Internet", "0.0.0.0/0", "Any", "any"}
# Provider functions that return account keys or admin passwords: the program must never call them.
KEY_RETURNING_FUNCTIONS = {
    "azure-native:storage:listStorageAccountKeys",
    "azure-native:containerregistry:listRegistryCredentials",
    "azure-native:batch:listBatchAccountKeys",
}


@dataclass(frozen=True)
class Check:
    name: str
    description: str
    resource_type: str
    validate: Callable[[Props], str | None]

    def applies_to(self, resource_type: str) -> bool:
        if self.resource_type.endswith("*"):
            return resource_type.startswith(self.resource_type[:-1])
        return resource_type == self.resource_type


def _storage_https(props: Props) -> str | None:
    if props.get("enableHttpsTrafficOnly") is True:
        return None
    # NFS 4.1 on Azure Files has no TLS and needs secure transfer off; acceptable only for a FileStorage
    # account that takes no shared keys and admits nothing but the VNet.
    nfs_only = (props.get("kind") == "FileStorage" and props.get("allowSharedKeyAccess") is False
                and (props.get("networkRuleSet") or {}).get("defaultAction") == "Deny")
    return None if nfs_only else "enableHttpsTrafficOnly must be true (or: a FileStorage NFS account, no shared keys, VNet only)"


def _storage_tls(props: Props) -> str | None:
    if props.get("minimumTlsVersion") not in ("TLS1_2", "TLS1_3"):
        return f"minimumTlsVersion is {props.get('minimumTlsVersion')!r}; it must be TLS1_2 or later"
    return None


def _storage_no_public_blob(props: Props) -> str | None:
    if props.get("allowBlobPublicAccess") is not False:
        return "allowBlobPublicAccess must be false"
    return None


def _storage_default_deny(props: Props) -> str | None:
    rules = props.get("networkRuleSet") or {}
    if rules.get("defaultAction") != "Deny":
        return "networkRuleSet.defaultAction must be Deny (admit the VNet subnets with virtualNetworkRules)"
    if not rules.get("virtualNetworkRules"):
        return "networkRuleSet has no virtualNetworkRules: the compute subnet could not reach the data"
    return None


def _storage_infra_encryption(props: Props) -> str | None:
    if (props.get("encryption") or {}).get("requireInfrastructureEncryption") is not True:
        return "encryption.requireInfrastructureEncryption must be true"
    return None


def _container_private(props: Props) -> str | None:
    if props.get("publicAccess") not in (None, "None"):
        return f"publicAccess is {props.get('publicAccess')!r}; containers must be private (None)"
    return None


def _registry_admin_disabled(props: Props) -> str | None:
    if props.get("adminUserEnabled") is not False:
        return "adminUserEnabled must be false: pull with a managed identity, push with a scoped token"
    return None


def _nsg_denies_internet(props: Props) -> str | None:
    inbound = [r for r in props.get("securityRules") or [] if r.get("direction") == "Inbound"]
    for rule in inbound:
        if rule.get("access") == "Allow" and rule.get("sourceAddressPrefix") in INTERNET_SOURCES:
            return f"rule {rule.get('name')!r} allows inbound traffic from {rule.get('sourceAddressPrefix')}"
    if not any(r.get("access") == "Deny" and r.get("sourceAddressPrefix") in INTERNET_SOURCES for r in inbound):
        return "no rule denies inbound traffic from the Internet"
    return None


def _nic_no_public_ip(props: Props) -> str | None:
    for ip_config in props.get("ipConfigurations") or []:
        if ip_config.get("publicIPAddress"):
            return f"ipConfiguration {ip_config.get('name')!r} has a public IP; nodes and servers stay private"
    return None


def _vm_no_password(props: Props) -> str | None:
    linux = ((props.get("osProfile") or {}).get("linuxConfiguration") or {})
    if linux.get("disablePasswordAuthentication") is not True:
        return "osProfile.linuxConfiguration.disablePasswordAuthentication must be true"
    if (props.get("osProfile") or {}).get("adminPassword"):
        return "osProfile.adminPassword is set; VMs get no password"
    return None


def _batch_account_locked(props: Props) -> str | None:
    modes = props.get("allowedAuthenticationModes") or []
    if modes != ["AAD"]:
        return f"allowedAuthenticationModes is {modes!r}; it must be ['AAD'] (no shared keys)"
    access = ((props.get("networkProfile") or {}).get("accountAccess") or {})
    if props.get("publicNetworkAccess") != "Disabled" and access.get("defaultAction") != "Deny":
        return "networkProfile.accountAccess.defaultAction must be Deny (admit allowedIpRanges only)"
    return None


def _pool_private(props: Props) -> str | None:
    network = props.get("networkConfiguration") or {}
    if not network.get("subnetId"):
        return "networkConfiguration.subnetId is missing: nodes must join the compute subnet"
    provision = (network.get("publicIPAddressConfiguration") or {}).get("provision")
    if provision != "NoPublicIPAddresses":
        return f"publicIPAddressConfiguration.provision is {provision!r}; it must be NoPublicIPAddresses"
    return None


def _aml_workspace_private(props: Props) -> str | None:
    if props.get("publicNetworkAccess") != "Disabled":
        return "publicNetworkAccess must be Disabled (reached through its private endpoint in the VNet)"
    if props.get("systemDatastoresAuthMode") != "identity":
        return "systemDatastoresAuthMode must be identity (no storage account keys in the workspace)"
    return None


def _aml_compute_private(props: Props) -> str | None:
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


def _aml_datastore_no_secret(props: Props) -> str | None:
    credentials = ((props.get("properties") or {}).get("credentials") or {}).get("credentialsType")
    if credentials != "None":
        return f"credentials are {credentials!r}; a datastore holds no key or SAS (credentialsType None: identity)"
    return None


def _key_vault_locked(props: Props) -> str | None:
    vault = props.get("properties") or {}
    if vault.get("enableRbacAuthorization") is not True:
        return "enableRbacAuthorization must be true (Azure RBAC, no access policies)"
    if vault.get("enablePurgeProtection") is not True:
        return "enablePurgeProtection must be true"
    if (vault.get("networkAcls") or {}).get("defaultAction") != "Deny" and vault.get("publicNetworkAccess") != "Disabled":
        return "networkAcls.defaultAction must be Deny (admit the VNet and allowedIpRanges only)"
    return None


def _team_tag(props: Props) -> str | None:
    if "tags" in props and not (props.get("tags") or {}).get("team"):
        return "tags must include 'team' (who owns and pays for it)"
    return None


RESOURCE_CHECKS: list[Check] = [
    Check("storage-https-only", "Storage accounts accept HTTPS only.",
          "azure-native:storage:StorageAccount", _storage_https),
    Check("storage-min-tls-1-2", "Storage accounts refuse TLS below 1.2.",
          "azure-native:storage:StorageAccount", _storage_tls),
    Check("storage-no-public-blob-access", "No blob can be made public.",
          "azure-native:storage:StorageAccount", _storage_no_public_blob),
    Check("storage-network-default-deny", "Storage firewall denies by default and admits the VNet.",
          "azure-native:storage:StorageAccount", _storage_default_deny),
    Check("storage-infrastructure-encryption", "Storage is encrypted twice (service + infrastructure).",
          "azure-native:storage:StorageAccount", _storage_infra_encryption),
    Check("blob-container-private", "Blob containers allow no anonymous access.",
          "azure-native:storage:BlobContainer", _container_private),
    Check("registry-admin-user-disabled", "Container registries have the admin user disabled.",
          "azure-native:containerregistry:Registry", _registry_admin_disabled),
    Check("nsg-denies-internet-inbound", "NSGs deny, and never allow, inbound traffic from the Internet.",
          "azure-native:network:NetworkSecurityGroup", _nsg_denies_internet),
    Check("nic-no-public-ip", "Network interfaces (NFS server, nodes) have no public IP.",
          "azure-native:network:NetworkInterface", _nic_no_public_ip),
    Check("vm-no-password-login", "VMs allow no password login (keys or Entra ID only).",
          "azure-native:compute:VirtualMachine", _vm_no_password),
    Check("batch-account-aad-only", "The Batch account takes Azure AD only and admits listed IPs only.",
          "azure-native:batch:BatchAccount", _batch_account_locked),
    Check("batch-pool-private", "GPU nodes join the compute subnet and get no public IP.",
          "azure-native:batch:Pool", _pool_private),
    Check("aml-workspace-private", "The Azure ML workspace is reached from the VNet only and holds no storage keys.",
          "azure-native:machinelearningservices:Workspace", _aml_workspace_private),
    Check("aml-compute-private", "Azure ML GPU nodes join the compute subnet, get no public IP and no SSH.",
          "azure-native:machinelearningservices:Compute", _aml_compute_private),
    Check("aml-datastore-no-secret", "Azure ML datastores hold no key or SAS (identity access).",
          "azure-native:machinelearningservices:Datastore", _aml_datastore_no_secret),
    Check("key-vault-locked", "Key Vaults use Azure RBAC, purge protection and a deny-by-default firewall.",
          "azure-native:keyvault:Vault", _key_vault_locked),
]
# Applies to every Azure resource type; checked on whatever carries a `tags` input.
TAG_CHECK = Check("team-tag", "Taggable resources carry the owning team's tag.", "azure-native:*", _team_tag)


def resource_violations(resource_type: str, props: Props) -> list[tuple[Check, str]]:
    found = []
    for check in [*RESOURCE_CHECKS, TAG_CHECK]:
        if check.applies_to(resource_type):
            message = check.validate(props)
            if message:
                found.append((check, message))
    return found


def check_sas_request(args: Props, now: datetime | None = None) -> str | None:
    """A `listStorageAccountServiceSAS` request: https only, least permission for its container,
    a container (not account-wide) scope, and an expiry within the allowed lifetime."""
    container = str(args.get("canonicalizedResource", "")).rsplit("/", 1)[-1]
    if container not in SAS_PERMISSIONS:
        return f"SAS for unknown container {container!r}"
    if args.get("protocols") != "https":
        return f"SAS for {container} allows {args.get('protocols')!r}; it must be https only"
    if args.get("resource") != "c":
        return f"SAS for {container} signs resource {args.get('resource')!r}; it must be the container (c)"
    extra = set(str(args.get("permissions", ""))) - set(SAS_PERMISSIONS[container])
    if extra:
        return f"SAS for {container} grants {''.join(sorted(extra))} beyond {SAS_PERMISSIONS[container]!r}"
    expiry = args.get("sharedAccessExpiryTime")
    if not expiry:
        return f"SAS for {container} has no expiry"
    now = now or datetime.now(timezone.utc)
    expires = datetime.strptime(expiry, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    if expires - now > timedelta(hours=SAS_EXPIRY_HOURS[1]):
        return f"SAS for {container} expires {expiry}, more than {SAS_EXPIRY_HOURS[1]} hours away"
    return None
