"""Environment: one team's whole training environment, the root of the resource tree.

Order follows the data path: resource group -> monitoring -> network -> storage (+SAS) -> registry and
images. Later components (NFS server, GPU pool, training job) hang off the same root.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import pulumi
from pulumi_azure_native import resources

from infra import naming
from infra.config import StackConfig
from infra.monitoring import Monitoring, MonitoringArgs
from infra.network import Network, NetworkArgs
from infra.registry import Registry, RegistryArgs
from infra.storage import Storage, StorageArgs


@dataclass
class EnvironmentArgs:
    config: StackConfig
    now: datetime | None = None  # the clock for SAS and token expiry; tests pin it


class Environment(pulumi.ComponentResource):
    def __init__(self, name: str, args: EnvironmentArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("dltrain:index:Environment", name, None, opts)
        cfg = args.config
        now = args.now or datetime.now(timezone.utc)
        child = pulumi.ResourceOptions(parent=self)

        self.resource_group = resources.ResourceGroup(
            f"{name}-rg", resource_group_name=naming.resource_group(cfg.team, cfg.stack), location=cfg.location,
            tags=cfg.tags,
            # The resource group holds the storage account: keep it too when outputs are retained.
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=cfg.retain_outputs))
        rg = self.resource_group.name
        self.monitoring = Monitoring(f"{name}-mon", MonitoringArgs(cfg, rg), child)
        self.network = Network(f"{name}-net", NetworkArgs(cfg, rg), child)
        self.storage = Storage(f"{name}-data", StorageArgs(
            cfg, rg, subnet_ids=[self.network.compute_subnet.id, self.network.storage_subnet.id], now=now), child)
        self.monitoring.watch_storage("storage", self.storage.account.id)
        self.registry = Registry(f"{name}-reg", RegistryArgs(cfg, rg, now=now), child)

        self.outputs = {
            "resourceGroupName": rg,
            "vnetId": self.network.vnet.id,
            "computeSubnetId": self.network.compute_subnet.id,
            "storageSubnetId": self.network.storage_subnet.id,
            "storageAccountName": self.storage.account.name,
            "containerUrls": self.storage.container_urls,
            "resultsShareName": self.storage.results_share.name,
            "sas": pulumi.Output.secret(self.storage.sas),
            "registryLoginServer": self.registry.registry.login_server,
            "imageRefs": self.registry.image_refs,
            "pullIdentityId": self.registry.pull_identity.id,
            "pullIdentityClientId": self.registry.pull_identity.client_id,
            "logAnalyticsWorkspaceId": self.monitoring.workspace.id,
            "appInsightsId": self.monitoring.app_insights.id,
        }
        self.register_outputs(self.outputs)


def deploy(config: StackConfig, now: datetime | None = None) -> Environment:
    """The whole program, given its config: what __main__.py runs and what `plan` evaluates offline."""
    environment = Environment(f"dltrain-{config.team}", EnvironmentArgs(config, now))
    for key, value in environment.outputs.items():
        pulumi.export(key, value)
    return environment
