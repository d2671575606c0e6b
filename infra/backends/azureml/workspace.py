"""Azure ML: the second backend (`backend: azureml`), after "Train PyTorch models at scale with Azure Machine
Learning": a workspace over the stack's own storage, registry, Application Insights and a Key Vault; a GPU
compute cluster in the compute subnet; the `data` container as a datastore reached by identity; an environment
version per framework image the stack builds.

Security, as for the Batch backend:
- the workspace has a private endpoint in the storage subnet with its private DNS zones, which the nodes use
  (https://learn.microsoft.com/azure/machine-learning/how-to-configure-private-link). With amlWorkspaceAccess
  private (the default) public network access is disabled: only the VNet reaches it, so `pulumi up` (run from
  outside) launches no job and plan says so. allowedIpRanges cannot be applied to the workspace with the stable
  API this provider uses (an IP allow list is a preview property), so the way in from outside is the same page's
  "Enable public access" (amlWorkspaceAccess public): reachable from the Internet, every call authenticated by
  Azure AD (the workspace has no keys of its own), marked by the `network-access: public` tag that the
  aml-workspace-access check requires for it;
- system datastores by identity, not account keys (systemDatastoresAuthMode: identity);
- the Key Vault uses Azure RBAC (no access policies), purge protection, and admits only the VNet and
  allowedIpRanges;
- the Key Vault's and the workspace's names carry the stack's name generation (infra/components/
  name_generation.py): both names stay taken after a delete (soft delete), so a stack destroyed and deployed again
  asks for new ones;
- compute nodes have no public IP and no SSH (remoteLoginPortPublicAccess Disabled), local auth off, and run
  as the nodes' user-assigned identity, which the environment grants AcrPull and its containers: the cluster
  pulls images and reads datastores with it
  (https://learn.microsoft.com/azure/machine-learning/how-to-identity-based-service-authentication).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

import pulumi
from pulumi_azure_native import authorization, keyvault, machinelearningservices as ml, network, privatedns

from infra.components.name_generation import NameGeneration, proposed_generation
from infra.core.security import firewalls as security_firewalls, invariants as security_invariants
from infra.core.config.sections import AmlConfig, NodesConfig
from infra.core.containers import AML_DATASTORES

# Private DNS zones a workspace's private endpoint needs (Azure public cloud), from the private link page above.
WORKSPACE_DNS_ZONES = ("privatelink.api.azureml.ms", "privatelink.notebooks.azure.net")


def environment_version(image_ref: str) -> str:
    """An environment version is immutable: a new image digest makes a new version, the same one none."""
    return hashlib.sha256(image_ref.encode()).hexdigest()[:12]


@dataclass
class AzureMlArgs:
    aml: AmlConfig
    nodes: NodesConfig  # the compute cluster's size, priority and scale
    resource_group_name: pulumi.Input[str]
    location: str
    tags: dict[str, str]
    # The Key Vault's and the workspace's names, each from the stack's name generation (NameGeneration).
    key_vault_name: Callable[[str], str]
    workspace_name: Callable[[str], str]
    allowed_ip_ranges: tuple[str, ...]  # the deployers' egress (allowedIpRanges), admitted by the Key Vault
    frameworks: tuple[str, ...]  # the images the stack builds (the frameworks key): an environment each
    vnet_id: pulumi.Input[str]
    compute_subnet_id: pulumi.Input[str]
    storage_subnet_id: pulumi.Input[str]
    storage_account_id: pulumi.Input[str]
    storage_account_name: pulumi.Input[str]
    registry_id: pulumi.Input[str]
    app_insights_id: pulumi.Input[str]
    nodes_identity_id: pulumi.Input[str]
    image_refs: pulumi.Input[dict]  # framework -> <registry>/<fw>[:tag]@sha256:... (tagged when built)
    depends_on: list[pulumi.Resource]  # the nodes' role assignments: the cluster pulls and reads with them
    now: datetime | None = None  # proposes the name generation on a stack's first `up`; tests pin it


class AzureMl(pulumi.ComponentResource):
    def __init__(self, name: str, args: AzureMlArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("dltrain:azureml:AzureMl", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        rg = args.resource_group_name
        client = authorization.get_client_config_output(opts=pulumi.InvokeOutputOptions(parent=self))
        self.names = NameGeneration(f"{name}-names", proposed_generation(args.now or datetime.now(timezone.utc)),
                                    opts=child)
        generation = self.names.generation

        self.key_vault = keyvault.Vault(
            f"{name}-kv", resource_group_name=rg, location=args.location, tags=args.tags,
            vault_name=generation.apply(args.key_vault_name),
            properties=keyvault.VaultPropertiesArgs(
                tenant_id=client.tenant_id, sku=keyvault.SkuArgs(family="A", name="standard"),
                enable_rbac_authorization=True, enable_soft_delete=True, enable_purge_protection=True,
                public_network_access="Enabled",  # firewalled below: the VNet and the deployers' addresses
                network_acls=keyvault.NetworkRuleSetArgs(
                    default_action="Deny", bypass="AzureServices",
                    ip_rules=[keyvault.IPRuleArgs(value=rule)
                              for rule in security_firewalls.firewall_ip_rules(args.allowed_ip_ranges)],
                    virtual_network_rules=[keyvault.VirtualNetworkRuleArgs(id=args.compute_subnet_id),
                                           keyvault.VirtualNetworkRuleArgs(id=args.storage_subnet_id)])),
            opts=child)

        public = args.aml.workspace_access == "public"
        self.workspace = ml.Workspace(
            f"{name}-ws", resource_group_name=rg, location=args.location,
            tags={**args.tags, **({security_invariants.PUBLIC_ACCESS_TAG: "public"} if public else {})},
            workspace_name=generation.apply(args.workspace_name),
            identity=ml.ManagedServiceIdentityArgs(type="SystemAssigned"),
            sku=ml.SkuArgs(name="Basic", tier="Basic"),
            key_vault=self.key_vault.id, storage_account=args.storage_account_id,
            container_registry=args.registry_id, application_insights=args.app_insights_id,
            public_network_access="Enabled" if public else "Disabled", system_datastores_auth_mode="identity",
            v1_legacy_mode=False,
            opts=child)
        self._private_endpoint(name, rg, args)

        # The GPU cluster: dedicated or Spot nodes of the catalog's size, scaling to minNodes when idle. The tier is
        # still named LowPriority (azure-native 3.x's VmPriority: Dedicated, LowPriority); Azure ML retired low
        # priority on 2026-03-31 and allocates such clusters' nodes as Spot VMs at the Spot rate
        # (MicrosoftDocs/azure-ai-docs pull 806, how-to-manage-optimize-cost).
        nodes = args.nodes
        self.compute = ml.Compute(
            f"{name}-gpu", resource_group_name=rg, location=args.location, tags=args.tags,
            workspace_name=self.workspace.name, compute_name="gpu",
            identity=ml.ManagedServiceIdentityArgs(type="UserAssigned",
                                                   user_assigned_identities=[args.nodes_identity_id]),
            properties=ml.AmlComputeArgs(
                compute_type="AmlCompute", disable_local_auth=True,
                properties=ml.AmlComputePropertiesArgs(
                    vm_size=nodes.gpu_sku, vm_priority=ml.VmPriority.LOW_PRIORITY if nodes.spot else ml.VmPriority.DEDICATED,
                    os_type="Linux", enable_node_public_ip=False, remote_login_port_public_access="Disabled",
                    subnet=ml.ResourceIdArgs(id=args.compute_subnet_id),
                    scale_settings=ml.ScaleSettingsArgs(
                        min_node_count=nodes.min_nodes, max_node_count=nodes.max_nodes,
                        node_idle_time_before_scale_down=f"PT{args.aml.idle_minutes}M"))),
            # After the workspace's private DNS too: the cluster's nodes reach the workspace by its private
            # endpoint's names, which resolve only once the zones are linked and the zone group wrote its records.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *self.private_dns]))

        # The `data` and `outputs` containers, reached with the identity of whoever uses them (the job's: the
        # cluster's), never a key or SAS.
        self.datastores = {
            container: ml.Datastore(
                f"{name}-{container}", resource_group_name=rg, workspace_name=self.workspace.name, name=store,
                properties=ml.AzureBlobDatastoreArgs(
                    datastore_type="AzureBlob", account_name=args.storage_account_name, container_name=container,
                    credentials=ml.NoneDatastoreCredentialsArgs(credentials_type="None"),
                    service_data_access_auth_identity="None"),
                opts=child)
            for container, store in AML_DATASTORES.items()}

        # One environment per framework image the stack builds, pinned to its digest.
        self.environments: dict[str, pulumi.Output[str]] = {}  # framework -> "name:version", as jobs name it
        for framework in args.frameworks:
            container = ml.EnvironmentContainer(
                f"{name}-env-{framework}", resource_group_name=rg, workspace_name=self.workspace.name,
                name=f"dltrain-{framework}",
                properties=ml.EnvironmentContainerPropertiesArgs(description=f"ResNet50 training, {framework}"),
                opts=child)
            image = pulumi.Output.from_input(args.image_refs).apply(lambda refs, fw=framework: refs[fw])
            version = ml.EnvironmentVersion(
                f"{name}-env-{framework}-version", resource_group_name=rg, workspace_name=self.workspace.name,
                name=container.name, version=image.apply(environment_version),
                properties=ml.EnvironmentVersionPropertiesArgs(image=image, os_type="Linux"),
                opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True))
            self.environments[framework] = pulumi.Output.concat(container.name, ":", version.version)
        self.register_outputs({"workspace": self.workspace.name, "compute": self.compute.name})

    def _private_endpoint(self, name: str, rg, args: AzureMlArgs) -> None:
        child = pulumi.ResourceOptions(parent=self)
        self.private_endpoint = network.PrivateEndpoint(
            f"{name}-ws-pe", resource_group_name=rg, location=args.location, tags=args.tags,
            subnet=network.SubnetArgs(id=args.storage_subnet_id),
            private_link_service_connections=[network.PrivateLinkServiceConnectionArgs(
                name="workspace", private_link_service_id=self.workspace.id, group_ids=["amlworkspace"])],
            opts=child)
        zones, links = [], []
        for zone_name in WORKSPACE_DNS_ZONES:
            zone = privatedns.PrivateZone(f"{name}-dns-{zone_name.split('.')[1]}", resource_group_name=rg,
                                          location="global", private_zone_name=zone_name, tags=args.tags, opts=child)
            links.append(privatedns.VirtualNetworkLink(
                f"{name}-dns-{zone_name.split('.')[1]}-link", resource_group_name=rg, location="global",
                private_zone_name=zone.name, registration_enabled=False,
                virtual_network=privatedns.SubResourceArgs(id=args.vnet_id), tags=args.tags, opts=child))
            zones.append(zone)
        zone_group = network.PrivateDnsZoneGroup(
            f"{name}-ws-pe-dns", resource_group_name=rg, private_endpoint_name=self.private_endpoint.name,
            private_dns_zone_configs=[network.PrivateDnsZoneConfigArgs(name=zone_name.replace(".", "-"),
                                                                       private_dns_zone_id=zone.id)
                                      for zone_name, zone in zip(WORKSPACE_DNS_ZONES, zones)],
            opts=child)
        self.private_dns = [*links, zone_group]  # what the compute waits for
