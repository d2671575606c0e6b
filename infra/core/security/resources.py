"""Every resource type the program declares, each in one entry with its checks, and the one loop applying them.

`RESOURCE_TYPES` (at the end) holds, per type: what `plan` prints of it, the input that carries its own name (the
offline mocks keep that name, as azure-native does), its security checks, its service rules and where its VNet
rules sit. A new Azure resource is one entry there. `apply_checks` is the one loop over resources and checks:
the tests, `plan` and the policy pack all call it.

A resource check takes a resource's properties as the Pulumi engine passes them (camelCase keys, enum
values as strings) and returns None when they comply, or one line saying what is wrong. The checks live by
concept: one resource's own settings in invariants.py, role assignments in roles.py, SAS
lifetimes in sas.py (SAS requests are invocations rather than resources, so `plan` and the tests check
them with its `check_sas_request`).

Beside them, the service rules: values the provider's types accept but Azure refuses at the service, each with
its source (firewalls.py). `plan` and the policy pack report them before `up`, instead of `up` failing
halfway (SERVICE_CHECKS, per resource; VNET_RULE_CHECK, across a resource and the subnets it names).
"""
from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from infra.core.security.firewalls import VnetRules, batch_ip_rules, key_vault_ip_rules, storage_ip_rules
from infra.core.security.invariants import (aml_compute_private, aml_datastore_no_secret, aml_workspace_access,
                                            batch_account_locked, blob_soft_delete, container_private,
                                            key_vault_locked, nic_no_public_ip, nsg_denies_internet,
                                            pool_image_pinned, pool_private, registry_admin_disabled,
                                            storage_default_deny, storage_https, storage_infra_encryption,
                                            storage_no_public_blob, storage_tls, vm_no_password)
from infra.core.security.roles import role_not_privileged, role_on_its_resource, role_within_stack_group
from infra.core.security.sas import storage_sas_policy

Props = dict[str, Any]
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


RESOURCE_GROUP = "azure-native:resources:ResourceGroup"  # the stack's own group, whose name StackCheck compares
SUBNET = "azure-native:network:Subnet"


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
        Check("storage-https-only", "Storage accounts accept HTTPS only.", storage_https),
        Check("storage-min-tls-1-2", "Storage accounts refuse TLS below 1.2.", storage_tls),
        Check("storage-sas-policy", "Storage accounts block SAS beyond their expiration period, 7 days at most.",
              storage_sas_policy),
        Check("storage-no-public-blob-access", "No blob can be made public.", storage_no_public_blob),
        Check("storage-network-default-deny", "Storage firewall denies by default and admits the VNet.",
              storage_default_deny),
        Check("storage-infrastructure-encryption", "Storage is encrypted twice (service + infrastructure).",
              storage_infra_encryption)),
        service_rules=(Check("storage-firewall-ip-rules",
                             "Storage IP rules are public IPv4 addresses or ranges, no /31 or /32.", storage_ip_rules),),
        # https://learn.microsoft.com/azure/storage/common/storage-network-security-virtual-networks: a VNet rule
        # needs the Microsoft.Storage (or Microsoft.Storage.Global) service endpoint on the subnet.
        vnet_rules=VnetRules(("networkRuleSet", "virtualNetworkRules"), "virtualNetworkResourceId",
                             ("Microsoft.Storage", "Microsoft.Storage.Global"))),
    ResourceType("azure-native:storage:BlobContainer", ("containerName", "publicAccess"), "containerName", checks=(
        Check("blob-container-private", "Blob containers allow no anonymous access.", container_private),)),
    ResourceType("azure-native:storage:BlobServiceProperties", ("deleteRetentionPolicy.days",
                                                                "containerDeleteRetentionPolicy.days"), checks=(
        Check("storage-soft-delete", "Deleted blobs and containers stay restorable (soft delete on both).",
              blob_soft_delete),)),
    ResourceType("azure-native:storage:FileShare", ("shareName", "shareQuota"), "shareName"),
    ResourceType("azure-native:storage:Blob", ("blobName",)),
    ResourceType("azure-native:containerregistry:Registry", ("registryName", "sku.name", "adminUserEnabled"),
                 "registryName", checks=(
        Check("registry-admin-user-disabled", "Container registries have the admin user disabled.",
              registry_admin_disabled),)),
    ResourceType("azure-native:containerregistry:ScopeMap", ("actions",), "scopeMapName"),
    ResourceType("azure-native:containerregistry:Token", own_name="tokenName"),
    ResourceType("azure-native:network:VirtualNetwork", ("virtualNetworkName", "addressSpace.addressPrefixes"),
                 "virtualNetworkName"),
    ResourceType(SUBNET, ("subnetName", "addressPrefix", "serviceEndpoints.service"), "subnetName"),
    ResourceType("azure-native:network:NetworkSecurityGroup", ("securityRules.name",), checks=(
        Check("nsg-denies-internet-inbound", "NSGs deny, and never allow, inbound traffic from the Internet.",
              nsg_denies_internet),)),
    ResourceType("azure-native:network:NatGateway", ("sku.name",)),
    ResourceType("azure-native:network:PublicIPAddress", ("sku.name",)),
    ResourceType("azure-native:network:NetworkInterface", ("ipConfigurations.privateIPAllocationMethod",), checks=(
        Check("nic-no-public-ip", "Network interfaces (NFS server, nodes) have no public IP.", nic_no_public_ip),)),
    ResourceType("azure-native:network:PrivateEndpoint", ("privateLinkServiceConnections.groupIds",)),
    ResourceType("azure-native:authorization:RoleAssignment", ("principalType",), "roleAssignmentName", checks=(
        StackCheck("role-assignment-within-resource-group", "Role assignments are scoped to the stack's own "
                   "resource group or below, never another group, a subscription or management group.",
                   role_within_stack_group),
        Check("role-assignment-not-privileged", "No role assignment hands out Owner, User Access Administrator "
              "or Role Based Access Control Administrator, or any role the stack does not mean to grant.",
              role_not_privileged),
        Check("role-assignment-on-its-resource", "A role that manages a whole resource (Azure Batch Account "
              "Contributor, AzureML Compute Operator) is granted on one pool or compute cluster only.",
              role_on_its_resource))),
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
        Check("vm-no-password-login", "VMs allow no password login (keys or Entra ID only).", vm_no_password),)),
    ResourceType(BATCH_ACCOUNT, ("accountName", "allowedAuthenticationModes", "networkProfile.accountAccess.defaultAction"),
                 "accountName", checks=(
        Check("batch-account-aad-only", "The Batch account takes Azure AD only and admits listed IPs only.",
              batch_account_locked),),
        service_rules=(Check("batch-firewall-ip-rules", "Batch account IP rules are IPv4 addresses or ranges.",
                             batch_ip_rules),)),
    ResourceType("azure-native:batch:Pool", ("poolName", "vmSize", "interNodeCommunication", "taskSlotsPerNode",
                                             "networkConfiguration.publicIPAddressConfiguration.provision",
                                             "mountConfiguration.nfsMountConfiguration.source",
                                             f"{_VM_CONFIG}.imageReference.offer", f"{_VM_CONFIG}.imageReference.version",
                                             f"{_VM_CONFIG}.osDisk.diskSizeGB",
                                             f"{_VM_CONFIG}.containerConfiguration.containerImageNames",
                                             "resourceTags.team"),  # user-subscription: on the VMs Batch creates
                 "poolName", checks=(
        Check("batch-pool-private", "GPU nodes join the compute subnet and get no public IP.", pool_private),
        Check("batch-pool-image-pinned", "The pool's image is a pinned version, never `latest`.",
              pool_image_pinned))),
    ResourceType(f"{_ML}:Workspace", ("workspaceName", "publicNetworkAccess", "systemDatastoresAuthMode"),
                 "workspaceName", checks=(
        Check("aml-workspace-access", "The Azure ML workspace is reached from the VNet only unless the stack opens it "
              "(amlWorkspaceAccess: public), and holds no storage keys.", aml_workspace_access),)),
    ResourceType(f"{_ML}:Compute", ("computeName", f"{_AML_NODES}.vmSize", f"{_AML_NODES}.vmPriority",
                                    f"{_AML_NODES}.scaleSettings.maxNodeCount",
                                    f"{_AML_NODES}.scaleSettings.nodeIdleTimeBeforeScaleDown",
                                    f"{_AML_NODES}.enableNodePublicIp"), "computeName", checks=(
        Check("aml-compute-private", "Azure ML GPU nodes join the compute subnet, get no public IP and no SSH.",
              aml_compute_private),)),
    ResourceType(f"{_ML}:Datastore", ("name", "properties.containerName", "properties.credentials.credentialsType"),
                 "name", checks=(
        Check("aml-datastore-no-secret", "Azure ML datastores hold no key or SAS (identity access).",
              aml_datastore_no_secret),)),
    ResourceType(f"{_ML}:EnvironmentContainer", own_name="name"),
    ResourceType(f"{_ML}:EnvironmentVersion", ("properties.image",), "version"),
    ResourceType(VAULT, ("vaultName", "properties.enableRbacAuthorization", "properties.networkAcls.defaultAction"),
                 "vaultName", checks=(
        Check("key-vault-locked", "Key Vaults use Azure RBAC, purge protection and a deny-by-default firewall.",
              key_vault_locked),),
        service_rules=(Check("key-vault-firewall-ip-rules", "Key Vault IP rules are public IPv4 addresses or ranges.",
                             key_vault_ip_rules),),
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
