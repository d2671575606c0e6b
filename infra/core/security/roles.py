"""Role assignments: the stack grants on its own resource group and below, and never the right to grant.

Three checks on an azure-native RoleAssignment's inputs, each in infra/core/security/resources.py's RESOURCE_TYPES: the
scope is the stack's own group or a resource in it, the role is one the program means to grant (infra/core/security/role_ids.py)
and never one that creates role assignments, and a role that manages a whole resource sits on one such resource.
"""
from __future__ import annotations

import re
from typing import Any

from infra.core.security.role_ids import RESOURCE_ROLES, ROLE_NAMES, custom_role_ids

# The built-in roles that can create role assignments (Microsoft.Authorization/roleAssignments/write or
# Microsoft.Authorization/*), from https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/privileged
# (Reservations Administrator is assignable at /providers/Microsoft.Capacity only, never inside a resource group).
PRIVILEGED_ROLES = {"8e3af657-a8ff-443c-a75c-2fe8c4bcb635": "Owner",
                    "18d7d88d-d35e-4fb5-a5c3-7773c20a72d9": "User Access Administrator",
                    "f58310d9-a9f6-439a-9e8d-f62e7b41a168": "Role Based Access Control Administrator"}


def role_within_stack_group(props: dict[str, Any], resource_group: str) -> str | None:
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


def role_not_privileged(props: dict[str, Any]) -> str | None:
    role = str(props.get("roleDefinitionId") or "").rstrip("/").rsplit("/", 1)[-1].lower()
    if role in PRIVILEGED_ROLES:
        return (f"grants {PRIVILEGED_ROLES[role]}, which can hand out any access: the stack grants no role that "
                "creates role assignments (admins get Contributor)")
    # An allowlist beside the named denylist: other built-ins can assign roles too (e.g. Key Vault Data Access
    # Administrator), and a role the program never meant to grant is a mistake whatever it allows.
    if role and role not in ROLE_NAMES and role not in custom_role_ids(str(props.get("scope") or "")):
        return (f"grants role definition {role}, which is not one this stack grants "
                f"({', '.join(sorted(ROLE_NAMES.values()))}: infra/core/security/role_ids.py); add it there, with its doc "
                "link, if it is meant")
    return None


def role_on_its_resource(props: dict[str, Any]) -> str | None:
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
