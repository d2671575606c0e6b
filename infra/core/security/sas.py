"""SAS lifetimes: the storage accounts' SAS expiration policy and the SAS the stack issues under it.

The policy's period for an account (sas_expiration_period), the check of an account's sasPolicy against Azure
Policy's 7-day built-in (storage_sas_policy, a check in resources.py's RESOURCE_TYPES) and of each SAS
request the program makes (check_sas_request: SAS requests are invocations rather than resources, so `plan` and
the tests check them apart).
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

from infra.core.config.schema import ORG_SAS_POLICY_HOURS, SAS_EXPIRY_HOURS
from infra.core.containers import SAS_PERMISSIONS

# An account's SAS expiration policy (sasPolicy: sasExpirationPeriod "DD.HH:MM:SS", expirationAction Log or Block:
# SasPolicy in the Storage REST spec, https://learn.microsoft.com/rest/api/storagerp/storage-accounts/create).
# https://learn.microsoft.com/azure/storage/common/sas-expiration-policy ("Define the SAS Expiration Action"): it
# covers user delegation, service and account SAS; "Out-of-policy SAS are those which do not have a signed start or
# have a validity interval larger than the upper limit" (interval = signed expiry - signed start); Block denies
# requests made with them, Log only records them. So every SAS the stack issues carries a signed start (the hour of
# `up`) and lives exactly sasExpiryHours, the account's period: inside it by construction, and Block is safe.
# Azure Policy's built-in 7-day rule (ORG_SAS_POLICY_HOURS, config/schema.py, with its source) refuses an account
# whose sasPolicy is missing, whose period is over 7.00:00:00, or whose expirationAction is not Block; the check
# below is that rule, so a stack that passes it is compliant, and sasExpiryHours is bounded by the same 7 days.
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


def storage_sas_policy(props: dict[str, Any]) -> str | None:
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


def check_sas_request(args: dict[str, Any], now: datetime | None = None,
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
