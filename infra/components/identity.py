"""NodeIdentity: the user-assigned managed identity the GPU nodes run as.

One identity for what the nodes reach: the registry grants it AcrPull (infra/components/registry.py), storage its
containers, and the Batch pool or Azure ML compute cluster carries it (the stack outputs name it
`pullIdentityId`/`pullIdentityClientId`, for the jobs that use it). So no SAS and no registry password sits on
a node or in a job definition.
"""
from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_azure_native import managedidentity


@dataclass
class NodeIdentityArgs:
    resource_group_name: pulumi.Input[str]
    location: str
    tags: dict[str, str]
    # The identity's URN before it had its own component (a child of the Registry, named `<registry>-pull-id`):
    # aliased, so that an existing stack moves it instead of replacing it, which would re-grant every role and
    # change the clientId the jobs use (https://www.pulumi.com/docs/iac/concepts/options/aliases/).
    previous_parent: pulumi.Input[str] | None = None
    previous_name: str | None = None


class NodeIdentity(pulumi.ComponentResource):
    def __init__(self, name: str, args: NodeIdentityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("dltrain:identity:NodeIdentity", name, None, opts)
        aliases = ([pulumi.Alias(name=args.previous_name, parent=args.previous_parent)]
                   if args.previous_name else [])
        self.identity = managedidentity.UserAssignedIdentity(
            f"{name}-pull-id", resource_group_name=args.resource_group_name, location=args.location, tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, aliases=aliases))
        self.register_outputs({"id": self.identity.id, "client_id": self.identity.client_id})
