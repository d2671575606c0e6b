"""The firewalls' service rules: IP and VNet rules the provider's types accept and Azure refuses at the service.

firewall_ip_rules turns allowedIpRanges into the one list Storage, Key Vault, Batch and the registry take; the IP
rule checks (in infra/core/security/resources.py's RESOURCE_TYPES) say, with each service's source, which values its firewall
refuses; VnetRules says where a resource's VNet rules sit and which service endpoint their subnet needs.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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


def storage_ip_rules(props: dict[str, Any]) -> str | None:
    # https://learn.microsoft.com/azure/storage/common/storage-network-security-limitations#restrictions-for-ip-network-rules:
    # public IPv4 only, no RFC 1918 range, no /31 or /32 prefix.
    return _ip_rules_check("networkRuleSet.ipRules", (props.get("networkRuleSet") or {}).get("ipRules"),
                           "iPAddressOrRange", small_ranges_refused=True, private_refused=True)


def key_vault_ip_rules(props: dict[str, Any]) -> str | None:
    # https://learn.microsoft.com/azure/key-vault/general/network-security: IPv4 only, no RFC 1918 range (the
    # page says nothing of /31 or /32, and its ARM reference shows a bare address as the single-address form).
    acls = (props.get("properties") or {}).get("networkAcls") or {}
    return _ip_rules_check("properties.networkAcls.ipRules", acls.get("ipRules"), "value",
                           small_ranges_refused=False, private_refused=True)


def batch_ip_rules(props: dict[str, Any]) -> str | None:
    # https://learn.microsoft.com/azure/batch/public-network-access: "a public IP address or address range in
    # CIDR notation", IPv4 (the page does not say that a private range is refused: only the form is checked).
    profile = props.get("networkProfile") or {}
    for endpoint in ("accountAccess", "nodeManagementAccess"):
        message = _ip_rules_check(f"networkProfile.{endpoint}.ipRules", (profile.get(endpoint) or {}).get("ipRules"),
                                  "value", small_ranges_refused=False, private_refused=False)
        if message:
            return message
    return None


@dataclass(frozen=True)
class VnetRules:
    """Where a resource's VNet rules sit, and the service endpoint a subnet needs before Azure accepts it there."""

    path: tuple[str, ...]  # from the resource's inputs to the list of rules; path[0] is the top-level property
    subnet_key: str  # the key of a rule that holds the subnet ID
    endpoints: tuple[str, ...]  # any of these on the subnet satisfies the service
