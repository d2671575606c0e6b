"""Cluster: the Azure Batch account and its InfiniBand GPU pool (Batch AI, the reference's cluster
service, ran on Azure Batch and was retired; a Batch pool is what it was).

The account takes Azure AD only (no shared keys) and admits the deployers' IPs only. The pool: the GPU size
from the catalog, Microsoft's HPC Ubuntu image (InfiniBand and GPU drivers), Docker-compatible containers
pulled from the registry with the pool's managed identity, inter-node communication for MPI, one task
slot per node (a node belongs to one training job), nodes in the compute subnet without public IPs, the
NFS share mounted at $AZ_BATCH_NODE_MOUNTS_DIR/data, and an autoscale formula that sizes the pool from the
nodes the queued jobs ask for (batch_spec.autoscale_formula). Azure cannot change most of a pool in place, so
a change to those properties replaces the pool (when no job runs on it).

The HPC image keeps Docker's data root on the OS disk (/var/lib/docker, not the temporary disk as Batch's own
container images do: https://learn.microsoft.com/azure/batch/batch-docker-container-workloads), and a CUDA
devel training image is tens of GB unpacked: the OS disk is sized for the images (POOL_OS_DISK_GB, in
infra/core/backend_facts.py), and a node prefetches only the image of the job `up` launches (another framework's
image is pulled when a job asks for it).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

import pulumi
from pulumi_azure_native import authorization, batch, keyvault

from infra.components import roles
from infra.components.name_generation import NameGeneration, proposed_generation
from infra.components.propagation import Propagation
from infra.backends.batch import spec as batch_spec
from infra.core.security import firewalls as security_firewalls
from infra.core.backend_facts import POOL_OS_DISK_GB
from infra.core.config import sections as config_sections
from infra.core.config.sections import NfsConfig, NodesConfig, TrainingConfig

POOL = "gpu"
# The Microsoft.Batch API version the account and pool are declared with. pulumi-azure-native 3.29.0, the newest
# release on PyPI (checked 2026-11-23), calls 2024-07-01 for both ("Uses Azure REST API version 2024-07-01" in their
# docstrings), ships no versioned batch submodule, and names 2025-06-01 among the versions reachable only through a
# local SDK (`pulumi package add azure-native batch 2025-06-01`, which needs the Pulumi CLI: it cannot be downloaded
# here, so that SDK is not generated). https://github.com/Azure/Batch/issues/140 adds "API versions prior to
# 2025-06-01" to Batch's retirements (comment of 2026-05-15): the version stays, plan says so
# (api_version_warning), and tests/infra/backends/batch/test_cluster.py reads the SDK's version, so an
# azure-native release that moves it fails there until this line follows. Left open in issue 25.
BATCH_API_VERSION = "2024-07-01"
BATCH_API_KEPT_FROM = "2025-06-01"  # Azure/Batch issue 140: versions before it retire


def api_version_warning() -> str | None:
    """Plan's line while the account and pool are declared with an API version Batch retires."""
    if BATCH_API_VERSION >= BATCH_API_KEPT_FROM:  # ISO dates compare as strings
        return None
    return (f"The Batch account and pool are declared with Microsoft.Batch API {BATCH_API_VERSION} "
            f"(pulumi-azure-native's batch module), which Azure retires with every version before "
            f"{BATCH_API_KEPT_FROM} (https://github.com/Azure/Batch/issues/140): once it is off, `up` cannot create or change them; moving needs "
            f"`pulumi package add azure-native batch {BATCH_API_KEPT_FROM}` or an azure-native release that "
            "declares it (infra/backends/batch/cluster.py).")
# Ubuntu-HPC 24.04 (https://github.com/Azure/azhpc-images: ubuntu/ubuntu-24.x) with its node agent: Batch's
# support of Ubuntu 22.04 is on its retirement list (https://github.com/Azure/Batch/issues/140, 2026-05-15).
# Pinned, never `latest` ("A value of 'latest' can be specified to select the latest version of an image. If
# omitted, the default is 'latest'": imageReference.version, https://learn.microsoft.com/azure/templates/microsoft.batch/batchaccounts/pools):
# with `latest` every new node may boot a newer image, driver included, than the nodes beside it in the same
# job; a new image arrives as a change to this line, reviewed and replacing the pool. The marketplace version is
# 24.04.<release tag> of the azhpc-images release (tag ubuntu-hpc-2026072901); that release's versions.json gives
# Ubuntu 24.04 x86_64 the NVIDIA driver 580.173.02 (R580, which CUDA 13 needs: images/pytorch.Dockerfile is CUDA 13.0)
# and CUDA 13.0 (https://github.com/Azure/azhpc-images/blob/ubuntu-hpc-2026072901/versions.json). Azure lists the
# versions a region offers with `az vm image list --publisher microsoft-dsvm --offer ubuntu-hpc --sku 2404 --all`
# (not reachable here: the version is the release's, not read from a region's list); an old version can leave
# the marketplace, and then creating a pool of it fails: move the pin forward (preflight checks the region offers it:
# infra/core/preflight/image.py).
HPC_IMAGE_VERSION = "24.04.2026072901"
HPC_IMAGE = batch.ImageReferenceArgs(publisher="microsoft-dsvm", offer="ubuntu-hpc", sku="2404",
                                     version=HPC_IMAGE_VERSION)
NODE_AGENT = "batch.node.ubuntu 24.04"
AUTOSCALE_INTERVAL = "PT5M"
# batchPoolAllocation -> the account's poolAllocationMode ("For most cases, you should use the default Batch service
# pool allocation mode": https://learn.microsoft.com/azure/batch/batch-account-create-portal, the default here).
POOL_ALLOCATION = {"batch-service": batch.PoolAllocationMode.BATCH_SERVICE,
                   "user-subscription": batch.PoolAllocationMode.USER_SUBSCRIPTION}
# What user-subscription mode needs (USER_SUBSCRIPTION_DOC, section "Configure user subscription mode"; read in
# MicrosoftDocs/azure-docs articles/batch/batch-account-create-portal.md at commit 02f6e1bf):
# - Azure AD authentication only: "If the mode is UserSubscription, clients must use Microsoft Entra ID"
#   (BatchAccountCreateParameters.poolAllocationMode); the account here allows AAD only in either mode.
# - "an Azure Key Vault ... in the same subscription and region as the Batch account", referenced by the account
#   (keyVaultReference {id, url}), and the "Microsoft Azure Batch" service principal allowed "a minimum of Get, List,
#   Set, and Delete" secret permissions ("also select Recover" with soft delete). The doc version read asks for a
#   vault access policy; this vault uses Azure RBAC (as every vault of the project: security/resources.py key-vault-locked)
#   and grants the same secret actions with Key Vault Secrets Officer on this vault alone. NOT VERIFIED against
#   the service that an RBAC vault is accepted (the portal's own flow offers both permission models).
#   The vault's firewall denies all but trusted Azure services: "Azure Batch ... Key Vault for User Subscription
#   Batch accounts" is one (https://learn.microsoft.com/azure/key-vault/general/overview-vnet-service-endpoints#
#   trusted-services).
# - "register your subscription with Batch": the service principal's role on the whole subscription, once per
#   subscription ("You need Owner permissions in the subscription"). Not declared here: a stack grants on its own
#   resource group only (security/resources.py role-assignment-in-stack-group), and a second stack's identical assignment
#   would be refused (RoleAssignmentExists). The doc version read names Contributor or Owner; the narrower built-in
#   "Azure Batch Service Orchestration Role" (BATCH_ORCHESTRATION_ROLE, "Grants the required permissions to Azure
#   Batch Resource Provider to manage compute and other backing resources in the subscription", built in since
#   2024-09) is the one plan names and preflight accepts beside them.
USER_SUBSCRIPTION_DOC = "https://learn.microsoft.com/azure/batch/batch-account-create-portal"
BATCH_SERVICE_APP_ID = config_sections.BATCH_SERVICE_APP_ID  # "Microsoft Azure Batch", the same in every tenant
BATCH_ORCHESTRATION_ROLE = "a35466a1-cfd6-450a-b35e-683fcdf30363"
# Account properties only Batch Account - Create takes ("Existing accounts cannot be updated with this API and should
# instead be updated with the Update Batch Account API", whose body has neither:
# https://learn.microsoft.com/rest/api/batchmanagement/batch-account/create and .../update): a changed
# batchPoolAllocation (or the vault it references) replaces the account, deleted first since its name is fixed.
ACCOUNT_REPLACE_ON_CHANGES = ["poolAllocationMode", "keyVaultReference"]
# Pool properties Azure Batch cannot update in place (anything else is patched).
REPLACE_ON_CHANGES = ["vmSize", "deploymentConfiguration", "networkConfiguration", "interNodeCommunication",
                      "taskSlotsPerNode", "mountConfiguration", "userAccounts", "identity"]


def account_ip_rules(allowed: tuple[str, ...], node_egress_ip: str | None) -> list[str]:
    """The account endpoint's ipRules: the deployers' allowedIpRanges and the nodes' egress address. A node calls the
    account's data plane itself when it keeps a failed node out (training/cluster/keep_out.py), from its private
    address through the NAT gateway, so the account sees the gateway's public IP, and "IP network rules are
    configured on the public endpoints" only (https://learn.microsoft.com/azure/batch/public-network-access; the same
    page: for the node management endpoint "you'll need to know the public IP address(es) ... used by Batch pool's
    internet outbound access"). Chosen over a private endpoint for the account: the traffic already leaves by that
    one static address, which the stack owns and only its own subnets use, while a private endpoint would add a
    privatelink.batch.azure.com DNS zone linked to the VNet and a billed endpoint for the one call a failed attempt
    makes."""
    rules = list(security_firewalls.firewall_ip_rules(allowed))
    return rules + [node_egress_ip] if node_egress_ip and node_egress_ip not in rules else rules


@dataclass
class ClusterArgs:
    nodes: NodesConfig  # the pool's size and autoscale bounds
    training: TrainingConfig  # the launched job's image (prefetched) and how long a node waits for the data
    nfs: NfsConfig  # where the ranks read the data (dataTier) and whether a node copies it from NFS (dataLocalCache)
    resource_group_name: pulumi.Input[str]
    location: str
    tags: dict[str, str]
    account_name: str
    allowed_ip_ranges: tuple[str, ...]  # the deployers' egress (allowedIpRanges), admitted by the account
    compute_subnet_id: pulumi.Input[str]
    registry_server: pulumi.Input[str]
    image_names: dict[str, pulumi.Input[str]]  # name:tag if built, name@digest if imported (Registry.image_names)
    pull_identity_id: pulumi.Input[str]
    nfs_source: pulumi.Input[str]
    nfs_options: str
    depends_on: list[pulumi.Resource]  # what the nodes need first (the pull permission, the pushed images)
    # user-subscription: the account's Key Vault's name from the stack's name generation (naming.key_vault)
    key_vault_name: Callable[[str], str] | None = None
    now: datetime | None = None  # proposes the name generation on a stack's first `up`; tests pin it
    # The NAT gateway's public address, the nodes' only way out: admitted by the account (account_ip_rules).
    node_egress_ip: pulumi.Input[str] | None = None


class Cluster(pulumi.ComponentResource):
    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("dltrain:cluster:Cluster", name, None, opts)
        nodes = args.nodes
        child = pulumi.ResourceOptions(parent=self)
        self._name = name
        self.key_vault = self.vault_grant = self.vault_wait = None
        if nodes.pool_allocation == "user-subscription":
            self.key_vault, self.vault_grant = self._create_vault(args)
            # The account checks its vault when it is created: it waits out the grant's propagation (propagation.py).
            self.vault_wait = Propagation(f"{name}-kv-grant-propagation", self.vault_grant.id,
                                          opts=pulumi.ResourceOptions(parent=self))
        self.account = batch.BatchAccount(
            f"{name}-batch", account_name=args.account_name,
            resource_group_name=args.resource_group_name, location=args.location, tags=args.tags,
            pool_allocation_mode=POOL_ALLOCATION[nodes.pool_allocation],  # batchPoolAllocation (plan says why)
            # keyVaultReference {id, url}: the URI the vault itself reports (properties.vaultUri, "The URI of the vault
            # for performing operations on keys and secrets": https://learn.microsoft.com/azure/templates/
            # microsoft.keyvault/vaults), not one formed by hand: a sovereign cloud's suffix differs.
            # (https://learn.microsoft.com/azure/key-vault/general/about-keys-secrets-certificates#object-identifiers).
            key_vault_reference=batch.KeyVaultReferenceArgs(
                id=self.key_vault.id, url=self.key_vault.properties.apply(lambda p: p.vault_uri))
            if self.key_vault else None,
            allowed_authentication_modes=[batch.AuthenticationMode.AAD],  # Azure AD only: no account keys
            identity=batch.BatchAccountIdentityArgs(type=batch.ResourceIdentityType.SYSTEM_ASSIGNED),
            public_network_access=batch.PublicNetworkAccessType.ENABLED,
            network_profile=batch.NetworkProfileArgs(account_access=batch.EndpointAccessProfileArgs(
                default_action=batch.EndpointAccessDefaultAction.DENY,
                ip_rules=pulumi.Output.from_input(args.node_egress_ip).apply(
                    lambda egress: [batch.IPRuleArgs(action=batch.IPRuleAction.ALLOW, value=rule)
                                    for rule in account_ip_rules(args.allowed_ip_ranges, egress)])),
                # The node management endpoint (simplified node communication) is called by the pool's nodes only,
                # all from the NAT gateway's address: "To configure IP network rules for node management endpoint,
                # you'll need to know the public IP address(es) or address range(s) used by Batch pool's internet
                # outbound access" (https://learn.microsoft.com/azure/batch/public-network-access). Without rules it
                # admits the Internet.
                node_management_access=batch.EndpointAccessProfileArgs(
                    default_action=batch.EndpointAccessDefaultAction.DENY,
                    ip_rules=[batch.IPRuleArgs(action=batch.IPRuleAction.ALLOW, value=args.node_egress_ip)])
                if args.node_egress_ip is not None else None),
            opts=pulumi.ResourceOptions(parent=self,
                                        depends_on=[self.vault_grant, self.vault_wait] if self.vault_wait else None,
                                        replace_on_changes=ACCOUNT_REPLACE_ON_CHANGES, delete_before_replace=True))
        self.pool = batch.Pool(
            f"{name}-pool", account_name=self.account.name, resource_group_name=args.resource_group_name,
            pool_name=POOL, display_name=f"{nodes.sku.gpus}x {nodes.sku.gpu_model} per node ({nodes.gpu_sku})",
            vm_size=nodes.gpu_sku, tags=args.tags,  # the pool resource's own ARM tags
            # In user-subscription mode Batch creates the VMs, disks and NICs in the team's subscription, and only
            # resourceTags reach them ("these tags are propagated to the backing Azure resources associated with the
            # pool. This property can only be specified when the Batch account was created with the
            # poolAllocationMode property set to 'UserSubscription'": Pool.resourceTags, azure-native batch 2024-07-01,
            # https://learn.microsoft.com/azure/templates/microsoft.batch/batchaccounts/pools): cost reports by team,
            # and a tag-requiring Deny policy, see the team's tags on them. Batch-service mode refuses the property.
            resource_tags=args.tags if nodes.pool_allocation == "user-subscription" else None,
            deployment_configuration=batch.DeploymentConfigurationArgs(
                virtual_machine_configuration=batch.VirtualMachineConfigurationArgs(
                    image_reference=HPC_IMAGE, node_agent_sku_id=NODE_AGENT,
                    # The temporary disk (and, on Linux, the other partitions encrypted at boot) encrypted on the
                    # node: "On Linux pool, only TemporaryDisk is supported", and only for marketplace images like
                    # this one (DiskEncryptionConfiguration, https://learn.microsoft.com/azure/batch/disk-encryption).
                    # The OS disk is a managed disk, encrypted at rest by Azure Storage in any case.
                    disk_encryption_configuration=batch.DiskEncryptionConfigurationArgs(
                        targets=[batch.DiskEncryptionTarget.TEMPORARY_DISK]),
                    os_disk=batch.OSDiskArgs(
                        disk_size_gb=POOL_OS_DISK_GB, caching=batch.CachingType.READ_WRITE,
                        managed_disk=batch.ManagedDiskArgs(storage_account_type=batch.StorageAccountType.PREMIUM_LRS)),
                    container_configuration=batch.ContainerConfigurationArgs(
                        type=batch.ContainerType.DOCKER_COMPATIBLE,
                        # Prefetched when a node starts: the launched job's image only.
                        container_image_names=[args.image_names[args.training.image]],
                        container_registries=[batch.ContainerRegistryArgs(
                            registry_server=args.registry_server,
                            identity_reference=batch.ComputeNodeIdentityReferenceArgs(
                                resource_id=args.pull_identity_id))]))),
            identity=batch.BatchPoolIdentityArgs(type=batch.PoolIdentityType.USER_ASSIGNED,
                                                 user_assigned_identities=[args.pull_identity_id]),
            inter_node_communication=batch.InterNodeCommunicationState.ENABLED,
            task_slots_per_node=1,
            network_configuration=batch.NetworkConfigurationArgs(
                subnet_id=args.compute_subnet_id, enable_accelerated_networking=True,
                public_ip_address_configuration=batch.PublicIPAddressConfigurationArgs(
                    provision=batch.IPAddressProvisioningType.NO_PUBLIC_IP_ADDRESSES)),
            # Nodes call the Batch service outbound (through the NAT gateway); nothing calls in.
            target_node_communication_mode=batch.NodeCommunicationMode.SIMPLIFIED,
            mount_configuration=[batch.MountConfigurationArgs(nfs_mount_configuration=batch.NFSMountConfigurationArgs(
                source=args.nfs_source, relative_mount_path=batch_spec.NFS_MOUNT, mount_options=args.nfs_options))],
            scale_settings=batch.ScaleSettingsArgs(auto_scale=batch.AutoScaleSettingsArgs(
                formula=batch_spec.autoscale_formula(nodes.min_nodes, nodes.max_nodes, nodes.spot,
                                                     args.training.allocation_timeout_minutes),
                evaluation_interval=AUTOSCALE_INTERVAL)),
            start_task=batch.StartTaskArgs(
                # dataTier node-local: the node's local volume (batch_spec.local_volume_command) after the health checks
                command_line=batch_spec.start_task_command(args.nfs.data_local_cache, args.training.data_wait_minutes,
                                                         nodes.sku, args.nfs.data_tier),
                # A node whose start task (the node health checks included) still fails after the retries is
                # left unusable and takes no task (BatchStartTask.waitForSuccess, Batch REST spec 2025-06-01:
                # https://github.com/Azure/azure-rest-api-specs/tree/main/specification/batch/data-plane).
                wait_for_success=True,
                max_task_retry_count=2,
                user_identity=batch.UserIdentityArgs(auto_user=batch.AutoUserSpecificationArgs(
                    scope=batch.AutoUserScope.POOL, elevation_level=batch.ElevationLevel.ADMIN))),
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.depends_on,
                                        replace_on_changes=REPLACE_ON_CHANGES, delete_before_replace=True))
        self.endpoint = self.account.account_endpoint
        self.register_outputs({"batch_account": self.account.name, "pool": self.pool.name,
                               "endpoint": self.endpoint, "key_vault": self.key_vault.id if self.key_vault else ""})

    def _create_vault(self, args: ClusterArgs) -> tuple[keyvault.Vault, authorization.RoleAssignment]:
        """The user-subscription account's Key Vault (USER_SUBSCRIPTION_DOC: same subscription and region) and the
        Batch service's grant on it. RBAC, purge protection and a deny-by-default firewall as every vault here
        (security/resources.py: key-vault-locked); only trusted Azure services, Batch among them, pass it: nobody else needs
        the vault. A deleted vault stays recoverable, and with purge protection unpurgeable, for its retention
        days (7, the least Azure allows: https://learn.microsoft.com/azure/key-vault/general/soft-delete-overview),
        holding its global name: so the name carries the stack's name generation (infra/components/
        name_generation.py), and a stack destroyed and brought up again within those days asks for a new one
        (`python -m infra leftovers` lists the old one until its purge date)."""
        if args.key_vault_name is None:
            raise ValueError("user-subscription mode needs ClusterArgs.key_vault_name")
        self.names = NameGeneration(f"{self._name}-names",
                                    proposed_generation(args.now or datetime.now(timezone.utc)),
                                    opts=pulumi.ResourceOptions(parent=self))
        tenant = authorization.get_client_config_output(opts=pulumi.InvokeOutputOptions(parent=self)).tenant_id
        vault = keyvault.Vault(
            f"{self._name}-kv", resource_group_name=args.resource_group_name, location=args.location,
            tags=args.tags, vault_name=self.names.generation.apply(args.key_vault_name),
            properties=keyvault.VaultPropertiesArgs(
                tenant_id=tenant, sku=keyvault.SkuArgs(family="A", name="standard"),
                enable_rbac_authorization=True, enable_soft_delete=True, enable_purge_protection=True,
                soft_delete_retention_in_days=7, public_network_access="Enabled",  # firewalled: trusted services
                network_acls=keyvault.NetworkRuleSetArgs(default_action="Deny", bypass="AzureServices")),
            opts=pulumi.ResourceOptions(parent=self))
        grant = roles.assign(f"{self._name}-batch-service-kv", role=roles.KEY_VAULT_SECRETS_OFFICER,
                             principal_id=args.nodes.batch_service_object_id, scope=vault.id, parent=self,
                             description="The Batch service (Microsoft Azure Batch) keeps the user-subscription "
                                         "account's secrets in its Key Vault (batch-account-create-portal)")
        return vault, grant

    def grant(self, label: str, principal_id: pulumi.Input[str], role: str, *, principal_type: str,
              description: str) -> authorization.RoleAssignment:
        """A principal's role on the Batch account (the data plane: jobs, tasks)."""
        return roles.assign(f"{self._name}-{label}", role=role, principal_id=principal_id, scope=self.account.id,
                            parent=self, principal_type=principal_type, description=description)
