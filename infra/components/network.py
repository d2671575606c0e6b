"""Network: the team VNet, a compute subnet for the GPU nodes and a storage subnet for the NFS server.

Nodes get no public IP, so outbound traffic (image pulls, package installs, Batch node agent) leaves
through a NAT gateway. NSGs deny everything inbound from the Internet and allow all traffic inside the
VNet, which MPI, NCCL and NFS need between nodes on arbitrary ports.
"""
from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_azure_native import network

from infra.core.config.sections import NetworkConfig


# Private subnets: no default outbound access (Azure's implicit public IP for VMs without explicit egress, which
# it retires for new VNets), the NAT gateway being the one way out
# (https://learn.microsoft.com/azure/virtual-network/ip-services/default-outbound-access). Azure takes
# defaultOutboundAccess only when a subnet is created ("cannot be updated for an existing subnet": the Subnet
# reference), so a stack whose subnets exist keeps theirs rather than failing its next `up`.
PRIVATE_SUBNET = pulumi.ResourceOptions(ignore_changes=["defaultOutboundAccess"])

# Fixed names for the VNet and its subnets (unique in the stack's own resource group, which holds one VNet). Left to
# azure-native, a name is "the logical name plus a random suffix" (https://www.pulumi.com/docs/iac/concepts/resources/
# names/), drawn anew at every create: after `destroy` the retained storage account's VNet rules name subnets of the
# old VNet, the next `up` creates subnets with other IDs, and adopting the account (adoptRetained, an import) fails on
# "inputs to import do not match". With these names the subnets' IDs are the same after every create.
VNET_NAME = "vnet-dltrain"
SUBNET_NAMES = {"compute": "snet-compute", "storage": "snet-storage"}


@dataclass
class NetworkArgs:
    network: NetworkConfig
    resource_group_name: pulumi.Input[str]
    location: str
    tags: dict[str, str]
    # The azureml backend's Key Vault admits both subnets, which needs the Microsoft.KeyVault endpoint on each.
    key_vault_endpoint: bool = False
    # networkAutoNamed: a stack deployed before the names were fixed keeps azure-native's (a VNet cannot be renamed:
    # a new name replaces it, and every NIC and pool in it; docs/upgrade.md).
    auto_named: bool = False


# Priorities: VNet traffic first, the Internet deny last (Azure's implicit rules sit at 65000+).
ALLOW_VNET_INBOUND = network.SecurityRuleArgs(
    name="allow-vnet-inbound", priority=100, direction=network.SecurityRuleDirection.INBOUND,
    access=network.SecurityRuleAccess.ALLOW, protocol=network.SecurityRuleProtocol.ASTERISK,
    source_address_prefix="VirtualNetwork", source_port_range="*",
    destination_address_prefix="VirtualNetwork", destination_port_range="*",
)
DENY_INTERNET_INBOUND = network.SecurityRuleArgs(
    name="deny-internet-inbound", priority=4000, direction=network.SecurityRuleDirection.INBOUND,
    access=network.SecurityRuleAccess.DENY, protocol=network.SecurityRuleProtocol.ASTERISK,
    source_address_prefix="Internet", source_port_range="*",
    destination_address_prefix="*", destination_port_range="*",
)


class Network(pulumi.ComponentResource):
    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("dltrain:network:Network", name, None, opts)
        cfg = args.network
        child = pulumi.ResourceOptions(parent=self)
        common = dict(resource_group_name=args.resource_group_name, location=args.location, tags=args.tags)

        # Static egress IP for the NAT gateway; the only public IP in the stack, and it accepts no inbound.
        self.egress_ip = network.PublicIPAddress(
            f"{name}-egress-ip", **common,
            sku=network.PublicIPAddressSkuArgs(name=network.PublicIPAddressSkuName.STANDARD),
            public_ip_allocation_method=network.IPAllocationMethod.STATIC, opts=child)
        self.nat_gateway = network.NatGateway(
            f"{name}-nat", **common,
            sku=network.NatGatewaySkuArgs(name=network.NatGatewaySkuName.STANDARD),
            public_ip_addresses=[network.SubResourceArgs(id=self.egress_ip.id)], opts=child)

        named = not args.auto_named
        self.vnet = network.VirtualNetwork(
            f"{name}-vnet", **common, virtual_network_name=VNET_NAME if named else None,
            address_space=network.AddressSpaceArgs(address_prefixes=[str(cfg.address_space)]), opts=child)

        self.compute_nsg = self._nsg(f"{name}-compute-nsg", common)
        self.storage_nsg = self._nsg(f"{name}-storage-nsg", common)
        # Service endpoints keep storage traffic on the Azure backbone and let the storage firewall admit these
        # subnets while denying everything else. No Microsoft.ContainerRegistry endpoint: with it the nodes reach a
        # registry from their private addresses, which a Premium registry's IP rules cannot admit (the registry API
        # azure-native uses takes no VNet rules); a Premium registry is reached through its private endpoint
        # instead (registry.py), Basic and Standard over the NAT gateway. Azure takes a Key Vault VNet rule only for
        # a subnet with the Microsoft.KeyVault endpoint (SubnetsHaveNoServiceEndpointsConfigured otherwise:
        # https://learn.microsoft.com/azure/key-vault/general/overview-vnet-service-endpoints).
        vault = ["Microsoft.KeyVault"] if args.key_vault_endpoint else []
        self.compute_subnet = network.Subnet(
            f"{name}-compute", resource_group_name=args.resource_group_name,
            subnet_name=SUBNET_NAMES["compute"] if named else None,
            virtual_network_name=self.vnet.name, address_prefix=str(cfg.compute_subnet),
            network_security_group=network.NetworkSecurityGroupArgs(id=self.compute_nsg.id),
            nat_gateway=network.SubResourceArgs(id=self.nat_gateway.id),
            service_endpoints=[network.ServiceEndpointPropertiesFormatArgs(service=service) for service in
                               ("Microsoft.Storage", *vault)],
            default_outbound_access=False, opts=PRIVATE_SUBNET.merge(child))
        # Subnets of one VNet are created one after the other: Azure rejects concurrent subnet writes.
        self.storage_subnet = network.Subnet(
            f"{name}-storage", resource_group_name=args.resource_group_name,
            subnet_name=SUBNET_NAMES["storage"] if named else None,
            virtual_network_name=self.vnet.name, address_prefix=str(cfg.storage_subnet),
            network_security_group=network.NetworkSecurityGroupArgs(id=self.storage_nsg.id),
            nat_gateway=network.SubResourceArgs(id=self.nat_gateway.id),
            service_endpoints=[network.ServiceEndpointPropertiesFormatArgs(service=service) for service in
                               ("Microsoft.Storage", *vault)],
            default_outbound_access=False,
            opts=PRIVATE_SUBNET.merge(pulumi.ResourceOptions(parent=self, depends_on=[self.compute_subnet])))

        self.register_outputs({
            "vnet_id": self.vnet.id,
            "compute_subnet_id": self.compute_subnet.id,
            "storage_subnet_id": self.storage_subnet.id,
            "egress_ip": self.egress_ip.ip_address,
        })

    def _nsg(self, name: str, common: dict) -> network.NetworkSecurityGroup:
        return network.NetworkSecurityGroup(
            name, **common, security_rules=[ALLOW_VNET_INBOUND, DENY_INTERNET_INBOUND],
            opts=pulumi.ResourceOptions(parent=self))
