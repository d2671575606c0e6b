"""Every resource type the program declares, each in one entry with its checks, and the one loop applying them.

`RESOURCE_TYPES` (at the end) holds, per type: what `plan` prints of it, the input that carries its own name (the
offline mocks keep that name, as azure-native does), its security checks, its service rules and where its VNet
rules sit. A new Azure resource is one entry there. `apply_checks` is the one loop over resources and checks:
the tests, `plan` and the policy pack all call it.

A resource check takes a resource's properties as the Pulumi engine passes them (camelCase keys, enum
values as strings) and returns None when they comply, or one line saying what is wrong. SAS requests are
invocations rather than resources, so `plan` and the tests check them with `check_sas_request`.

Beside them, the service rules: values the provider's types accept but Azure refuses at the service, each with
its source. `plan` and the policy pack report them before `up`, instead of `up` failing halfway
(SERVICE_CHECKS, per resource; VNET_RULE_CHECK, across a resource and the subnets it names).
"""
from __future__ import annotations

import functools
import importlib
import inspect
import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from infra.core.config_schema import SAS_EXPIRY_HOURS
from infra.core.config_sections import NfsConfig
from infra.core.containers import SAS_PERMISSIONS
from infra.core.role_ids import RESOURCE_ROLES, ROLE_NAMES, custom_role_ids

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
    """One rule on one resource's properties; the resource types it applies to are those whose entry in
    RESOURCE_TYPES lists it (TAG_CHECK: every Azure type)."""

    name: str
    description: str
    validate: Callable[[Props], str | None]

    def message(self, subject: Subject) -> str | None:
        return self.validate(subject.props)


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


# An account's SAS expiration policy (sasPolicy: sasExpirationPeriod "DD.HH:MM:SS", expirationAction Log or Block:
# SasPolicy in the Storage REST spec, https://learn.microsoft.com/rest/api/storagerp/storage-accounts/create).
# https://learn.microsoft.com/azure/storage/common/sas-expiration-policy ("Define the SAS Expiration Action"): it
# covers user delegation, service and account SAS; "Out-of-policy SAS are those which do not have a signed start or
# have a validity interval larger than the upper limit" (interval = signed expiry - signed start); Block denies
# requests made with them, Log only records them. So every SAS the stack issues carries a signed start (the hour of
# `up`) and lives exactly sasExpiryHours, the account's period: inside it by construction, and Block is safe.
# Azure Policy's built-in "Storage SAS tokens should adhere to 7 day maximum validity" (Deny by default; github:
# Azure/azure-policy built-in-policies/policyDefinitions/Storage/EnforceStorageSasMaxExpiration7Days_Deny.json,
# /providers/Microsoft.Authorization/policyDefinitions/7aa1c9d5-3d7e-4579-8117-d85e99211757) refuses an account
# whose sasPolicy is missing, whose period is over 7.00:00:00, or whose expirationAction is not Block; the check
# below is that rule, so a stack that passes it is compliant, and sasExpiryHours is bounded by the same 7 days.
ORG_SAS_POLICY_HOURS = 7 * 24
SAS_PERIOD = re.compile(r"(\d+)\.(\d\d):(\d\d):(\d\d)")
SAS_TIME = "%Y-%m-%dT%H:%M:%SZ"


def sas_expiration_period(hours: int) -> str:
    """sasPolicy.sasExpirationPeriod for SAS that live `hours` (sasExpiryHours)."""
    return f"{hours // 24}.{hours % 24:02d}:00:00"


def sas_period_hours(period: str) -> float | None:
    """A sasExpirationPeriod (DD.HH:MM:SS) in hours, or None when it is not one."""
    match = SAS_PERIOD.fullmatch(str(period or ""))
    if not match:
        return None
    days, hours, minutes, seconds = (int(g) for g in match.groups())
    return days * 24 + hours + minutes / 60 + seconds / 3600


def sas_expiry_hours_problem(hours: int) -> str | None:
    """Why a sasExpiryHours cannot be the stack's SAS lifetime (None when it can): the account's period, with Block,
    must stay within the built-in's 7 days, and a longer-lived SAS would be blocked by it."""
    if hours <= ORG_SAS_POLICY_HOURS:
        return None
    return (f"{hours} hours is longer than the storage accounts' SAS expiration policy allows: Azure Policy's "
            "built-in \"Storage SAS tokens should adhere to 7 day maximum validity\" (Deny) requires a period of "
            f"7 days or less with expirationAction Block, which blocks any longer SAS; set {ORG_SAS_POLICY_HOURS} or "
            "less (`pulumi up` renews the SAS)")


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


def _storage_sas_policy(props: Props) -> str | None:
    """The built-in 7-day SAS rule (see ORG_SAS_POLICY_HOURS), clause by clause."""
    policy = props.get("sasPolicy") or {}
    period = sas_period_hours(policy.get("sasExpirationPeriod"))
    if period is None:
        return (f"sasPolicy.sasExpirationPeriod is {policy.get('sasExpirationPeriod')!r}: set it (DD.HH:MM:SS), or "
                "SAS of any lifetime are accepted and Azure Policy's 7-day SAS built-in denies the account")
    if period > ORG_SAS_POLICY_HOURS:
        return (f"sasPolicy.sasExpirationPeriod is {policy['sasExpirationPeriod']}, over the 7.00:00:00 Azure "
                "Policy's SAS built-in allows")
    if policy.get("expirationAction") != "Block":
        return (f"sasPolicy.expirationAction is {policy.get('expirationAction')!r}; it must be Block (Log lets an "
                "out-of-policy SAS through, and Azure Policy's 7-day SAS built-in denies the account)")
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


def _pool_image_pinned(props: Props) -> str | None:
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


def _aml_workspace_access(props: Props) -> str | None:
    public_by_choice = (props.get("tags") or {}).get(PUBLIC_ACCESS_TAG) == "public"
    if props.get("publicNetworkAccess") != "Disabled" and not public_by_choice:
        return ("publicNetworkAccess must be Disabled (reached through its private endpoint in the VNet), unless the "
                f"stack opens it on purpose (amlWorkspaceAccess: public sets the tag {PUBLIC_ACCESS_TAG}: public)")
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
    # A resource that takes tags and has none fails too: a missing `tags` input is the commonest way to lose them.
    if not (props.get("tags") or {}).get("team"):
        return "tags must include 'team' (who owns and pays for it)" if props.get("tags") else (
            "has no tags: give it the stack's (team, stack and the stack's `tags`), which cost reports group by")
    return None


@functools.lru_cache(maxsize=None)
def takes_tags(resource_type: str) -> bool:
    """Whether an azure-native resource type takes tags, as the provider's own types say (its `*Args` has a
    `tags` input); not every Azure type does (https://learn.microsoft.com/azure/azure-resource-manager/management/tag-support)."""
    package, module, kind = (resource_type.split(":") + ["", ""])[:3]
    if package != "azure-native":
        return False
    try:
        args = getattr(importlib.import_module(f"pulumi_azure_native.{module}"), f"{kind}Args")
    except (ImportError, AttributeError):
        return True  # a type this provider version does not know: check it rather than let it pass
    return "tags" in inspect.signature(args.__init__).parameters


# Applies to every Azure resource type that takes tags (takes_tags), whether or not the program gave it any.
TAG_CHECK = Check("team-tag", "Taggable resources carry the owning team's tag.", _team_tag)


# --- Role assignments: the stack grants on its own resource group and below, and never the right to grant -------

# The built-in roles that can create role assignments (Microsoft.Authorization/roleAssignments/write or
# Microsoft.Authorization/*), from https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/privileged
# (Reservations Administrator is assignable at /providers/Microsoft.Capacity only, never inside a resource group).
PRIVILEGED_ROLES = {"8e3af657-a8ff-443c-a75c-2fe8c4bcb635": "Owner",
                    "18d7d88d-d35e-4fb5-a5c3-7773c20a72d9": "User Access Administrator",
                    "f58310d9-a9f6-439a-9e8d-f62e7b41a168": "Role Based Access Control Administrator"}
RESOURCE_GROUP = "azure-native:resources:ResourceGroup"  # the stack's own group, whose name StackCheck compares


def _role_within_stack_group(props: Props, resource_group: str) -> str | None:
    """The assignment's scope is the stack's own resource group or a resource (or child) in it: the shape alone
    would admit another team's group in the same subscription. ARM IDs are case-insensitive."""
    scope = props.get("scope")
    if not isinstance(scope, str):
        return None  # not known yet (a preview): checked when it is
    if not resource_group:
        return (f"scope {scope!r} cannot be compared with the stack's resource group: the caller did not name it "
                "(Subject.resource_group)")
    within = rf"/subscriptions/[^/]+/resourceGroups/{re.escape(resource_group)}(/providers/.+)?"
    if re.fullmatch(within, scope.rstrip("/"), re.IGNORECASE):
        return None
    return (f"scope {scope!r} is not the stack's resource group {resource_group!r} or a resource in it (another "
            "group, the subscription, a management group or the tenant): grant on this stack's resources only")


def _blob_soft_delete(props: Props) -> str | None:
    """Blob and container soft delete (https://learn.microsoft.com/azure/storage/blobs/soft-delete-blob-overview,
    soft-delete-container-overview): without them a deleted container or blob is gone at once."""
    off = [key for key in ("deleteRetentionPolicy", "containerDeleteRetentionPolicy")
           if not (props.get(key) or {}).get("enabled")]
    return f"{' and '.join(off)} not enabled: a deleted blob or container could not be restored" if off else None


def _role_not_privileged(props: Props) -> str | None:
    role = str(props.get("roleDefinitionId") or "").rstrip("/").rsplit("/", 1)[-1].lower()
    if role in PRIVILEGED_ROLES:
        return (f"grants {PRIVILEGED_ROLES[role]}, which can hand out any access: the stack grants no role that "
                "creates role assignments (admins get Contributor)")
    # An allowlist beside the named denylist: other built-ins can assign roles too (e.g. Key Vault Data Access
    # Administrator), and a role the program never meant to grant is a mistake whatever it allows.
    if role and role not in ROLE_NAMES and role not in custom_role_ids(str(props.get("scope") or "")):
        return (f"grants role definition {role}, which is not one this stack grants "
                f"({', '.join(sorted(ROLE_NAMES.values()))}: infra/core/role_ids.py); add it there, with its doc "
                "link, if it is meant")
    return None


def _role_on_its_resource(props: Props) -> str | None:
    """A role that manages a whole resource (the budget guard's: RESOURCE_ROLES) only on one resource of its
    type: on the account, workspace or resource group it would reach every pool, cluster or job there."""
    role = str(props.get("roleDefinitionId") or "").rstrip("/").rsplit("/", 1)[-1].lower()
    scope = props.get("scope")
    if role not in RESOURCE_ROLES or not isinstance(scope, str):
        return None
    provider, *types = RESOURCE_ROLES[role].split("/")
    pattern = rf".*/providers/{re.escape(provider)}" + "".join(f"/{re.escape(t)}/[^/]+" for t in types)
    if re.fullmatch(pattern, scope.rstrip("/"), re.IGNORECASE):
        return None
    return (f"grants {ROLE_NAMES[role]} on {scope!r}: it is granted on one {RESOURCE_ROLES[role]} resource only "
            "(what the budget guard scales, or the one vault a Batch account uses), never on its account, workspace "
            "or resource group")


# --- Service rules: values the provider's types accept and Azure refuses at the service ---------------------------

# RFC 1918 ranges, which Storage and Key Vault IP rules refuse (their VNets reach them through VNet rules).
PRIVATE_RANGES = tuple(ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


def firewall_ip_rules(ranges: Iterable[str]) -> tuple[str, ...]:
    """allowedIpRanges as the firewalls take them: a single address bare, a /31 as its two addresses, any other
    range in CIDR form. Azure Storage refuses /31 and /32 ranges and says to give the individual addresses
    instead (https://learn.microsoft.com/azure/storage/common/storage-network-security-limitations#restrictions-for-ip-network-rules),
    so splitting a /31 admits exactly the same two addresses without asking the user to rewrite it. Key Vault
    takes "124.56.78.91 (simple IP address) or 124.56.78.0/24" (ipRules.value,
    https://learn.microsoft.com/azure/templates/microsoft.keyvault/vaults) and Batch "IPv4 address, or IPv4
    address range in CIDR format" (networkProfile ipRules, https://learn.microsoft.com/azure/templates/microsoft.batch/batchaccounts),
    so the one list serves all three firewalls."""
    rules: list[str] = []
    for text in ranges:
        network = ipaddress.IPv4Network(text, strict=True)
        rules += [str(address) for address in network] if network.prefixlen >= 31 else [str(network)]
    return tuple(dict.fromkeys(rules))  # a range given twice is one rule


def _ip_rule_problem(value: Any, *, small_ranges_refused: bool, private_refused: bool) -> str | None:
    try:
        network = ipaddress.IPv4Network(str(value), strict=True)
    except ValueError:
        return f"{value!r} is not an IPv4 address or CIDR range (IPv6 and host bits are refused)"
    if private_refused and any(network.overlaps(private) for private in PRIVATE_RANGES):
        return f"{value} is a private (RFC 1918) range, which IP rules refuse; the VNet is admitted by its subnets"
    if small_ranges_refused and "/" in str(value) and network.prefixlen >= 31:
        return (f"{value}: /31 and /32 ranges are refused; give the address(es) bare: "
                f"{', '.join(firewall_ip_rules([str(value)]))}")
    return None


def _ip_rules_check(where: str, rules: Any, key: str, **rule) -> str | None:
    for ip_rule in rules or []:
        problem = _ip_rule_problem(ip_rule.get(key), **rule)
        if problem:
            return f"{where}: {problem}"
    return None


def _storage_ip_rules(props: Props) -> str | None:
    # https://learn.microsoft.com/azure/storage/common/storage-network-security-limitations#restrictions-for-ip-network-rules:
    # public IPv4 only, no RFC 1918 range, no /31 or /32 prefix.
    return _ip_rules_check("networkRuleSet.ipRules", (props.get("networkRuleSet") or {}).get("ipRules"),
                           "iPAddressOrRange", small_ranges_refused=True, private_refused=True)


def _key_vault_ip_rules(props: Props) -> str | None:
    # https://learn.microsoft.com/azure/key-vault/general/network-security: IPv4 only, no RFC 1918 range (the
    # page says nothing of /31 or /32, and its ARM reference shows a bare address as the single-address form).
    acls = (props.get("properties") or {}).get("networkAcls") or {}
    return _ip_rules_check("properties.networkAcls.ipRules", acls.get("ipRules"), "value",
                           small_ranges_refused=False, private_refused=True)


def _batch_ip_rules(props: Props) -> str | None:
    # https://learn.microsoft.com/azure/batch/public-network-access: "a public IP address or address range in
    # CIDR notation", IPv4 (the page does not say that a private range is refused: only the form is checked).
    profile = props.get("networkProfile") or {}
    for endpoint in ("accountAccess", "nodeManagementAccess"):
        message = _ip_rules_check(f"networkProfile.{endpoint}.ipRules", (profile.get(endpoint) or {}).get("ipRules"),
                                  "value", small_ranges_refused=False, private_refused=False)
        if message:
            return message
    return None


SUBNET = "azure-native:network:Subnet"


@dataclass(frozen=True)
class VnetRules:
    """Where a resource's VNet rules sit, and the service endpoint a subnet needs before Azure accepts it there."""

    path: tuple[str, ...]  # from the resource's inputs to the list of rules; path[0] is the top-level property
    subnet_key: str  # the key of a rule that holds the subnet ID
    endpoints: tuple[str, ...]  # any of these on the subnet satisfies the service


def vnet_rule_subnet_ids(resource_type: str, props: Props) -> list[str]:
    """The subnet IDs a resource's VNet rules name (those known: a preview may not know them yet)."""
    spec = vnet_rules(resource_type)
    if spec is None:
        return []
    rules: Any = props
    for key in spec.path:
        rules = (rules or {}).get(key) if isinstance(rules, dict) else None
    return [rule[spec.subnet_key] for rule in rules or [] if isinstance(rule.get(spec.subnet_key), str)]


def check_vnet_rule_endpoints(resource_type: str, subnets: Iterable[Props]) -> str | None:
    """`subnets`: the properties of the subnets the resource's VNet rules name, as the caller resolved them
    (plan: by ID; the policy pack: the subnets the rules' property depends on)."""
    spec = vnet_rules(resource_type)
    if spec is None:
        return None
    for subnet in subnets:
        services = {endpoint.get("service") for endpoint in subnet.get("serviceEndpoints") or []}
        if not services & set(spec.endpoints):
            return (f"{'.'.join(spec.path)} admit subnet {subnet.get('addressPrefix') or subnet.get('name')!r}, which "
                    f"has no {spec.endpoints[0]} service endpoint: Azure refuses the rule (add it to the subnet's "
                    "serviceEndpoints)")
    return None


@dataclass(frozen=True)
class SubnetCheck:
    """A check across a resource and the subnets it names (one resource's properties cannot tell)."""

    name: str
    description: str
    validate: Callable[[str, Iterable[Props]], str | None]

    def message(self, subject: Subject) -> str | None:
        return self.validate(subject.type, subject.subnets)


VNET_RULE_CHECK = SubnetCheck("vnet-rule-service-endpoints",
                              "Subnets named in Storage and Key Vault VNet rules carry the service's endpoint.",
                              check_vnet_rule_endpoints)


@dataclass(frozen=True)
class StackCheck:
    """A check of one resource against the stack it belongs to: its own resource group, which the resource's
    properties do not carry (plan reads it from the stack's ResourceGroup, the policy pack from the stack's
    resources)."""

    name: str
    description: str
    validate: Callable[[Props, str], str | None]

    def message(self, subject: Subject) -> str | None:
        return self.validate(subject.props, subject.resource_group)


@dataclass(frozen=True)
class ResourceType:
    """A resource type the program declares, in one place: what `plan` prints of it, the input naming it, its checks."""

    token: str
    shown: tuple[str, ...] = ()  # dotted paths into the inputs that `plan` prints beside each resource
    own_name: str = ""  # the input that carries the resource's own name, where the program sets one
    checks: tuple[Check | StackCheck, ...] = ()  # the security invariants
    service_rules: tuple[Check, ...] = ()  # values the types accept and Azure refuses at the service
    vnet_rules: VnetRules | None = None


STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"
VAULT = "azure-native:keyvault:Vault"
BATCH_ACCOUNT = "azure-native:batch:BatchAccount"
_ML = "azure-native:machinelearningservices"
_VM_CONFIG = "deploymentConfiguration.virtualMachineConfiguration"
_AML_NODES = "properties.properties"

RESOURCE_TYPES: dict[str, ResourceType] = {t.token: t for t in [
    ResourceType(RESOURCE_GROUP, ("resourceGroupName", "location"), "resourceGroupName"),
    ResourceType(STORAGE_ACCOUNT, ("accountName", "kind", "sku.name", "minimumTlsVersion", "allowBlobPublicAccess",
                                   "networkRuleSet.defaultAction"), "accountName", checks=(
        Check("storage-https-only", "Storage accounts accept HTTPS only.", _storage_https),
        Check("storage-min-tls-1-2", "Storage accounts refuse TLS below 1.2.", _storage_tls),
        Check("storage-sas-policy", "Storage accounts block SAS beyond their expiration period, 7 days at most.",
              _storage_sas_policy),
        Check("storage-no-public-blob-access", "No blob can be made public.", _storage_no_public_blob),
        Check("storage-network-default-deny", "Storage firewall denies by default and admits the VNet.",
              _storage_default_deny),
        Check("storage-infrastructure-encryption", "Storage is encrypted twice (service + infrastructure).",
              _storage_infra_encryption)),
        service_rules=(Check("storage-firewall-ip-rules",
                             "Storage IP rules are public IPv4 addresses or ranges, no /31 or /32.", _storage_ip_rules),),
        # https://learn.microsoft.com/azure/storage/common/storage-network-security-virtual-networks: a VNet rule
        # needs the Microsoft.Storage (or Microsoft.Storage.Global) service endpoint on the subnet.
        vnet_rules=VnetRules(("networkRuleSet", "virtualNetworkRules"), "virtualNetworkResourceId",
                             ("Microsoft.Storage", "Microsoft.Storage.Global"))),
    ResourceType("azure-native:storage:BlobContainer", ("containerName", "publicAccess"), "containerName", checks=(
        Check("blob-container-private", "Blob containers allow no anonymous access.", _container_private),)),
    ResourceType("azure-native:storage:BlobServiceProperties", ("deleteRetentionPolicy.days",
                                                                "containerDeleteRetentionPolicy.days"), checks=(
        Check("storage-soft-delete", "Deleted blobs and containers stay restorable (soft delete on both).",
              _blob_soft_delete),)),
    ResourceType("azure-native:storage:FileShare", ("shareName", "shareQuota"), "shareName"),
    ResourceType("azure-native:storage:Blob", ("blobName",)),
    ResourceType("azure-native:containerregistry:Registry", ("registryName", "sku.name", "adminUserEnabled"),
                 "registryName", checks=(
        Check("registry-admin-user-disabled", "Container registries have the admin user disabled.",
              _registry_admin_disabled),)),
    ResourceType("azure-native:containerregistry:ScopeMap", ("actions",), "scopeMapName"),
    ResourceType("azure-native:containerregistry:Token", own_name="tokenName"),
    ResourceType("azure-native:network:VirtualNetwork", ("addressSpace.addressPrefixes",)),
    ResourceType(SUBNET, ("addressPrefix", "serviceEndpoints.service")),
    ResourceType("azure-native:network:NetworkSecurityGroup", ("securityRules.name",), checks=(
        Check("nsg-denies-internet-inbound", "NSGs deny, and never allow, inbound traffic from the Internet.",
              _nsg_denies_internet),)),
    ResourceType("azure-native:network:NatGateway", ("sku.name",)),
    ResourceType("azure-native:network:PublicIPAddress", ("sku.name",)),
    ResourceType("azure-native:network:NetworkInterface", ("ipConfigurations.privateIPAllocationMethod",), checks=(
        Check("nic-no-public-ip", "Network interfaces (NFS server, nodes) have no public IP.", _nic_no_public_ip),)),
    ResourceType("azure-native:network:PrivateEndpoint", ("privateLinkServiceConnections.groupIds",)),
    ResourceType("azure-native:authorization:RoleAssignment", ("principalType",), "roleAssignmentName", checks=(
        StackCheck("role-assignment-within-resource-group", "Role assignments are scoped to the stack's own "
                   "resource group or below, never another group, a subscription or management group.",
                   _role_within_stack_group),
        Check("role-assignment-not-privileged", "No role assignment hands out Owner, User Access Administrator "
              "or Role Based Access Control Administrator, or any role the stack does not mean to grant.",
              _role_not_privileged),
        Check("role-assignment-on-its-resource", "A role that manages a whole resource (Azure Batch Account "
              "Contributor, AzureML Compute Operator) is granted on one pool or compute cluster only.",
              _role_on_its_resource))),
    # The stack's custom role (role_ids.BLOB_DATA_WRITER), assignable in its resource group only.
    ResourceType("azure-native:authorization:RoleDefinition", ("permissions.actions", "permissions.dataActions"),
                 "roleDefinitionId"),
    ResourceType("azure-native:operationalinsights:Workspace", ("retentionInDays",)),
    ResourceType("azure-native:monitor:DiagnosticSetting", ("logs.category",)),
    # The budget and its guard (infra/components/budget.py); the action group's callbackUrl is a secret, never shown.
    ResourceType("azure-native:consumption:Budget", ("amount", "timeGrain", "category"), "budgetName"),
    ResourceType("azure-native:logic:Workflow", ("identity.type", "state")),
    ResourceType("azure-native:monitor:ActionGroup", ("groupShortName", "logicAppReceivers.name")),
    ResourceType("docker-build:index:Image", ("dockerfile.location", "tags", "push", "buildOnPreview")),
    ResourceType("azure-native:compute:VirtualMachine", ("vmName", "hardwareProfile.vmSize",
                                                         "storageProfile.dataDisks.diskSizeGB",
                                                         "osProfile.linuxConfiguration.disablePasswordAuthentication"),
                 "vmName", checks=(
        Check("vm-no-password-login", "VMs allow no password login (keys or Entra ID only).", _vm_no_password),)),
    ResourceType(BATCH_ACCOUNT, ("accountName", "allowedAuthenticationModes", "networkProfile.accountAccess.defaultAction"),
                 "accountName", checks=(
        Check("batch-account-aad-only", "The Batch account takes Azure AD only and admits listed IPs only.",
              _batch_account_locked),),
        service_rules=(Check("batch-firewall-ip-rules", "Batch account IP rules are IPv4 addresses or ranges.",
                             _batch_ip_rules),)),
    ResourceType("azure-native:batch:Pool", ("poolName", "vmSize", "interNodeCommunication", "taskSlotsPerNode",
                                             "networkConfiguration.publicIPAddressConfiguration.provision",
                                             "mountConfiguration.nfsMountConfiguration.source",
                                             f"{_VM_CONFIG}.imageReference.offer", f"{_VM_CONFIG}.imageReference.version",
                                             f"{_VM_CONFIG}.osDisk.diskSizeGB",
                                             f"{_VM_CONFIG}.containerConfiguration.containerImageNames"),
                 "poolName", checks=(
        Check("batch-pool-private", "GPU nodes join the compute subnet and get no public IP.", _pool_private),
        Check("batch-pool-image-pinned", "The pool's image is a pinned version, never `latest`.",
              _pool_image_pinned))),
    ResourceType(f"{_ML}:Workspace", ("workspaceName", "publicNetworkAccess", "systemDatastoresAuthMode"),
                 "workspaceName", checks=(
        Check("aml-workspace-access", "The Azure ML workspace is reached from the VNet only unless the stack opens it "
              "(amlWorkspaceAccess: public), and holds no storage keys.", _aml_workspace_access),)),
    ResourceType(f"{_ML}:Compute", ("computeName", f"{_AML_NODES}.vmSize", f"{_AML_NODES}.vmPriority",
                                    f"{_AML_NODES}.scaleSettings.maxNodeCount",
                                    f"{_AML_NODES}.scaleSettings.nodeIdleTimeBeforeScaleDown",
                                    f"{_AML_NODES}.enableNodePublicIp"), "computeName", checks=(
        Check("aml-compute-private", "Azure ML GPU nodes join the compute subnet, get no public IP and no SSH.",
              _aml_compute_private),)),
    ResourceType(f"{_ML}:Datastore", ("name", "properties.containerName", "properties.credentials.credentialsType"),
                 "name", checks=(
        Check("aml-datastore-no-secret", "Azure ML datastores hold no key or SAS (identity access).",
              _aml_datastore_no_secret),)),
    ResourceType(f"{_ML}:EnvironmentContainer", own_name="name"),
    ResourceType(f"{_ML}:EnvironmentVersion", ("properties.image",), "version"),
    ResourceType(VAULT, ("vaultName", "properties.enableRbacAuthorization", "properties.networkAcls.defaultAction"),
                 "vaultName", checks=(
        Check("key-vault-locked", "Key Vaults use Azure RBAC, purge protection and a deny-by-default firewall.",
              _key_vault_locked),),
        service_rules=(Check("key-vault-firewall-ip-rules", "Key Vault IP rules are public IPv4 addresses or ranges.",
                             _key_vault_ip_rules),),
        # https://learn.microsoft.com/azure/key-vault/general/overview-vnet-service-endpoints: the subnet needs the
        # Microsoft.KeyVault endpoint, else ARM answers SubnetsHaveNoServiceEndpointsConfigured.
        vnet_rules=VnetRules(("properties", "networkAcls", "virtualNetworkRules"), "id", ("Microsoft.KeyVault",))),
    # Dynamic resources: the training job's inputs, the name generation (the ACR token password has none).
    ResourceType("pulumi-python:dynamic:Resource", ("framework", "nodes", "gpu_sku", "retries", "generation")),
]}

# The order `plan` reports them in.
RESOURCE_CHECKS: list[Check | StackCheck] = [check for t in RESOURCE_TYPES.values() for check in t.checks]
SERVICE_CHECKS: list[Check] = [check for token in (STORAGE_ACCOUNT, VAULT, BATCH_ACCOUNT)
                               for check in RESOURCE_TYPES[token].service_rules]
# Every check that looks at one resource: the security invariants, the service rules, the tag.
PER_RESOURCE_CHECKS: list[Check | StackCheck] = [*RESOURCE_CHECKS, *SERVICE_CHECKS, TAG_CHECK]


def vnet_rules(resource_type: str) -> VnetRules | None:
    entry = RESOURCE_TYPES.get(resource_type)
    return entry.vnet_rules if entry else None


@dataclass(frozen=True)
class Subject:
    """One declared resource as the checks see it."""

    type: str
    props: Props
    name: str = ""  # how the caller names it in a finding (plan: the resource's name; the pack: its URN)
    subnets: tuple[Props, ...] = ()  # the subnets its VNet rules name, as the caller resolved them
    resource_group: str = ""  # the stack's own resource group's name, as the caller resolved it (StackCheck)


@dataclass(frozen=True)
class Finding:
    check: Check | SubnetCheck | StackCheck
    subject: Subject
    message: str | None  # None: the subject complies


def _applies(check: Check | SubnetCheck | StackCheck, subject: Subject) -> bool:
    if isinstance(check, SubnetCheck):
        return vnet_rules(subject.type) is not None
    if check is TAG_CHECK:  # every Azure type that takes tags, with or without a `tags` input
        return takes_tags(subject.type)
    entry = RESOURCE_TYPES.get(subject.type)
    return entry is not None and check in (*entry.checks, *entry.service_rules)


def apply_checks(subjects: Iterable[Subject],
                 checks: Iterable[Check | SubnetCheck | StackCheck] = (*PER_RESOURCE_CHECKS, VNET_RULE_CHECK)
                 ) -> list[Finding]:
    """Every (check, subject) pair where the check applies, check by check in the order given: the one loop the
    tests, `plan` and the policy pack apply the checks with."""
    subjects = list(subjects)
    return [Finding(check, subject, check.message(subject))
            for check in checks for subject in subjects if _applies(check, subject)]


def check_sas_request(args: Props, now: datetime | None = None,
                      period_hours: int = ORG_SAS_POLICY_HOURS) -> str | None:
    """A `listStorageAccountServiceSAS` request: https only, least permission for its container,
    a container (not account-wide) scope, a signed start, and a validity (expiry - start) within the account's
    SAS expiration period `period_hours`, which Block enforces (an SAS without a start is out of policy too)."""
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
    expiry, start = args.get("sharedAccessExpiryTime"), args.get("sharedAccessStartTime")
    if not expiry:
        return f"SAS for {container} has no expiry"
    if not start:
        return (f"SAS for {container} has no signed start: the account's SAS expiration policy (Block) refuses "
                "every request made with it")
    now = now or datetime.now(timezone.utc)
    expires = datetime.strptime(expiry, SAS_TIME).replace(tzinfo=timezone.utc)
    starts = datetime.strptime(start, SAS_TIME).replace(tzinfo=timezone.utc)
    if expires - starts > timedelta(hours=period_hours):
        return (f"SAS for {container} is valid {start} to {expiry}, longer than the account's SAS expiration "
                f"period ({period_hours} hours), which blocks it")
    if expires - now > timedelta(hours=SAS_EXPIRY_HOURS[1]):
        return f"SAS for {container} expires {expiry}, more than {SAS_EXPIRY_HOURS[1]} hours away"
    return None
