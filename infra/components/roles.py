"""Azure RBAC role assignments, the one way this program grants access (no keys, no SAS to machines).

Built-in role IDs: https://learn.microsoft.com/azure/role-based-access-control/built-in-roles
"""
from __future__ import annotations

import uuid

import pulumi
from pulumi_azure_native import authorization

# The roles by ID live in infra/core (the security checks read them too); the components name them as roles.X.
from infra.core.security.role_ids import (  # noqa: F401
    ACR_PULL, AZUREML_COMPUTE_OPERATOR, AZUREML_DATA_SCIENTIST, BATCH_ACCOUNT_CONTRIBUTOR, BATCH_JOB_SUBMITTER,
    BLOB_DATA_CONTRIBUTOR, BLOB_DATA_READER, BLOB_DATA_WRITER, CONTRIBUTOR, COST_MANAGEMENT_READER, CUSTOM_ROLES,
    KEY_VAULT_SECRETS_OFFICER, READER, ROLE_NAMES,
    ROLE_PERMISSIONS, custom_role_id, role_key)

# Who a grant is for, as ARM's principalType: managed identities are service principals. Setting it skips ARM's
# directory lookup, which a principal created moments before may not pass yet (replication delay:
# https://learn.microsoft.com/azure/role-based-access-control/role-assignments-template#new-service-principal);
# a wrong type is refused (UnmatchedPrincipalType).
SERVICE_PRINCIPAL = authorization.PrincipalType.SERVICE_PRINCIPAL.value
GROUP = authorization.PrincipalType.GROUP.value  # an Entra group (teamAdmins, teamMembers), possibly created just now
DEPLOYER = "deployer: "  # how a grant to the identity running `pulumi up` starts its description


def assignment_name(scope: str, principal_id: str, role: str) -> str:
    """The assignment's GUID name, seeded with what the assignment is (as ARM templates' guid(scope, principal,
    role)): names are unique in the tenant, so two stacks, subscriptions or principals never share one, the same
    assignment keeps its name on every run, and a new principal (a recreated identity) gets a new one."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{scope}|{principal_id}|{role}"))


def blob_writes_except(containers: tuple[str, ...]) -> str:
    """A role assignment condition (Azure ABAC, version 2.0) under which a blob data role writes, adds, moves
    and deletes blobs anywhere but in `containers`, and reads everywhere it could before. The format is the
    "simple condition" of https://learn.microsoft.com/azure/role-based-access-control/conditions-format with the
    blob actions of https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-attributes."""
    actions = "\n AND\n ".join(f"!(ActionMatches{{'Microsoft.Storage/storageAccounts/blobServices/containers/blobs/{a}'}})"
                               for a in ("write", "add/action", "delete", "move/action"))
    names = "\n AND\n ".join(f"@Resource[Microsoft.Storage/storageAccounts/blobServices/containers:name] "
                             f"StringNotEquals '{c}'" for c in containers)
    return f"(\n (\n {actions}\n )\n OR\n (\n {names}\n )\n)"


def blob_writes_only(path: str) -> str:
    """A condition (same format and actions as blob_writes_except) under which a blob data role writes, adds,
    moves and deletes the one blob `path` of its scope's container, and reads everywhere it could before; the
    path is the "Blob path" resource attribute (@Resource[...containers/blobs:path]) of the same attributes page."""
    actions = "\n AND\n ".join(f"!(ActionMatches{{'Microsoft.Storage/storageAccounts/blobServices/containers/blobs/{a}'}})"
                               for a in ("write", "add/action", "delete", "move/action"))
    return (f"(\n (\n {actions}\n )\n OR\n (\n @Resource[Microsoft.Storage/storageAccounts/blobServices/containers/"
            f"blobs:path] StringEquals '{path}'\n )\n)")


def custom_role(name: str, key: str, *, resource_group_name: pulumi.Input[str], parent: pulumi.Resource,
                opts: pulumi.ResourceOptions | None = None) -> tuple[authorization.RoleDefinition, pulumi.Output[str]]:
    """The stack's custom role `key` (role_ids.ROLE_PERMISSIONS says what it holds), assignable in its resource
    group only, and the ID a role assignment names it by (/subscriptions/.../roleDefinitions/GUID, through the
    definition's own output, so every assignment of it waits for it). Creating it needs
    Microsoft.Authorization/roleDefinitions/write (Owner, User Access Administrator:
    https://learn.microsoft.com/azure/role-based-access-control/custom-roles), like the first `up`'s grants."""
    subscription = authorization.get_client_config_output(opts=pulumi.InvokeOutputOptions(parent=parent)).subscription_id
    group_id = pulumi.Output.concat("/subscriptions/", subscription, "/resourceGroups/", resource_group_name)
    actions, data_actions = ROLE_PERMISSIONS[key]
    definition = authorization.RoleDefinition(
        name, scope=group_id, assignable_scopes=[group_id],
        role_definition_id=pulumi.Output.all(subscription, resource_group_name).apply(
            lambda v: custom_role_id(v[0], v[1], key)),
        # Role names are unique in the tenant too: the resource group and subscription make it the stack's own.
        role_name=pulumi.Output.concat(ROLE_NAMES[key], " ", resource_group_name, " ", subscription),
        description="Blob data read, write and delete without the container Actions (containers/delete, /write) "
                    "of Storage Blob Data Contributor",
        permissions=[authorization.PermissionArgs(actions=list(actions), data_actions=list(data_actions))],
        opts=pulumi.ResourceOptions.merge(pulumi.ResourceOptions(parent=parent), opts))
    return definition, pulumi.Output.concat("/subscriptions/", subscription,
                                            "/providers/Microsoft.Authorization/roleDefinitions/",
                                            definition.name)


def assign(name: str, *, role: str, principal_id: pulumi.Input[str], scope: pulumi.Input[str],
           parent: pulumi.Resource, principal_type: str = SERVICE_PRINCIPAL, description: str | None = None,
           condition: str | None = None, definition: pulumi.Input[str] | None = None) -> authorization.RoleAssignment:
    """`role` for `principal_id` (a managed identity unless `principal_type` says otherwise) on `scope`, limited
    by an ABAC `condition` where given. A custom role (CUSTOM_ROLES) is named by `definition`, custom_role's ID."""
    if role in CUSTOM_ROLES and definition is None:
        raise ValueError(f"{name}: {ROLE_NAMES[role]} is the stack's custom role: pass its definition "
                         "(roles.custom_role)")
    subscription = authorization.get_client_config_output(opts=pulumi.InvokeOutputOptions(parent=parent))
    return authorization.RoleAssignment(
        name, role_assignment_name=pulumi.Output.all(scope, principal_id).apply(
            lambda values: assignment_name(values[0], values[1], role)),
        principal_id=principal_id, principal_type=principal_type, description=description,
        condition=condition, condition_version="2.0" if condition else None,
        role_definition_id=definition if role in CUSTOM_ROLES else subscription.subscription_id.apply(
            lambda sub: f"/subscriptions/{sub}/providers/Microsoft.Authorization/roleDefinitions/{role}"),
        scope=scope,
        # A new name replaces the assignment, and ARM refuses a second assignment of the same role to the same
        # principal on the same scope under another name (RoleAssignmentExists): delete the old one first.
        opts=pulumi.ResourceOptions(parent=parent, delete_before_replace=True))
