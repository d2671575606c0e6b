"""Registry: ACR with one training image per framework, pulled by the nodes' managed identity.

The admin user stays disabled. The nodes pull with their identity (infra/components/identity.py), granted AcrPull
here. Each image is either built here and pushed by a token scoped to the built repositories, whose password is
generated at deploy time and kept as a secret (infra/components/acr_token.py), or, when sharedImages names it,
imported by digest from the platform registry (infra/components/image_import.py): no build, no token.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pulumi
import pulumi_docker_build as docker_build
from pulumi_azure_native import containerregistry, network, privatedns

from infra.components import roles
from infra.components.acr_token import TokenPassword
from infra.components.image_import import ImageImport
from infra.core.security import firewalls as security_firewalls
from infra.core.config import shared_images
from infra.core.config.sections import RegistryConfig
from training import frameworks

# One image per image row of the frameworks table (keras runs in the tensorflow image): its Dockerfile.
DOCKERFILES = {image.name: image.dockerfile for image in frameworks.images()}


def push_scope(frameworks: tuple[str, ...]) -> list[str]:
    """What the push token may do: read and write the framework repositories, nothing else."""
    return [f"repositories/{fw}/content/{action}" for fw in frameworks for action in ("read", "write")]


def token_expiry(now: datetime) -> str:
    """First day of the month after next: 1-2 months out, and stable within a month so `up` does not
    regenerate the password (and rebuild every image) on each run."""
    month = now.month + 2
    return datetime(now.year + (month - 1) // 12, (month - 1) % 12 + 1, 1).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class RegistryArgs:
    registry: RegistryConfig
    resource_group_name: pulumi.Input[str]
    location: str
    tags: dict[str, str]
    registry_name: str
    pull_principal_id: pulumi.Input[str]  # the nodes' identity, granted AcrPull
    now: datetime
    allowed_ip_ranges: tuple[str, ...] = ()  # the deployers' egress (allowedIpRanges): `up` pushes from there
    vnet_id: pulumi.Input[str] | None = None  # Premium: the VNet whose nodes reach the registry privately
    endpoint_subnet_id: pulumi.Input[str] | None = None  # Premium: the subnet that holds its private endpoint


# Only Premium registries take network rules ("Firewall rules ... available in the Premium service tier":
# https://learn.microsoft.com/azure/container-registry/container-registry-access-selected-networks) and private
# endpoints ("This feature is available in the Premium container registry service tier":
# https://learn.microsoft.com/azure/container-registry/container-registry-private-link); Basic and Standard stay open
# to the internet, behind Azure AD and token authentication (docs/security.md lists it).
NETWORK_RULES_SKU = "Premium"
# Private Link for a registry: the private endpoint's group ID and the private DNS zone that makes the registry's
# name (and its regional data endpoint) resolve to the endpoint's private addresses inside the VNet
# (container-registry-private-link above; https://learn.microsoft.com/azure/private-link/private-endpoint-dns:
# "Container Registry ... registry ... privatelink.azurecr.io").
REGISTRY_GROUP_ID = "registry"
REGISTRY_DNS_ZONE = "privatelink.azurecr.io"


class Registry(pulumi.ComponentResource):
    @staticmethod
    def _closed(args: RegistryArgs) -> containerregistry.NetworkRuleSetArgs:
        """Deny by default on the public endpoint and admit the deployers only (`up` builds and pushes the images
        from there; single addresses bare, as the storage firewall takes them: security_firewalls.firewall_ip_rules).
        The nodes come through the private endpoint, which the public endpoint's rules do not govern. (The NAT
        gateway's address is not admitted: with the compute subnet's Microsoft.ContainerRegistry service endpoint,
        the nodes' traffic reached the registry from their private addresses, which no IP rule matches.)"""
        return containerregistry.NetworkRuleSetArgs(
            default_action=containerregistry.DefaultAction.DENY,
            ip_rules=[containerregistry.IPRuleArgs(i_p_address_or_range=source, action=containerregistry.Action.ALLOW)
                      for source in security_firewalls.firewall_ip_rules(args.allowed_ip_ranges)])

    def _private_endpoint(self, name: str, args: RegistryArgs) -> None:
        """Premium: the registry's private endpoint in the VNet, its privatelink.azurecr.io zone linked to the VNet,
        and the endpoint's zone group, which writes the login server's and the data endpoint's A records there."""
        child = pulumi.ResourceOptions(parent=self)
        self.private_endpoint = network.PrivateEndpoint(
            f"{name}-pe", resource_group_name=args.resource_group_name, location=args.location, tags=args.tags,
            subnet=network.SubnetArgs(id=args.endpoint_subnet_id),
            private_link_service_connections=[network.PrivateLinkServiceConnectionArgs(
                name="registry", private_link_service_id=self.registry.id, group_ids=[REGISTRY_GROUP_ID])],
            opts=child)
        self.dns_zone = privatedns.PrivateZone(
            f"{name}-dns", resource_group_name=args.resource_group_name, location="global",
            private_zone_name=REGISTRY_DNS_ZONE, tags=args.tags, opts=child)
        self.dns_link = privatedns.VirtualNetworkLink(
            f"{name}-dns-link", resource_group_name=args.resource_group_name, location="global",
            private_zone_name=self.dns_zone.name, registration_enabled=False,
            virtual_network=privatedns.SubResourceArgs(id=args.vnet_id), tags=args.tags, opts=child)
        self.dns_zone_group = network.PrivateDnsZoneGroup(
            f"{name}-pe-dns", resource_group_name=args.resource_group_name,
            private_endpoint_name=self.private_endpoint.name,
            private_dns_zone_configs=[network.PrivateDnsZoneConfigArgs(
                name=REGISTRY_DNS_ZONE.replace(".", "-"), private_dns_zone_id=self.dns_zone.id)],
            opts=child)

    def __init__(self, name: str, args: RegistryArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("dltrain:registry:Registry", name, None, opts)
        cfg = args.registry
        child = pulumi.ResourceOptions(parent=self)

        self.registry = containerregistry.Registry(
            f"{name}-acr", resource_group_name=args.resource_group_name, location=args.location, tags=args.tags,
            registry_name=args.registry_name, sku=containerregistry.SkuArgs(name=cfg.registry_sku),
            admin_user_enabled=False, network_rule_set=self._closed(args) if cfg.registry_sku == NETWORK_RULES_SKU
            else None,
            # Import into a registry with firewall rules needs it to "allow access by trusted services" (on by
            # default; container-registry-import-images): said here, as the provider's default already sends it.
            network_rule_bypass_options=containerregistry.NetworkRuleBypassOptions.AZURE_SERVICES, opts=child)
        if cfg.registry_sku == NETWORK_RULES_SKU:
            self._private_endpoint(name, args)

        # The GPU nodes pull the images with their identity.
        self.acr_pull = roles.assign(f"{name}-acr-pull", role=roles.ACR_PULL, principal_id=args.pull_principal_id,
                                     scope=self.registry.id, parent=self)

        shared = cfg.shared_images
        built = shared_images.built_here(cfg.frameworks, shared)
        # sharedImages: each image it names is copied in by digest (ACR import, the deployer's identity); the job
        # runs that copy. Keyed by framework like the built ones, so the backends wait on either alike.
        imports = {
            image.framework: ImageImport(
                f"{name}-{image.framework}-import", registry_id=self.registry.id,
                login_server=self.registry.login_server, source_registry_id=shared.registry_id,
                source_image=image.source, framework=image.framework, opts=child)
            for image in (shared.images if shared else ())}
        self.images: dict[str, pulumi.Resource] = dict(imports)
        self.push_scope_map = self.push_token = self.push_password = None
        if built:
            self._build(name, args, built)
        # By digest for the job (it runs exactly what was built or imported); by tag for the pool's prefetch list
        # of a built image, which Azure can only change by replacing the pool (a digest there would redeploy it on
        # every rebuild); an imported image has no tag, so the pool names its digest, which moves only when
        # sharedImages does.
        # Each name carries what a node's pull needs, so whatever boots nodes with it (the pool's prefetch, a
        # job) is created after them: the pull grant and, for Premium, the private endpoint's DNS records (before
        # them the name resolves to the public endpoint, which admits no node).
        ready = [self.acr_pull.id, *([self.dns_zone_group.id, self.dns_link.id]
                                     if cfg.registry_sku == NETWORK_RULES_SKU else [])]

        def after_pull_path(value: pulumi.Input[str]) -> pulumi.Output[str]:
            return pulumi.Output.all(value, *ready).apply(lambda values: values[0])

        self.image_refs = {framework: after_pull_path(self.images[framework].ref) for framework in cfg.frameworks}
        self.image_names = {framework: after_pull_path(imports[framework].ref) if framework in imports
                            else after_pull_path(pulumi.Output.concat(self.registry.login_server,
                                                                      f"/{framework}:{cfg.image_tag}"))
                            for framework in cfg.frameworks}
        self.register_outputs({
            "login_server": self.registry.login_server,
            "image_refs": self.image_refs,
        })

    def _build(self, name: str, args: RegistryArgs, frameworks: tuple[str, ...]) -> None:
        """The images built here: Docker on the deployer, pushed with a token that may push these repositories
        only."""
        cfg = args.registry
        child = pulumi.ResourceOptions(parent=self)
        self.push_scope_map = containerregistry.ScopeMap(
            f"{name}-push-scope", resource_group_name=args.resource_group_name, registry_name=self.registry.name,
            scope_map_name="training-image-push", actions=push_scope(frameworks),
            description="Push the training images, nothing else", opts=child)
        self.push_token = containerregistry.Token(
            f"{name}-push-token", resource_group_name=args.resource_group_name, registry_name=self.registry.name,
            token_name="training-image-push", scope_map_id=self.push_scope_map.id,
            status=containerregistry.TokenStatus.ENABLED, opts=child)
        self.push_password = TokenPassword(
            f"{name}-push-password", registry_id=self.registry.id, token_id=self.push_token.id,
            expiry=token_expiry(args.now), opts=child)

        login = docker_build.RegistryArgs(address=self.registry.login_server, username=self.push_token.name,
                                          password=self.push_password.password)
        self.images.update({
            framework: docker_build.Image(
                f"{name}-{framework}-image",
                # Paths relative to the project folder, where Pulumi runs the program.
                context=docker_build.BuildContextArgs(location="."),
                dockerfile=docker_build.DockerfileArgs(location=DOCKERFILES[framework]),
                platforms=[docker_build.Platform.LINUX_AMD64],
                tags=[pulumi.Output.concat(self.registry.login_server, f"/{framework}:{cfg.image_tag}")],
                registries=[login],
                push=True,
                build_on_preview=False,  # a preview (and a PR review) must not spend 20 minutes building CUDA images
                opts=child)
            for framework in frameworks
        })
