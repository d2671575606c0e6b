"""What a stack leaves after `pulumi destroy`, pure: from Azure's answers (the resource group and its resources,
the subscription's soft-deleted key vaults), one `Leftover` each, with what it costs or holds and the command that
removes or purges it. The calls live in infra/backends/leftovers.py; `python -m infra leftovers` prints them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Leftover:
    what: str  # e.g. "storage account stdev1234"
    cost: str  # what it bills a month, or what it holds
    command: str  # what removes or purges it; "" where nothing can (then `instead` says what follows)
    keep: str = ""  # the way back to a stack that holds it again, where there is one
    instead: str = ""  # where no command removes it: why nothing has to

    def line(self) -> str:
        removal = f"remove: `{self.command}`" if self.command else self.instead
        return f"{self.what}: {self.cost}; {removal}" + (f"; or keep it: {self.keep}" if self.keep else "")


# What `retainOutputs` kept: the stack's next `up` fails on it ("cannot create already existing resource") unless
# it adopts it (infra/stack.py, Pulumi.yaml's adoptRetained).
ADOPT = ("set `adoptRetained: true` (with `azure-native:subscriptionId`) in the stack file and the next `pulumi up` "
         "adopts it with what it holds; `pulumi up` without it fails on it")


# Blob storage bills per GB stored a month and per operation, whatever is left in it
# (https://azure.microsoft.com/pricing/details/storage/blobs/); an empty account bills nothing.
STORAGE_COST = "bills for the data left in it (per GB a month: Hot LRS about $0.02; download what you keep first: " \
               "`python -m infra download`)"


def group_leftovers(group: Mapping[str, Any] | None, resources: Sequence[Mapping[str, Any]],
                    subscription: str) -> list[Leftover]:
    """A group that outlived `destroy` (retainOutputs keeps it and its storage account: infra/components/
    infra/stack.py) and each resource still in it (Resources - List By Resource Group:
    https://learn.microsoft.com/rest/api/resources/resources/list-by-resource-group, value[{id, name, type}])."""
    if group is None:
        return []
    name = group.get("name", "")
    found = []
    for resource in resources:
        kind = str(resource.get("type", ""))
        if kind.lower() == "microsoft.storage/storageaccounts":
            found.append(Leftover(f"storage account {resource.get('name')} (retained)", STORAGE_COST,
                                  f"az storage account delete --name {resource.get('name')} --resource-group {name} "
                                  "--yes", keep=ADOPT))
        else:
            found.append(Leftover(f"{kind} {resource.get('name')}", "may bill (see Cost Management for the group)",
                                  f"az resource delete --ids {resource.get('id')}"))
    retained = any(str(r.get("type", "")).lower() == "microsoft.storage/storageaccounts" for r in resources)
    found.append(Leftover(f"resource group {name} ({len(resources)} resources in it)", "bills nothing itself",
                          f"az group delete --name {name} --subscription {subscription} --yes",
                          keep=ADOPT if retained else ""))
    return found


def deleted_vault_leftovers(deleted: Sequence[Mapping[str, Any]], group_id: str) -> list[Leftover]:
    """The stack's soft-deleted key vaults (Vaults - List Deleted: https://learn.microsoft.com/rest/api/keyvault/
    keyvault/vaults/list-deleted, value[{name, properties{vaultId, location, deletionDate, scheduledPurgeDate,
    purgeProtectionEnabled}}]): a deleted vault bills nothing but holds its name until it is purged, or, with purge
    protection, until its retention ends (https://learn.microsoft.com/azure/key-vault/general/soft-delete-overview)."""
    found = []
    for vault in deleted:
        props = vault.get("properties") or {}
        if not str(props.get("vaultId", "")).lower().startswith(group_id.lower() + "/"):
            continue
        name, location, until = vault.get("name"), props.get("location"), props.get("scheduledPurgeDate")
        if props.get("purgeProtectionEnabled"):
            found.append(Leftover(f"key vault {name} (soft-deleted, purge protection)", f"$0, holds its name until "
                                  f"{until}", "", instead="nothing can purge it before then, and nothing needs to: "
                                  "the stack's next `up` names its vault (Azure ML's, or a user-subscription Batch "
                                  "account's) from a new name generation, so the old name is not asked for"))
        else:
            found.append(Leftover(f"key vault {name} (soft-deleted)", f"$0, holds its name until {until}",
                                  f"az keyvault purge --name {name} --location {location}"))
    return found
