"""Whether the machine that runs `pulumi up` is admitted by the stack's firewalls. Pure.

`up` writes to data planes behind IP firewalls that admit `allowedIpRanges` and nothing else from the Internet: it
uploads the training scripts over the storage account's blob endpoint, pushes images to a Premium registry and
creates the job at the Batch account's endpoint (docs/security.md). From any other address the first of them
answers 403 ("This request is not authorized to perform this operation", storage's AuthorizationFailure), half way
through the update. GitHub's hosted runners draw their addresses from Azure's whole range, different on each run, so
no stack admits them: the fleet's deploy runs on a self-hosted runner whose egress address is static and in every
stack's `allowedIpRanges` (docs/ci.md). Preflight checks the caller's address against the list before `up`.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from infra.core.preflight.check import FAIL, OK, WARN, Check

NAME = "caller address"


def admitted(address: str, allowed: Iterable[str]) -> bool:
    """Whether `address` (IPv4) is one of `allowed` (bare addresses or CIDR ranges, as allowedIpRanges holds them)."""
    ip = ipaddress.IPv4Address(address)
    return any(ip in ipaddress.IPv4Network(str(rule), strict=False) for rule in allowed)


def check(address: str | None, allowed: Iterable[str], stack: str, why_unknown: str = "") -> Check:
    """Preflight's line on the caller's address: OK when admitted, FAIL (with the fix) when not, WARN when unknown."""
    allowed = [str(rule) for rule in allowed]
    if not address:
        return Check(NAME, WARN, f"this machine's public address is unknown ({why_unknown or 'not found'}): `up` "
                                 "needs it in allowedIpRanges (the storage, registry and Batch firewalls)")
    try:
        inside = admitted(address, allowed)
    except ValueError:
        return Check(NAME, WARN, f"{address!r} is not an IPv4 address: cannot say whether the firewalls admit it")
    if inside:
        return Check(NAME, OK, f"{address} is in allowedIpRanges: the storage, registry and Batch firewalls admit it")
    return Check(NAME, FAIL, f"{address} (this machine) is not in allowedIpRanges ({', '.join(allowed)}): `up` would "
                             "stop at its first upload with 403 from the storage firewall (then the registry's and the "
                             f"Batch account's); run it from an admitted machine (CI: the fleet's self-hosted runner, "
                             f"docs/ci.md) or add {address} to allowedIpRanges in Pulumi.{stack}.yaml")
