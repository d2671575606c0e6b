"""What the fleet pipeline's deploy identity may grant (pure): the role definition IDs the program assigns (the
built-in roles of role_ids, and each stack's own custom role, whose ID is seeded with its subscription and resource
group), and the "Constrain roles" condition on its Role Based Access Control Administrator assignment that admits
those and nothing else (docs/ci.md).

The condition's form is Azure's own example "Constrain roles"
(https://learn.microsoft.com/azure/role-based-access-control/delegate-role-assignments-examples#example-constrain-roles):
one clause for creating role assignments (the request's RoleDefinitionId) and one for deleting them (the
resource's), each `ForAnyOfAnyValues:GuidEquals` over the allowed role definition GUIDs; "You must add two
conditions because the attribute source is different for each action".
"""
from __future__ import annotations

from collections.abc import Iterable

from infra.core import naming, role_ids

# The built-in roles the program grants (role_ids.ROLE_NAMES less the custom one, whose ID is per stack).
BUILT_IN = {guid: name for guid, name in role_ids.ROLE_NAMES.items() if guid not in role_ids.CUSTOM_ROLES}


def assignable(subscription: str, stacks: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Role definition GUID -> name of every role `up` assigns for these (team, stack) pairs in `subscription`."""
    found = dict(BUILT_IN)
    for team, stack in stacks:
        group = naming.resource_group(team, stack)
        for key in role_ids.CUSTOM_ROLES:
            found[role_ids.custom_role_id(subscription, group, key)] = f"{role_ids.ROLE_NAMES[key]} of {group}"
    return found


def condition(guids: Iterable[str]) -> str:
    """The condition (version 2.0) that lets its holder create and delete role assignments of `guids` only."""
    allowed = ", ".join(sorted(set(guids)))
    return ("((!(ActionMatches{'Microsoft.Authorization/roleAssignments/write'})) OR "
            f"(@Request[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals "
            f"{{{allowed}}})) AND "
            "((!(ActionMatches{'Microsoft.Authorization/roleAssignments/delete'})) OR "
            f"(@Resource[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals "
            f"{{{allowed}}}))")
