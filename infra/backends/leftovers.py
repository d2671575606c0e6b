"""`leftovers`' calls: the stack's resource group and what is in it, and the subscription's soft-deleted key
vaults, through ARM (infra/backends/preflight.py's Arm); infra/core/leftovers.py judges each answer."""
from __future__ import annotations

from infra.backends.preflight import API, Arm
from infra.core.leftovers import Leftover, deleted_vault_leftovers, group_leftovers

KEY_VAULT_API = "2024-11-01"  # keyvault: Vaults - List Deleted (the version azure-native 3.x creates vaults with)


def find(arm: Arm, subscription: str, resource_group: str) -> list[Leftover]:
    group_id = f"/subscriptions/{subscription}/resourceGroups/{resource_group}"
    group = arm.get(group_id, API["providers"], missing_ok=True)
    resources = arm.list(f"{group_id}/resources", API["providers"]) if group is not None else []
    deleted = arm.list(f"/subscriptions/{subscription}/providers/Microsoft.KeyVault/deletedVaults", KEY_VAULT_API)
    return group_leftovers(group, resources, subscription) + deleted_vault_leftovers(deleted, group_id)
