"""TeamAccess: the team's Entra groups (teamAdmins, teamMembers) and what each may do on this stack only.

Members get what running and following jobs needs: the dataset in (upload to `data`), the results out (download
from `outputs`), the job service (submit, status, logs, cancel) and read on the resource group. Admins get that,
Contributor on the resource group (what `pulumi up` does to the resources) and the data-plane roles `up` grants the
deployer; never Owner, User Access Administrator or Role Based Access Control Administrator, so an admin cannot
create role assignments: the `up` that creates or changes grants (this component's among them) still needs someone
with Microsoft.Authorization/roleAssignments/write (plan and docs/teams.md say so). security/resources.py refuses any grant wider
than the resource group or of those roles.

Every grant names the group's principal type (Group): ARM then skips its directory lookup, which a group created
moments before may not pass yet (PrincipalNotFound, "Symptom - Assigning a role to a new principal sometimes fails"
in https://learn.microsoft.com/azure/role-based-access-control/troubleshooting; and
https://learn.microsoft.com/azure/role-based-access-control/role-assignments-template#new-service-principal).
Names come from scope, principal and role (roles.assignment_name), like every grant of the program.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pulumi

from infra.components import roles
from infra.core.config.sections import AccessConfig

TEAM = "team "  # how a team grant's description starts: "team teamMembers: why"
LEVELS = {"members": "teamMembers", "admins": "teamAdmins"}  # AccessConfig field -> its stack key


class TeamGrant(NamedTuple):
    """One role on one scope, for every group of a level. `scope` is a key of TeamAccessArgs.scopes."""
    scope: str
    role: str
    why: str
    condition: str | None = None


# What both backends' teams get; each backend adds its service (its describing face: Describes.team_grants).
COMMON = {
    "members": [
        TeamGrant("resourceGroup", roles.READER, "see the stack's resources (portal, `az`)"),
        TeamGrant("data", roles.BLOB_DATA_WRITER, "`python -m training upload` writes, lists and verifies "
                                                       "the dataset"),
        TeamGrant("outputs", roles.BLOB_DATA_READER, "`python -m infra download` reads a job's outputs and logs"),
    ],
    "admins": [
        TeamGrant("resourceGroup", roles.CONTRIBUTOR, "`pulumi up` and `destroy` manage the stack's resources "
                                                      "(Contributor cannot assign roles)"),
        TeamGrant("data", roles.BLOB_DATA_WRITER, "`python -m training upload` writes, lists and verifies "
                                                       "the dataset"),
        TeamGrant("outputs", roles.BLOB_DATA_READER, "`python -m infra download` reads a job's outputs and logs"),
    ],
}


def grants_deployer(access: AccessConfig) -> bool:
    """Whether `up` grants the identity running it its data-plane roles (the backends' deployer grants).

    Not when the stack has teamAdmins: those grants follow whoever runs `up`, so an admin's `up` after another
    person's deletes the previous person's, and Contributor cannot delete role assignments (its NotActions:
    Microsoft.Authorization/*/Delete, https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/general#contributor):
    every admin's `up` would fail there, and the grants would pile up for an RBAC administrator to remove. The
    admins' own group grants cover every deployer grant on the same scope (tests/infra/components/test_access.py),
    so an admin running `up` needs none of their own."""
    return not access.admins


def deployer_note(access: AccessConfig) -> str | None:
    """The line plan prints when `up` grants the deployer nothing (grants_deployer is False)."""
    if grants_deployer(access):
        return None
    return ("teamAdmins is set, so `up` grants the identity running it no roles of its own (a Contributor could not "
            "remove them when another admin runs `up`): run `up` as a member of a teamAdmins group, whose grants "
            "cover what `up` does on the data plane; an `up` run by someone outside those groups (e.g. the first, "
            "by whoever can assign roles) submits no job until they are in one, or set trainingLaunchOnUp false for it")


def team_grants(level: str, service_grants: list[TeamGrant]) -> list[TeamGrant]:
    """A level's grants: the common ones, then its backend's. One grant per (scope, role): a role assignment
    is unique by scope, principal and role, and so is its name."""
    grants: dict[tuple[str, str], TeamGrant] = {}
    for grant in [*COMMON[level], *service_grants]:
        grants.setdefault((grant.scope, grant.role), grant)
    return list(grants.values())


@dataclass
class TeamAccessArgs:
    access: AccessConfig
    scopes: dict[str, pulumi.Input[str]]  # scope key -> resource ID (resourceGroup, data, outputs, service, ...)
    grants: dict[str, list[TeamGrant]]  # level (members, admins) -> its grants (team_grants)
    # the stack's custom roles (roles.CUSTOM_ROLES) -> the ID an assignment names each by (roles.custom_role)
    role_definitions: dict[str, pulumi.Input[str]] = field(default_factory=dict)


class TeamAccess(pulumi.ComponentResource):
    def __init__(self, name: str, args: TeamAccessArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("dltrain:access:TeamAccess", name, None, opts)
        self.assignments: list[Any] = []
        for level, key in LEVELS.items():
            for group in getattr(args.access, level):
                for grant in args.grants[level]:
                    self.assignments.append(roles.assign(
                        f"{name}-{level}-{group}-{grant.scope}-{roles.ROLE_NAMES[grant.role].replace(' ', '')}",
                        role=grant.role, principal_id=group, scope=args.scopes[grant.scope], parent=self,
                        principal_type=roles.GROUP, description=f"{TEAM}{key}: {grant.why}",
                        condition=grant.condition, definition=args.role_definitions.get(grant.role)))
        self.register_outputs({"assignments": len(self.assignments)})
