"""Names of the Azure resources whose names must be globally unique or predictable (pure functions).

Storage accounts and registries share one global namespace and allow only lowercase letters and digits,
so their names carry a short hash of (team, stack, location): stable across `pulumi up`, distinct
between teams and stacks.

A Key Vault and an Azure ML workspace keep their names after they are deleted (a purge-protected vault until its
soft-delete retention ends, 90 days by default; a workspace 14 days), so `pulumi destroy` then `pulumi up` of the
same stack would ask for a name Azure still holds. Their hash also takes a `generation`: a value the stack fixes
when it first creates them and keeps in its state until it is destroyed (infra/backends/azureml/workspace.py).
"""
from __future__ import annotations

import hashlib


def _suffix(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:8]


def resource_group(team: str, stack: str) -> str:
    return f"rg-dltrain-{team}-{stack}"


def storage_account(team: str, stack: str, location: str) -> str:
    return f"st{team}{_suffix('st', team, stack, location)}"  # <= 22 chars of [a-z0-9]


def registry(team: str, stack: str, location: str) -> str:
    return f"cr{team}{_suffix('cr', team, stack, location)}"


def nfs_storage_account(team: str, stack: str, location: str) -> str:
    return f"nfs{team}{_suffix('nfs', team, stack, location)}"  # <= 23 chars of [a-z0-9]


def batch_account(team: str, stack: str, location: str) -> str:
    return f"ba{team}{_suffix('ba', team, stack, location)}"  # 3-24 lowercase letters and digits


def key_vault(team: str, stack: str, location: str, generation: str) -> str:
    # 3-24 letters, digits and hyphens, globally unique
    return f"kv-{team}-{_suffix('kv', team, stack, location, generation)}"


def aml_workspace(team: str, stack: str, generation: str) -> str:
    return f"mlw-{team}-{_suffix('mlw', team, stack, generation)}"  # 3-33 letters, digits, hyphens; unique in its group
