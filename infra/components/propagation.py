"""A wait after a role assignment that the next resource's creation checks at once, as a Pulumi dynamic resource.

Azure RBAC is not immediate: "When you assign roles or remove role assignments, it can take up to 10 minutes for
changes to take effect", because "Azure Resource Manager sometimes caches configurations and data to improve
performance" (https://learn.microsoft.com/azure/role-based-access-control/troubleshooting, "Symptom - Role assignment
changes are not being detected"). Where the service that received the grant checks it while the next resource is created (the
user-subscription Batch account validates its Key Vault, on which the Batch service was just granted Key Vault
Secrets Officer: infra/backends/batch/cluster.py), a first `up` would otherwise fail once and pass when run again.
Pulumi retries nothing by itself, so the dependent waits for this resource, which waits on its create only: a later
`up` with the same grant waits no more; a new grant (another ID) is a replacement and waits again.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider

WAIT_S = 300  # the page's "up to 10 minutes" is the worst case; Batch's own check is one of the first after the grant
sleep: Callable[[float], None] = time.sleep  # tests replace it


class PropagationProvider(ResourceProvider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        sleep(float(props["propagation_s"]))
        return CreateResult(id_=str(props["grant"]), outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = olds.get("grant") != news.get("grant")
        return DiffResult(changes=changed, replaces=["grant"] if changed else [], delete_before_replace=False)


class Propagation(pulumi.dynamic.Resource):
    """Created `seconds` after `grant` (a role assignment's ID) exists; make the resource that needs the grant
    depend on it."""

    def __init__(self, name: str, grant: pulumi.Input[str], seconds: int = WAIT_S,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(PropagationProvider(), name, {"grant": grant, "propagation_s": seconds}, opts)
