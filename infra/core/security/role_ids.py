"""The Azure built-in roles this program grants, by ID: pure data that the role assignments
(infra/components/roles.py) and the security checks (infra/core/security/resources.py: nothing else may be granted) share.

Built-in role IDs: https://learn.microsoft.com/azure/role-based-access-control/built-in-roles
"""
from __future__ import annotations

import re
import uuid

ACR_PULL = "7f951dda-4ed3-4680-a7ca-43fe172d538d"
BLOB_DATA_READER = "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"  # Storage Blob Data Reader: read and list blobs
BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"  # Storage Blob Data Contributor: also write
# Azure Batch Job Submitter: create and manage jobs (data actions jobs/*), read pools; nothing on the account
# (https://learn.microsoft.com/azure/batch/batch-role-based-access-control#azure-batch-built-in-rbac-roles).
BATCH_JOB_SUBMITTER = "48e5e92e-a480-4e71-aa9c-2778f4c13781"
# The team's groups (teamAdmins, teamMembers: infra/components/access.py). Control-plane roles, from
# https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/general (Reader, Contributor: all but
# Microsoft.Authorization/*/Write and Delete, so it cannot assign roles) and AzureML Data Scientist (use a
# workspace: jobs, models, datastores; not create or delete the workspace or its compute) from
# https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/ai-machine-learning.
READER = "acdd72a7-3385-48ef-bd42-f606fba81ae7"
CONTRIBUTOR = "b24988ac-6180-42a0-ab88-20f7382dd24c"
AZUREML_DATA_SCIENTIST = "f6c7c914-8db3-469d-8ca1-694a8f32e121"
# The budget guard's (infra/components/budget.py), each granted on the one resource it scales and nowhere else
# (resources.py: RESOURCE_ROLES): Azure Batch Account Contributor manages Batch accounts, pools and jobs
# (https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/compute#azure-batch-account-contributor);
# on a pool's scope it reaches that pool only. AzureML Compute Operator creates, updates and deletes a workspace's
# compute (https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/ai-machine-learning#azureml-compute-operator);
# on a compute's scope, that cluster only.
BATCH_ACCOUNT_CONTRIBUTOR = "29fe4964-1e60-436b-bd3a-77fd4c178b3c"
# Cost Management Reader: "Can view cost data and configuration (e.g. budgets, exports)"
# (https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/management-and-governance#cost-management-reader):
# the guard reads its budget's current spend with it, on the resource group.
COST_MANAGEMENT_READER = "72fafb9e-0641-4937-9268-a91bfd8191a3"
AZUREML_COMPUTE_OPERATOR = "e503ece1-11d0-4e8e-8e2c-7a6c3bf38815"
# Key Vault Secrets Officer: "Perform any action on the secrets of a key vault" (data actions
# Microsoft.KeyVault/vaults/secrets/*: get, list, set, delete, recover...;
# https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/security#key-vault-secrets-officer): the
# "Microsoft Azure Batch" service principal's on a user-subscription account's own vault (infra/backends/batch/
# cluster.py), the Get, List, Set, Delete (and Recover) secret permissions Batch's docs ask for, and nothing more.
# The CI deploy identity may grant it only to that principal, and only where a stack needs it (infra/core/security/ci_roles.py:
# PRINCIPAL_BOUND).
KEY_VAULT_SECRETS_OFFICER = "b86a8fe4-44ce-4948-aee5-eccb2c155cd7"
# Roles that manage a whole resource, granted only on a resource of this ARM type (the scope's last type segments).
RESOURCE_ROLES = {BATCH_ACCOUNT_CONTRIBUTOR: "Microsoft.Batch/batchAccounts/pools",
                  AZUREML_COMPUTE_OPERATOR: "Microsoft.MachineLearningServices/workspaces/computes",
                  KEY_VAULT_SECRETS_OFFICER: "Microsoft.KeyVault/vaults"}
# The stack's one custom role (declared by infra/components/storage.py, assignable in the stack's resource group
# only): Storage Blob Data Contributor's data actions without its control-plane Actions `containers/delete` and
# `containers/write`. An ABAC condition constrains data actions only ("Conditions are ... on data actions":
# https://learn.microsoft.com/azure/role-based-access-control/conditions-format), so with the built-in role a member
# or a node could delete a container through ARM (Blob Containers - Delete) whatever the condition says. Its ID is
# not a constant: custom role IDs and names are unique in the tenant, so each stack's is seeded with its resource
# group (custom_role_id). This key stands for it where the built-ins' IDs stand.
BLOB_DATA_WRITER = "blob-data-writer"
_BLOBS = "Microsoft.Storage/storageAccounts/blobServices"
# What each role the stack grants holds on storage: (control-plane Actions, DataActions), as the built-in roles'
# definitions list them (https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/storage and
# /general, checked 2026-11-25), all their Actions, not only the storage ones the names suggest. Reader and
# Contributor by wildcard (Contributor's NotActions are Microsoft.Authorization/*/Delete and */Write,
# Microsoft.Authorization/elevateAccess/Action and Blueprint and Compute gallery sharing: nothing on storage). The
# other roles (AcrPull, Batch, Azure ML) hold nothing under Microsoft.Storage.
ROLE_PERMISSIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    BLOB_DATA_READER: ((f"{_BLOBS}/containers/read", f"{_BLOBS}/generateUserDelegationKey/action"),
                       (f"{_BLOBS}/containers/blobs/read",)),
    BLOB_DATA_CONTRIBUTOR: ((f"{_BLOBS}/containers/delete", f"{_BLOBS}/containers/read",
                             f"{_BLOBS}/containers/write", f"{_BLOBS}/generateUserDelegationKey/action"),
                            (f"{_BLOBS}/containers/blobs/delete", f"{_BLOBS}/containers/blobs/read",
                             f"{_BLOBS}/containers/blobs/write", f"{_BLOBS}/containers/blobs/move/action",
                             f"{_BLOBS}/containers/blobs/add/action")),
    BLOB_DATA_WRITER: ((f"{_BLOBS}/generateUserDelegationKey/action",),
                       (f"{_BLOBS}/containers/blobs/delete", f"{_BLOBS}/containers/blobs/read",
                        f"{_BLOBS}/containers/blobs/write", f"{_BLOBS}/containers/blobs/move/action",
                        f"{_BLOBS}/containers/blobs/add/action")),
    READER: (("*/read",), ()),
    # Microsoft.Consumption/*/read, Microsoft.CostManagement/*/read, Billing, Advisor, Support and resource group
    # reads: nothing under Microsoft.Storage.
    COST_MANAGEMENT_READER: ((), ()),
    CONTRIBUTOR: (("*",), ()),
}
CUSTOM_ROLES = (BLOB_DATA_WRITER,)


def custom_role_id(subscription_id: str, resource_group: str, key: str) -> str:
    """The GUID of the stack's custom role `key` in this subscription's resource group (ARM IDs are
    case-insensitive, so the seed is lowercase): the same on every run, another in every stack."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"/subscriptions/{subscription_id}/resourcegroups/{resource_group}|"
                                              f"{key}".lower()))


def custom_role_ids(scope: str) -> dict[str, str]:
    """GUID -> key of the custom roles that may be granted on `scope` (the resource group of the scope, or none)."""
    match = re.match(r"/subscriptions/([^/]+)/resourceGroups/([^/]+)", scope or "", re.IGNORECASE)
    if not match:
        return {}
    return {custom_role_id(match[1], match[2], key): key for key in CUSTOM_ROLES}


ROLE_NAMES = {BLOB_DATA_WRITER: "Blob Data Writer (custom)", ACR_PULL: "AcrPull", BLOB_DATA_READER: "Storage Blob Data Reader",
              BLOB_DATA_CONTRIBUTOR: "Storage Blob Data Contributor", BATCH_JOB_SUBMITTER: "Azure Batch Job Submitter",
              READER: "Reader", CONTRIBUTOR: "Contributor", AZUREML_DATA_SCIENTIST: "AzureML Data Scientist",
              BATCH_ACCOUNT_CONTRIBUTOR: "Azure Batch Account Contributor",
              AZUREML_COMPUTE_OPERATOR: "AzureML Compute Operator", COST_MANAGEMENT_READER: "Cost Management Reader",
              KEY_VAULT_SECRETS_OFFICER: "Key Vault Secrets Officer"}


def role_key(role_definition_id: str, scope: str) -> str:
    """What a role assignment grants, as this module names roles: a built-in's ID, or a custom role's key."""
    role = str(role_definition_id or "").rstrip("/").rsplit("/", 1)[-1].lower()
    return custom_role_ids(scope).get(role, role)
