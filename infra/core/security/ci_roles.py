"""What the fleet pipeline's deploy identity may grant (pure): the role definition IDs the program assigns (the
built-in roles of role_ids, and each stack's own custom role, whose ID is seeded with its subscription and resource
group), and the "Constrain roles" condition on its Role Based Access Control Administrator assignment that admits
those and nothing else (docs/ci.md).

The condition's form is Azure's own example "Constrain roles"
(https://learn.microsoft.com/azure/role-based-access-control/delegate-role-assignments-examples#example-constrain-roles):
one clause for creating role assignments (the request's RoleDefinitionId) and one for deleting them (the
resource's), each `ForAnyOfAnyValues:GuidEquals` over the allowed role definition GUIDs; "You must add two
conditions because the attribute source is different for each action".

Key Vault Secrets Officer is admitted only where a stack of the subscription sets `batchPoolAllocation:
user-subscription`, and then only to the principals those stacks name (`batchServiceObjectId`: the Batch service),
in the form of Azure's example "Constrain roles and specific groups"
(https://learn.microsoft.com/azure/role-based-access-control/delegate-role-assignments-examples#example-constrain-roles-and-specific-groups:
`@Request[Microsoft.Authorization/roleAssignments:PrincipalId] ForAnyOfAnyValues:GuidEquals {...}` beside the role,
and the `@Resource` twin for delete). The condition constrains the role and principal, not the scope: without the
principal clause the deploy identity could grant itself, or anyone, that role's data actions on every RBAC vault of
the subscription (Azure ML workspaces' included). The two clauses are OR'ed in parentheses, as the condition format
asks for three or more expressions (https://learn.microsoft.com/azure/role-based-access-control/conditions-format,
"Grouping and precedence").
"""
from __future__ import annotations

from collections.abc import Iterable

from infra.core import naming
from infra.core.security import role_ids

# Roles the identity may grant only to named principals: a user-subscription Batch account's vault, to the Batch
# service (infra/backends/batch/cluster.py).
PRINCIPAL_BOUND = (role_ids.KEY_VAULT_SECRETS_OFFICER,)
# The built-in roles the program grants to anyone it names (role_ids.ROLE_NAMES less the custom one, whose ID is per
# stack, and the principal-bound ones).
BUILT_IN = {guid: name for guid, name in role_ids.ROLE_NAMES.items()
            if guid not in role_ids.CUSTOM_ROLES and guid not in PRINCIPAL_BOUND}


def assignable(subscription: str, stacks: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Role definition GUID -> name of every role `up` assigns for these (team, stack) pairs in `subscription`."""
    found = dict(BUILT_IN)
    for team, stack in stacks:
        group = naming.resource_group(team, stack)
        for key in role_ids.CUSTOM_ROLES:
            found[role_ids.custom_role_id(subscription, group, key)] = f"{role_ids.ROLE_NAMES[key]} of {group}"
    return found


def bound(batch_services: Iterable[str]) -> dict[str, list[str]]:
    """Role GUID -> the principals it may be granted to: the user-subscription stacks' Batch service object IDs
    (none: the role is not admitted at all)."""
    principals = sorted({p.lower() for p in batch_services if p})
    return {role: principals for role in PRINCIPAL_BOUND} if principals else {}


def _clause(source: str, guids: Iterable[str], bound_to: dict[str, list[str]]) -> str:
    role = f"@{source}[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals"
    principal = f"@{source}[Microsoft.Authorization/roleAssignments:PrincipalId] ForAnyOfAnyValues:GuidEquals"
    terms = [f"{role} {{{', '.join(sorted(set(guids)))}}}"] if guids else []
    by_principals: dict[tuple[str, ...], list[str]] = {}
    for guid, principals in sorted(bound_to.items()):
        by_principals.setdefault(tuple(principals), []).append(guid)
    terms += [f"{role} {{{', '.join(roles)}}} AND {principal} {{{', '.join(principals)}}}"
              for principals, roles in by_principals.items()]
    if len(terms) == 1:
        return terms[0]
    return " OR ".join(f"({term})" for term in terms)


def condition(guids: Iterable[str], bound_to: dict[str, list[str]] | None = None) -> str:
    """The condition (version 2.0) that lets its holder create and delete role assignments of `guids` to anyone,
    and of each role in `bound_to` to its principals only."""
    guids, bound_to = list(guids), dict(bound_to or {})
    return ("((!(ActionMatches{'Microsoft.Authorization/roleAssignments/write'})) OR "
            f"({_clause('Request', guids, bound_to)})) AND "
            "((!(ActionMatches{'Microsoft.Authorization/roleAssignments/delete'})) OR "
            f"({_clause('Resource', guids, bound_to)}))")
