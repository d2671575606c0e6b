"""What a backend's `declare` is handed and what it hands back, both as values (pulumi/examples: a component takes
inputs and returns outputs; it never writes onto its parent). infra/stack.py builds the Foundation, calls the
stack's backend once, and reads the Declared it gets back: the outputs to export, the scope of the team's service
grants, what the budget guard stops. Nothing goes back the other way.

Pure: the Pulumi types are named for the reader only (TYPE_CHECKING), so importing this stays light.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pulumi

    from infra.components.budget import StopAction
    from infra.components.identity import NodeIdentity
    from infra.components.monitoring import Monitoring
    from infra.components.network import Network
    from infra.components.registry import Registry
    from infra.components.storage import Storage


@dataclass(frozen=True)
class Foundation:
    """What every stack has, built before its backend (infra/stack.py): what a backend's `declare` needs of it,
    read-only. Its components' methods that declare a child of theirs (Storage.grant, Monitoring.watch_*) are how a
    backend adds a grant or a log feed, so those resources keep their parents."""
    parent: pulumi.ComponentResource  # the stack's Environment: the backend's components are its children
    now: datetime  # the clock for SAS and token expiry
    network: Network
    storage: Storage
    registry: Registry
    monitoring: Monitoring
    node_identity: NodeIdentity  # the GPU nodes' managed identity
    node_grants: tuple[Any, ...]  # its blob roles (RoleAssignments): what a job waits for
    deployer: pulumi.Output[str]  # the object ID of whoever runs `pulumi up`


@dataclass(frozen=True)
class Declared:
    """What a backend declared, as the stack reads it."""
    outputs: Mapping[str, Any]  # its own stack outputs, by StackOutputs field (infra/backends/shared.py)
    service_id: pulumi.Output[str]  # its job service's resource ID (Batch account, Azure ML workspace): the
    # scope "service" of the team's grants (infra/components/access.py)
    budget_stop: StopAction  # what the budget guard does to stop its GPU nodes' spend (infra/components/budget.py)
    components: Mapping[str, pulumi.ComponentResource]  # the components it made, by role (nfs, cluster, azureml)
    job: pulumi.CustomResource | None = None  # the training job resource, where `up` launches one
    deployer_grants: tuple[Any, ...] = ()  # the deployer's data-plane roles it made (RoleAssignments)
