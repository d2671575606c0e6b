"""Environment: one team's whole training environment, the root of the resource tree.

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

from infra.components import roles
from infra.backends.azureml.training_job import AmlTrainingJob, AmlTrainingJobArgs
from infra.backends.azureml.workspace import AzureMl, AzureMlArgs
from infra.core import naming
from infra.backends.batch.cluster import Cluster, ClusterArgs
from infra.core.config import StackConfig
from infra.components.identity import NodeIdentity, NodeIdentityArgs
from infra.components.monitoring import Monitoring, MonitoringArgs
from infra.components.network import Network, NetworkArgs
from infra.components.nfs import NfsArgs, NfsNames, NfsServer
from infra.components.registry import Registry, RegistryArgs
from infra.components.storage import Storage, StorageArgs
from infra.backends.batch.spec import job_inputs
from infra.backends.azureml.job import aml_job_inputs
from infra.backends.batch.training_job import TrainingJob, TrainingJobArgs


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
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=cfg.storage.retain_outputs))
        rg = self.resource_group.name
        place = dict(resource_group_name=rg, location=cfg.location, tags=cfg.tags)
        self.monitoring = Monitoring(f"{name}-mon", MonitoringArgs(cfg.monitoring, **place), child)
        self.network = Network(f"{name}-net", NetworkArgs(cfg.network, **place,
                                                          key_vault_endpoint=cfg.backend == "azureml"), child)
        self.storage = Storage(f"{name}-data", StorageArgs(
            cfg.storage, **place, account_name=naming.storage_account(cfg.team, cfg.stack, cfg.location),
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
            cfg.registry, **place, registry_name=naming.registry(cfg.team, cfg.stack, cfg.location),
            pull_principal_id=nodes.principal_id, now=now), child)
        urls = self.storage.container_urls
        # The GPU nodes reach storage with their identity, so no SAS sits in job definitions: the scripts and
        # data to read, the outputs to write (Batch uploads output files with it; Azure ML reads datastores).
        self.node_grants = [
            self.storage.grant("nodes-scripts", nodes.principal_id, "scripts", roles.BLOB_DATA_READER),
            self.storage.grant("nodes-data", nodes.principal_id, "data", roles.BLOB_DATA_READER),
            self.storage.grant("nodes-outputs", nodes.principal_id, "outputs", roles.BLOB_DATA_CONTRIBUTOR),
        ]
        # Whoever runs `pulumi up` (the deployer) gets the data-plane roles for what `up` itself does there:
        # Owner and Contributor carry no data actions. Each grant's description says why; plan lists them.
        self.deployer = authorization.get_client_config_output(opts=pulumi.InvokeOutputOptions(parent=self)).object_id
        self.deployer_grants: list = []
        self.job = None
        if cfg.backend == "azureml":
            # Identity-based system datastores: Azure ML reads a job's code snapshot and writes its logs and MLflow
            # artifacts in the workspace's own containers (which the workspace names) with the compute's
            # identity, and azure-ai-ml uploads the snapshot with the caller's: both need Storage Blob Data
            # Contributor on the account ("Scenarios for role assignments" in
            # https://learn.microsoft.com/azure/machine-learning/how-to-disable-local-auth-storage).
            # On the account, but never writing the stack's own containers: the training code that runs as this
            # identity may not rewrite the dataset, the scripts or the staging reports (outputs it writes by
            # its own grant). Which containers Azure ML itself uses is not listed in its docs, so the condition
            # names ours rather than theirs.
            self.node_grants.append(self.storage.grant(
                "nodes-workspace", nodes.principal_id, None, roles.BLOB_DATA_CONTRIBUTOR,
                condition=roles.blob_writes_except(("data", "scripts", "status"))))
            if cfg.launches_job_on_up:
                self.deployer_grants.append(self.storage.grant(
                    "deployer-workspace", self.deployer, None, roles.BLOB_DATA_CONTRIBUTOR,
                    principal_type=cfg.deployer_principal_type,
                    description=f"{roles.DEPLOYER}`pulumi up` uploads the launched Azure ML job's code snapshot to the "
                                "workspace's storage (identity-based datastores)"))
            self.azureml = AzureMl(f"{name}-ml", AzureMlArgs(
                cfg, rg, vnet_id=self.network.vnet.id, compute_subnet_id=self.network.compute_subnet.id,
                storage_subnet_id=self.network.storage_subnet.id, storage_account_id=self.storage.account.id,
                storage_account_name=self.storage.account.name, registry_id=self.registry.registry.id,
                app_insights_id=self.monitoring.app_insights.id, nodes_identity_id=nodes.id,
                image_refs=self.registry.image_refs, depends_on=[self.registry.acr_pull, *self.node_grants], now=now),
                child)
            self.monitoring.watch_azureml("azureml", self.azureml.workspace.id)
            subscription = authorization.get_client_config_output(
                opts=pulumi.InvokeOutputOptions(parent=self)).subscription_id
            if cfg.launches_job_on_up:  # not with a private workspace: `up` cannot reach it (plan says so)
                # The job's inputs from the same stack outputs `python -m infra submit` reads: one mapping.
                stack_outputs = pulumi.Output.all(
                    amlEnvironments=self.azureml.environments, amlComputeName=self.azureml.compute.name,
                    pullIdentityClientId=nodes.client_id)
                self.job = AmlTrainingJob(f"{name}-job", AmlTrainingJobArgs(
                    subscription_id=subscription, resource_group=rg, workspace=self.azureml.workspace.name,
                    inputs=stack_outputs.apply(lambda outputs: aml_job_inputs(cfg, outputs)),
                    data_container_url=urls["data"]),
                    pulumi.ResourceOptions(parent=self, depends_on=[self.azureml, *self.deployer_grants]))
            backend_outputs = {
                "trainingJobId": self.job.job_name if self.job else "",
                "amlWorkspaceName": self.azureml.workspace.name,
                "amlComputeName": self.azureml.compute.name,
                "amlDatastores": {c: store.name for c, store in self.azureml.datastores.items()},
                "amlEnvironments": self.azureml.environments,
            }
        else:
            backend_outputs = self._batch(name, cfg, rg, urls, nodes)
        self.outputs = {
            "subscriptionId": authorization.get_client_config_output(
                opts=pulumi.InvokeOutputOptions(parent=self)).subscription_id,
            "resourceGroupName": rg,
            "vnetId": self.network.vnet.id,
            "computeSubnetId": self.network.compute_subnet.id,
            "storageSubnetId": self.network.storage_subnet.id,
            "storageAccountName": self.storage.account.name,
            "containerUrls": self.storage.container_urls,
            "sas": pulumi.Output.secret(self.storage.sas),
            "registryLoginServer": self.registry.registry.login_server,
            "imageRefs": self.registry.image_refs,
            "pullIdentityId": nodes.id,
            "pullIdentityClientId": nodes.client_id,
            "logAnalyticsWorkspaceId": self.monitoring.workspace.id,
            "appInsightsId": self.monitoring.app_insights.id,
            "backend": cfg.backend,
            **backend_outputs,
        }
        self.register_outputs(self.outputs)

    def _batch(self, name: str, cfg: StackConfig, rg, urls, nodes) -> dict:
        """The reference architecture's backend: the NFS server, the Batch pool and the training job."""
        child = pulumi.ResourceOptions(parent=self)
        self.nfs = NfsServer(f"{name}-nfs", NfsArgs(
            cfg.nfs, rg, cfg.location, cfg.tags, export_to=str(cfg.network.compute_subnet),
            names=NfsNames(vm=f"nfs-{cfg.team}-{cfg.stack}", host=f"nfs-{cfg.team}",
                           account=naming.nfs_storage_account(cfg.team, cfg.stack, cfg.location)),
            storage_subnet_id=self.network.storage_subnet.id,
            compute_subnet_id=self.network.compute_subnet.id,
            container_urls={c: urls[c] for c in ("data", "scripts", "status")},
            container_ids={c: self.storage.containers[c].id for c in ("data", "scripts", "status")}),
            pulumi.ResourceOptions(parent=self, depends_on=self.storage.scripts))
        self.cluster = Cluster(f"{name}-cluster", ClusterArgs(
            cfg, rg, compute_subnet_id=self.network.compute_subnet.id,
            registry_server=self.registry.registry.login_server, image_names=self.registry.image_names,
            pull_identity_id=nodes.id, nfs_source=self.nfs.mount_source,
            nfs_options=self.nfs.mount_options,
            # The nodes prefetch the launched job's image when they start: it must be pushed by then.
            depends_on=[self.registry.acr_pull, self.nfs, *self.registry.images.values()]), child)
        self.monitoring.watch_batch("batch", self.cluster.account.id)
        if cfg.training_launch_on_up:
            # With the vm kind the job is submitted once the NFS server reports the data staged (see TrainingJob).
            status = urls["status"] if cfg.nfs_kind == "vm" else ""
            # The deployer's grants for that: list `data` and read the staging report (the data check before the
            # job is submitted), submit (and on destroy delete) the job.
            self.deployer_grants.append(self.storage.grant(
                "deployer-data", self.deployer, "data", roles.BLOB_DATA_READER,
                principal_type=cfg.deployer_principal_type,
                description=f"{roles.DEPLOYER}`pulumi up` checks that `data` holds the dataset before it submits "
                            "the training job"))
            if status:
                self.deployer_grants.append(self.storage.grant(
                    "deployer-status", self.deployer, "status", roles.BLOB_DATA_READER,
                    principal_type=cfg.deployer_principal_type,
                    description=f"{roles.DEPLOYER}`pulumi up` reads the NFS server's staging report before it "
                                "submits the training job"))
            self.deployer_grants.append(self.cluster.grant(
                "deployer-jobs", self.deployer, roles.BATCH_JOB_SUBMITTER, principal_type=cfg.deployer_principal_type,
                description=f"{roles.DEPLOYER}`pulumi up` submits the training job (and `destroy` deletes it)"))
            # The job's inputs from the same stack outputs `python -m infra submit` reads: one mapping.
            stack_outputs = pulumi.Output.all(
                poolId=self.cluster.pool.name, imageRefs=self.registry.image_refs,
                registryLoginServer=self.registry.registry.login_server, pullIdentityId=nodes.id,
                pullIdentityClientId=nodes.client_id, containerUrls=urls)
            self.job = TrainingJob(f"{name}-job", TrainingJobArgs(
                batch_endpoint=self.cluster.endpoint, data_status_url=status, data_container_url=urls["data"],
                inputs=stack_outputs.apply(lambda outputs: job_inputs(cfg, outputs))),
                pulumi.ResourceOptions(parent=self, depends_on=[self.cluster.pool, *self.storage.scripts,
                                                                *self.node_grants, *self.deployer_grants]))
        return {
            "nfsKind": cfg.nfs_kind,
            "nfsMountSource": self.nfs.mount_source,
            "batchAccountName": self.cluster.account.name,
            "batchAccountEndpoint": self.cluster.endpoint,
            "poolId": self.cluster.pool.name,
            "trainingJobId": self.job.job_id if self.job else "",
        }


def deploy(config: StackConfig, now: datetime | None = None) -> Environment:
    """The whole program, given its config: what __main__.py runs and what `plan` evaluates offline."""
    environment = Environment(f"dltrain-{config.team}", EnvironmentArgs(config, now))
    for key, value in environment.outputs.items():
        pulumi.export(key, value)
    return environment
