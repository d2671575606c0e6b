"""Azure RBAC role assignments, the one way this program grants access (no keys, no SAS to machines).

Built-in role IDs: https://learn.microsoft.com/azure/role-based-access-control/built-in-roles
"""
from __future__ import annotations

import uuid

import pulumi
from pulumi_azure_native import authorization

ACR_PULL = "7f951dda-4ed3-4680-a7ca-43fe172d538d"
BLOB_DATA_READER = "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"  # Storage Blob Data Reader: read and list blobs
BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"  # Storage Blob Data Contributor: also write


def assign(name: str, *, key: str, role: str, principal_id: pulumi.Input[str], scope: pulumi.Input[str],
           parent: pulumi.Resource) -> authorization.RoleAssignment:
    """`role` for a service principal (a managed identity) on `scope`. `key` makes the assignment's GUID name
    stable across runs (Azure names assignments by GUID; the same key addresses the same assignment)."""
    subscription = authorization.get_client_config_output(opts=pulumi.InvokeOutputOptions(parent=parent))
    return authorization.RoleAssignment(
        name, role_assignment_name=str(uuid.uuid5(uuid.NAMESPACE_URL, key)), principal_id=principal_id,
        principal_type=authorization.PrincipalType.SERVICE_PRINCIPAL,
        role_definition_id=subscription.subscription_id.apply(
            lambda sub: f"/subscriptions/{sub}/providers/Microsoft.Authorization/roleDefinitions/{role}"),
        scope=scope, opts=pulumi.ResourceOptions(parent=parent))
