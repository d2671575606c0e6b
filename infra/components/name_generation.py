"""The generation a stack's soft-deletable names are made with, as a Pulumi dynamic resource, for every backend:
Azure ML's Key Vault and workspace (infra/backends/azureml/workspace.py) and the user-subscription Batch account's
Key Vault (infra/backends/batch/cluster.py). It lives here, a floor below the backends, because a backend's folder
may not import another backend's (tests/infra/test_layers.py).

Why a generation: a deleted Key Vault "remains recoverable for a configurable period of 7 to 90 calendar days", and
with purge protection nobody can purge it before then (https://learn.microsoft.com/azure/key-vault/general/
soft-delete-overview); vault names are global, so the deleted vault holds its name for those days. An Azure ML
workspace does the same for 14 days ("You can't reuse the name of a workspace that has been soft deleted",
https://learn.microsoft.com/azure/machine-learning/concept-soft-delete). A fixed name would make `pulumi destroy`
then `pulumi up` of the same stack ask for a name Azure still holds; a name hashed with the generation does not.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider


class NameGenerationProvider(ResourceProvider):
    """Every run proposes a generation (the time of the run); the first proposal is kept in the stack's state, later
    ones change nothing (diff: no changes), so the names stay put for the stack's life. `pulumi destroy` deletes it
    with the rest, and the next `up` starts a new generation, so it never asks for a name a deleted vault or
    workspace still holds."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(id_=props["generation"], outs={"generation": props["generation"]})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return DiffResult(changes=False)


class NameGeneration(pulumi.dynamic.Resource):
    generation: pulumi.Output[str]

    def __init__(self, name: str, proposed: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__(NameGenerationProvider(), name, {"generation": proposed}, opts)


def proposed_generation(now: datetime) -> str:
    return now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
