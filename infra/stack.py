"""The stack: one team's whole training environment (Environment), the root of the resource tree, and the only
place that wires the components and the stack's backend together (the Pulumi program, __main__.py, runs `deploy`).

Order follows the data path: resource group -> monitoring -> network -> storage (+SAS) -> registry and
images -> then the backend. batch (the reference architecture): NFS file server (staged from storage) ->
Batch account and GPU pool (mounting NFS, pulling the images) -> the training job, launched once the pool
exists (unless trainingLaunchOnUp is false). azureml (its successor): an Azure ML workspace, GPU compute
cluster, datastore and environments (infra/backends/azureml/workspace.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import pulumi
from pulumi_azure_native import authorization, resources

from infra.backends import Declares, Describes, backend
from infra.backends.declared import Foundation
from infra.backends.shared import StackOutputs
from infra.components import roles
from infra.components.access import LEVELS, TeamAccess, TeamAccessArgs, team_grants
from infra.components.budget import TeamBudget, TeamBudgetArgs, start_of_month
from infra.core import naming
from infra.core.backend_facts import facts
from infra.core.config.stack import StackConfig
from infra.core.containers import CONTAINERS
from infra.components.identity import NodeIdentity, NodeIdentityArgs
from infra.components.monitoring import Monitoring, MonitoringArgs
from infra.components.network import Network, NetworkArgs
from infra.components.registry import Registry, RegistryArgs
from infra.components.storage import Storage, StorageArgs


@dataclass
class EnvironmentArgs:
    config: StackConfig
    now: datetime | None = None  # the clock for SAS and token expiry; tests pin it


class Environment(pulumi.ComponentResource):
    def __init__(self, name: str, args: EnvironmentArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("dltrain:index:Environment", name, None, opts)
        cfg = args.config
        now = args.now or datetime.now(timezone.utc)  # the backend's components take it too
        child = pulumi.ResourceOptions(parent=self)

        group_name = naming.resource_group(cfg.team, cfg.stack)
        account_name = naming.storage_account(cfg.team, cfg.stack, cfg.location, cfg.naming_subscription)
        # adoptRetained: what an earlier destroy kept is adopted (Pulumi's `import` option: imported when the stack
        # does not hold it, "treated like any other resource" when it holds it with the same ID, pulumi/pulumi
        # developer-docs/architecture/import.md), with the inputs it was created with, so the import does not diff.
        # Without it azure-native refuses to create a resource that exists (pulumi/pulumi-azure-native: "cannot
        # create already existing resource"), and `leftovers` says to set it.
        adopted = naming.retained_ids(str(cfg.subscription_id), group_name, account_name, CONTAINERS) \
            if cfg.adopt_retained else {}
        self.resource_group = resources.ResourceGroup(
            f"{name}-rg", resource_group_name=group_name, location=cfg.location,
            tags=cfg.tags,
            # The resource group holds the storage account: keep it too when outputs are retained.
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=cfg.storage.retain_outputs,
                                        import_=adopted.get("group")))
        rg = self.resource_group.name
        place = dict(resource_group_name=rg, location=cfg.location, tags=cfg.tags)
        self.monitoring = Monitoring(f"{name}-mon", MonitoringArgs(cfg.monitoring, **place), child)
        self.network = Network(f"{name}-net", NetworkArgs(
            cfg.network, **place, key_vault_endpoint=facts(cfg.backend).key_vault_endpoint,
            auto_named=cfg.network_auto_named), child)
        self.storage = Storage(f"{name}-data", StorageArgs(
            cfg.storage, **place, account_name=account_name, adopted=adopted,
            subnet_ids=[self.network.compute_subnet.id, self.network.storage_subnet.id],
            allowed_ip_ranges=cfg.network.allowed_ip_ranges, now=now), child)
        self.monitoring.watch_storage("storage", self.storage.account.id)
        # The GPU nodes' identity (Batch pool or Azure ML cluster): pulls the images, reads and writes storage.
        # It was the Registry's child named f"{name}-reg-pull-id": aliased there, so `up` moves it, not replaces it.
        self.node_identity = NodeIdentity(f"{name}-nodes", NodeIdentityArgs(
            **place, previous_name=f"{name}-reg-pull-id",
            previous_parent=pulumi.create_urn(f"{name}-reg", "dltrain:registry:Registry", parent=self)), child)
        nodes = self.node_identity.identity
        self.registry = Registry(f"{name}-reg", RegistryArgs(
            cfg.registry, **place,
            registry_name=naming.registry(cfg.team, cfg.stack, cfg.location, cfg.naming_subscription),
            pull_principal_id=nodes.principal_id, now=now, allowed_ip_ranges=cfg.network.allowed_ip_ranges,
            vnet_id=self.network.vnet.id, endpoint_subnet_id=self.network.storage_subnet.id), child)
        self.monitoring.watch_registry("registry", self.registry.registry.id)
        # The GPU nodes reach storage with their identity, so no SAS sits in job definitions: the scripts and
        # data to read, the outputs to write (Batch uploads output files with it; Azure ML reads datastores).
        self.node_grants = [
            self.storage.grant("nodes-scripts", nodes.principal_id, "scripts", roles.BLOB_DATA_READER),
            self.storage.grant("nodes-data", nodes.principal_id, "data", roles.BLOB_DATA_READER),
            self.storage.grant("nodes-outputs", nodes.principal_id, "outputs", roles.BLOB_DATA_WRITER),
        ]
        # Whoever runs `pulumi up` (the deployer) gets the data-plane roles for what `up` itself does there:
        # Owner and Contributor carry no data actions. Each grant's description says why; plan lists them.
        self.deployer = authorization.get_client_config_output(opts=pulumi.InvokeOutputOptions(parent=self)).object_id
        subscription_id = authorization.get_client_config_output(
            opts=pulumi.InvokeOutputOptions(parent=self)).subscription_id
        # The stack's backend, once: what it declared comes back as a value (its components, its job, its outputs,
        # its service and what the budget guard stops); it reads the foundation and writes nothing onto it.
        declaring: Declares = backend(cfg.backend)
        self.declared = declaring.declare(Foundation(
            parent=self, now=now, network=self.network, storage=self.storage, registry=self.registry,
            monitoring=self.monitoring, node_identity=self.node_identity, node_grants=tuple(self.node_grants),
            deployer=self.deployer), name, cfg, rg)
        values = dict(
            subscription_id=subscription_id,
            resource_group_name=rg,
            vnet_id=self.network.vnet.id,
            compute_subnet_id=self.network.compute_subnet.id,
            storage_subnet_id=self.network.storage_subnet.id,
            storage_account_name=self.storage.account.name,
            container_urls=self.storage.container_urls,
            sas=pulumi.Output.secret(self.storage.sas),
            registry_login_server=self.registry.registry.login_server,
            image_refs=self.registry.image_refs,
            pull_identity_id=nodes.id,
            pull_identity_client_id=nodes.client_id,
            log_analytics_workspace_id=self.monitoring.workspace.id,
            app_insights_id=self.monitoring.app_insights.id,
            backend=cfg.backend,
            **self.declared.outputs,
        )
        # The team's Entra groups (teamAdmins, teamMembers) on this stack's resources only (access.py).
        self.team_access = None
        if cfg.access.admins or cfg.access.members:
            describing: Describes = backend(cfg.backend)  # what its service grants the team
            scopes = {"resourceGroup": self.resource_group.id, "storageAccount": self.storage.account.id,
                      **{c: self.storage.containers[c].id for c in ("data", "outputs", "status")},
                      "service": self.declared.service_id}
            self.team_access = TeamAccess(f"{name}-team", TeamAccessArgs(cfg.access, scopes, {
                level: team_grants(level, describing.team_grants(cfg, level)) for level in LEVELS},
                {roles.BLOB_DATA_WRITER: self.storage.writer_role_id}), child)
        # monthlyBudgetUsd: Azure's budget on the resource group, and the guard that scales the GPU nodes to zero
        # when it runs out (budget.py).
        self.budget = None
        if cfg.budget.monthly_usd is not None:
            self.budget = TeamBudget(f"{name}-budget", TeamBudgetArgs(
                cfg.budget, resource_group_id=self.resource_group.id, resource_group_name=rg,
                location=cfg.location, tags=cfg.tags, stop=self.declared.budget_stop,
                start_date=start_of_month(now)), child)
            self.monitoring.watch_logic_app("budget-guard", self.budget.workflow.id)
        # The export names (camelCase, the contract of `pulumi stack output`) come from StackOutputs.
        self.outputs = StackOutputs(**values).exports(tuple(values))
        self.register_outputs(self.outputs)


def deploy(config: StackConfig, now: datetime | None = None) -> Environment:
    """The whole program, given its config: what __main__.py runs and what `plan` evaluates offline."""
    environment = Environment(f"dltrain-{config.team}", EnvironmentArgs(config, now))
    for key, value in environment.outputs.items():
        pulumi.export(key, value)
    return environment
