"""Names of the Azure resources whose names must be globally unique or predictable (pure functions).

Storage accounts, registries, Batch accounts and Key Vaults share global namespaces (a name taken in any
subscription of any tenant is taken for all), and storage, registry and Batch names allow only lowercase letters and
digits, so their names carry a short hash of (team, stack, location), and of the subscription when the stack names
it (`azure-native:subscriptionId`, StackConfig.subscription_id): stable across `pulumi up`, distinct between teams
and stacks, and between the same stack file deployed to two subscriptions (a subscription ID is unique across
tenants, so tenants differ too). All of it is in the stack file, so `plan` computes the names offline.

Stacks deployed before the subscription was hashed keep their names: a stack without `azure-native:subscriptionId`
hashes what it always did, and one that adds it to a deployed stack sets `namesWithoutSubscription: true` with it
(docs/naming.md): a storage account, registry or Batch account cannot be renamed, so a new name would replace it.

A Key Vault and an Azure ML workspace keep their names after they are deleted (a purge-protected vault until its
soft-delete retention ends, 90 days by default; a workspace 14 days), so `pulumi destroy` then `pulumi up` of the
same stack would ask for a name Azure still holds. Their hash also takes a `generation`: a value the stack fixes
when it first creates them and keeps in its state until it is destroyed (infra/components/name_generation.py:
Azure ML's vault and workspace, a user-subscription Batch account's vault).
"""
from __future__ import annotations

import hashlib


def _suffix(*parts: str, subscription: str | None = None) -> str:
    # The subscription joins the hash only when given, so a stack without it keeps the names it always had.
    parts = (*parts, subscription) if subscription else parts
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:8]


def resource_group(team: str, stack: str) -> str:
    return f"rg-dltrain-{team}-{stack}"  # unique within its subscription only: no hash needed


def storage_account(team: str, stack: str, location: str, subscription: str | None = None) -> str:
    return f"st{team}{_suffix('st', team, stack, location, subscription=subscription)}"  # <= 22 chars of [a-z0-9]


def registry(team: str, stack: str, location: str, subscription: str | None = None) -> str:
    return f"cr{team}{_suffix('cr', team, stack, location, subscription=subscription)}"


def nfs_storage_account(team: str, stack: str, location: str, subscription: str | None = None) -> str:
    return f"nfs{team}{_suffix('nfs', team, stack, location, subscription=subscription)}"  # <= 23 chars of [a-z0-9]


def batch_account(team: str, stack: str, location: str, subscription: str | None = None) -> str:
    # 3-24 lowercase letters and digits
    return f"ba{team}{_suffix('ba', team, stack, location, subscription=subscription)}"


def key_vault(team: str, stack: str, location: str, generation: str, subscription: str | None = None) -> str:
    # 3-24 letters, digits and hyphens, globally unique
    return f"kv-{team}-{_suffix('kv', team, stack, location, generation, subscription=subscription)}"


def aml_workspace(team: str, stack: str, generation: str) -> str:
    return f"mlw-{team}-{_suffix('mlw', team, stack, generation)}"  # 3-33 letters, digits, hyphens; unique in its group


def retained_ids(subscription: str, group: str, account: str, containers: tuple[str, ...]) -> dict[str, str]:
    """The ARM IDs of what `retainOutputs` keeps after `pulumi destroy` (the group, the data account, its blob
    service settings and containers), which the next `up` adopts with Pulumi's `import` option (adoptRetained).
    IDs as ARM writes them (https://learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules:
    .../providers/Microsoft.Storage/storageAccounts/{name}/blobServices/default/containers/{name})."""
    group_id = f"/subscriptions/{subscription}/resourceGroups/{group}"
    account_id = f"{group_id}/providers/Microsoft.Storage/storageAccounts/{account}"
    return {"group": group_id, "account": account_id, "blob-service": f"{account_id}/blobServices/default",
            **{f"container-{c}": f"{account_id}/blobServices/default/containers/{c}" for c in containers}}
