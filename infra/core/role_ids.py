"""The Azure built-in roles this program grants, by ID: pure data that the role assignments
(infra/components/roles.py) and the security checks (infra/core/security.py: nothing else may be granted) share.

Built-in role IDs: https://learn.microsoft.com/azure/role-based-access-control/built-in-roles
"""
from __future__ import annotations

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
# (security.py: RESOURCE_ROLES): Azure Batch Account Contributor manages Batch accounts, pools and jobs
# (https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/compute#azure-batch-account-contributor);
# on a pool's scope it reaches that pool only. AzureML Compute Operator creates, updates and deletes a workspace's
# compute (https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/ai-machine-learning#azureml-compute-operator);
# on a compute's scope, that cluster only.
BATCH_ACCOUNT_CONTRIBUTOR = "29fe4964-1e60-436b-bd3a-77fd4c178b3c"
AZUREML_COMPUTE_OPERATOR = "e503ece1-11d0-4e8e-8e2c-7a6c3bf38815"
# Roles that manage a whole resource, granted only on a resource of this ARM type (the scope's last type segments).
RESOURCE_ROLES = {BATCH_ACCOUNT_CONTRIBUTOR: "Microsoft.Batch/batchAccounts/pools",
                  AZUREML_COMPUTE_OPERATOR: "Microsoft.MachineLearningServices/workspaces/computes"}
ROLE_NAMES = {ACR_PULL: "AcrPull", BLOB_DATA_READER: "Storage Blob Data Reader",
              BLOB_DATA_CONTRIBUTOR: "Storage Blob Data Contributor", BATCH_JOB_SUBMITTER: "Azure Batch Job Submitter",
              READER: "Reader", CONTRIBUTOR: "Contributor", AZUREML_DATA_SCIENTIST: "AzureML Data Scientist",
              BATCH_ACCOUNT_CONTRIBUTOR: "Azure Batch Account Contributor",
              AZUREML_COMPUTE_OPERATOR: "AzureML Compute Operator"}
