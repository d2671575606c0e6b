"""The Azure ML backend: what the program, plan, the cost estimate and the job verbs ask of it
(infra/backends/__init__.py: Backend). Pulumi, azure-ai-ml and the Azure clients are imported inside the methods."""
from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from infra.backends.azureml import job as aml_job
from infra.backends.declared import Declared, Foundation
from infra.backends.shared import (StackOutputs, job_prefix, now_utc, quota_vcpus, require_staged, resolve_job,
                                   verb_roles_line)
from infra.backends.verbs import Cancel, Download, JobContext, Logs, RegisterModel, Status, Submit
from infra.core import naming
from infra.core.skus import AML_SIZES_DOC

if TYPE_CHECKING:
    from infra.backends.azureml.workspace import AzureMl
    from infra.components.budget import StopAction


class AzureMlBackend:
    name = "azureml"
    required_outputs = ("subscription_id", "resource_group_name", "aml_workspace_name", "aml_compute_name",
                        "aml_environments", "pull_identity_client_id")
    live_outputs = ("subscription_id", "resource_group_name", "aml_workspace_name", "aml_compute_name")
    # No restage (infra/backends/__init__.py: Restages): no server stages the data ahead of the jobs.
    refused_verbs = {"restage": "a job reads `data` itself with backend azureml"}

    def declare(self, foundation: Foundation, name: str, cfg, rg) -> Declared:
        """The workspace, compute cluster, datastores and environments, and the job when `up` can launch it."""
        import pulumi
        from pulumi_azure_native import authorization

        from infra.backends.azureml.training_job import AmlTrainingJob, AmlTrainingJobArgs
        from infra.backends.azureml.workspace import AzureMl, AzureMlArgs
        from infra.components import roles
        from infra.components.access import grants_deployer

        storage, registry, network = foundation.storage, foundation.registry, foundation.network
        nodes = foundation.node_identity.identity
        # Identity-based system datastores: Azure ML reads a job's code snapshot and writes its logs and MLflow
        # artifacts in the workspace's own containers (which the workspace names) with the compute's
        # identity, and azure-ai-ml uploads the snapshot with the caller's: both need Storage Blob Data
        # Contributor on the account ("Scenarios for role assignments" in
        # https://learn.microsoft.com/azure/machine-learning/how-to-disable-local-auth-storage).
        # On the account, but never writing the stack's own containers: the training code that runs as this
        # identity may not rewrite the dataset, the scripts or the staging reports (outputs it writes by
        # its own grant). Which containers Azure ML itself uses is not listed in its docs, so the condition
        # names ours rather than theirs.
        node_grants = (*foundation.node_grants, storage.grant(
            "nodes-workspace", nodes.principal_id, None, roles.BLOB_DATA_WRITER,
            condition=roles.blob_writes_except(("data", "scripts", "status"))))
        deployer_grants = []
        if self.launches_on_up(cfg) and grants_deployer(cfg.access):  # with teamAdmins, their group's grant
            deployer_grants.append(storage.grant(
                "deployer-workspace", foundation.deployer, None, roles.BLOB_DATA_WRITER,
                principal_type=cfg.deployer_principal_type,
                description=f"{roles.DEPLOYER}`pulumi up` uploads the launched Azure ML job's code snapshot to the "
                            "workspace's storage (identity-based datastores)"))
        azureml = AzureMl(f"{name}-ml", AzureMlArgs(
            cfg.aml, cfg.nodes, rg, cfg.location, cfg.tags,
            key_vault_name=lambda generation: naming.key_vault(cfg.team, cfg.stack, cfg.location, generation,
                                                              cfg.naming_subscription),
            workspace_name=lambda generation: naming.aml_workspace(cfg.team, cfg.stack, generation),
            allowed_ip_ranges=cfg.network.allowed_ip_ranges, frameworks=cfg.registry.frameworks,
            vnet_id=network.vnet.id, compute_subnet_id=network.compute_subnet.id,
            storage_subnet_id=network.storage_subnet.id, storage_account_id=storage.account.id,
            storage_account_name=storage.account.name, registry_id=registry.registry.id,
            app_insights_id=foundation.monitoring.app_insights.id, nodes_identity_id=nodes.id,
            image_refs=registry.image_refs, depends_on=[registry.acr_pull, *node_grants], now=foundation.now),
            pulumi.ResourceOptions(parent=foundation.parent))
        foundation.monitoring.watch_azureml("azureml", azureml.workspace.id)
        foundation.monitoring.watch_key_vault("key-vault", azureml.key_vault.id)
        subscription = authorization.get_client_config_output(
            opts=pulumi.InvokeOutputOptions(parent=foundation.parent)).subscription_id
        job = None
        if self.launches_on_up(cfg):  # not with a private workspace: `up` cannot reach it (plan says so)
            # The job's inputs from the same stack outputs `python -m infra submit` reads: one mapping.
            stack_outputs = pulumi.Output.all(
                aml_environments=azureml.environments, aml_compute_name=azureml.compute.name,
                pull_identity_client_id=nodes.client_id,
                container_urls={"data": storage.container_urls["data"]})  # amlDataMode download: node-stage reads it
            job = AmlTrainingJob(f"{name}-job", AmlTrainingJobArgs(
                subscription_id=subscription, resource_group=rg, workspace=azureml.workspace.name,
                inputs=stack_outputs.apply(lambda outputs: self.job_inputs(cfg, StackOutputs(**outputs))),
                data_container_url=storage.container_urls["data"]),
                pulumi.ResourceOptions(parent=foundation.parent, depends_on=[azureml, *deployer_grants]))
        return Declared(
            outputs={
                "training_job_id": job.job_name if job else "",
                "aml_workspace_name": azureml.workspace.name,
                "aml_compute_name": azureml.compute.name,
                "aml_datastores": {c: store.name for c, store in azureml.datastores.items()},
                "aml_environments": azureml.environments,
            },
            service_id=azureml.workspace.id, budget_stop=_budget_stop(azureml),
            components={"azureml": azureml}, job=job, deployer_grants=tuple(deployer_grants))

    def launches_on_up(self, cfg) -> bool:
        """Not with a private workspace: it answers only inside the VNet, and `pulumi up` runs outside it (plan
        says so)."""
        return cfg.training.launch_on_up and cfg.aml.workspace_access != "private"

    def job_inputs(self, cfg, outputs: StackOutputs, framework: str | None = None, nodes: int | None = None,
                   train_args: tuple[str, ...] | None = None) -> aml_job.AmlJobInputs:

        return aml_job.aml_job_inputs(cfg, outputs, framework, nodes, train_args)

    def submit(self, ctx: JobContext, inputs: Submit) -> None:
        from infra.backends.azureml import operate as operate_aml

        cfg, outputs = ctx.cfg, ctx.outputs
        service = ctx.connect(outputs)
        job_inputs = self.job_inputs(cfg, outputs, inputs.framework, inputs.nodes, inputs.train_args(cfg))
        if inputs.dataset and inputs.dataset != "default":  # the job's `data` input: that dataset's folder
            job_inputs = dataclasses.replace(job_inputs, dataset=inputs.dataset)
        if not inputs.skip_data_check:  # the job's `data` input is the whole `data` container
            require_staged(outputs, ctx.staged, False, cfg.stack, inputs.dataset)
        operate_aml.submit(service, job_inputs, now_utc(), sys.stdout, stack_flags=ctx.stack_flags)

    def _job(self, ctx: JobContext, job: str | None) -> tuple[Any, str]:
        """The workspace's jobs and the job named, or the stack's newest."""
        service = ctx.connect(ctx.outputs)
        return service, resolve_job(service, ctx.cfg.stack, job, key="name")

    def status(self, ctx: JobContext, inputs: Status) -> None:
        from infra.backends.azureml import operate as operate_aml

        service, job = self._job(ctx, inputs.job)
        print("\n".join(operate_aml.status(service, job, ctx.outputs.aml_compute_name)))

    def logs(self, ctx: JobContext, inputs: Logs) -> None:
        from infra.backends.azureml import operate as operate_aml

        service, job = self._job(ctx, inputs.job)
        operate_aml.logs(service, job, inputs.follow, sys.stdout)

    def download(self, ctx: JobContext, inputs: Download) -> None:
        from infra.backends.azureml import operate as operate_aml

        service, job = self._job(ctx, inputs.job)
        print(f"outputs of {job} in {operate_aml.download(service, job, inputs.dest)}")

    def cancel(self, ctx: JobContext, inputs: Cancel) -> None:
        from infra.backends.azureml import operate as operate_aml

        service, job = self._job(ctx, inputs.job)
        operate_aml.cancel(service, job)
        print(f"cancelled {job}")

    def register_model(self, ctx: JobContext, inputs: RegisterModel) -> None:
        """Its optional ability (infra/backends/__init__.py: RegistersModels): the workspace's model registry."""
        from infra.backends.azureml import operate as operate_aml

        service, job = self._job(ctx, inputs.job)
        operate_aml.register_model(service, job, inputs.dest, inputs.name or f"resnet50-{ctx.cfg.stack}", sys.stdout)

    def usage_now(self, service, outputs: StackOutputs, stack: str) -> tuple[int, int]:
        """The compute cluster's nodes (AmlJobs.count_nodes), and the stack's jobs in no terminal state (Queued,
        Preparing, Running, Finalizing...: service.TERMINAL lists the ended ones)."""
        from infra.backends.azureml.service import TERMINAL

        jobs = service.list_jobs(job_prefix(stack))
        return service.count_nodes(outputs.aml_compute_name), sum(job["status"] not in TERMINAL for job in jobs)

    def launch_lines(self, cfg) -> list[str]:
        if self.launches_on_up(cfg):
            inputs = self.job_inputs(cfg, StackOutputs(  # what plan shows needs no deployed stack's outputs
                aml_environments={f: "" for f in cfg.registry.frameworks}, aml_compute_name="gpu"))
            return [f"  launched on `pulumi up` as an Azure ML command job: {cfg.training.framework} "
                    f"({inputs.distribution}) on {cfg.nodes.max_nodes} node(s) x {cfg.nodes.sku.gpus} GPUs, data by "
                    f"{cfg.aml.data_mode}"]
        if cfg.training.launch_on_up:  # a private workspace: `up` runs outside the VNet and cannot reach it
            return ["  not launched on `pulumi up`: the workspace is reached from the VNet only (amlWorkspaceAccess: "
                    f"private); from a machine in the VNet (VPN gateway, Bastion, peered network): `python -m infra "
                    f"submit --stack {cfg.stack}`; or set amlWorkspaceAccess: public (Azure AD only) to launch on up"]
        return [f"  not launched on `pulumi up` (trainingLaunchOnUp: false): `python -m infra submit --stack "
                f"{cfg.stack}`"]

    def ready_when(self, cfg) -> str:
        return "once `data` holds the dataset (the job's `data` input)"

    def node_health_line(self, cfg) -> str | None:
        if not cfg.nodes.sku.infiniband:
            return None
        return (f"  node health: not checked before `train` on {self.name} (azurehpc-health-checks needs the host's "
                "Docker and its own mpirun, which the job's one MPI program per rank cannot give: "
                "infra/backends/azureml/job.py)")

    def before_up(self, cfg) -> list[str]:
        sku, vcpus = cfg.nodes.sku, quota_vcpus(cfg)

        listed = ("Azure ML's supported-series table lists it" if sku.aml_listed
                  else "Azure ML's supported-series table is silent on it")
        return [
            f"Is {sku.name} offered to Azure ML compute clusters in {cfg.location}? {listed} ({AML_SIZES_DOC}); the "
            f"region's answer, once the workspace exists: `az ml compute list-sizes --location {cfg.location} "
            "--resource-group RG --workspace-name WS` (absent: pick another size or region).",
            # https://learn.microsoft.com/azure/machine-learning/how-to-manage-quotas: Azure ML compute quota
            # is per VM family and region for dedicated cores, one low-priority quota per region for all families;
            # a LowPriority cluster's nodes are Spot VMs since 2026-03-31 (MicrosoftDocs/azure-ai-docs pull 806).
            (f"Azure ML low-priority core quota (Spot nodes, spot: true; one for all VM families) in "
             f"{cfg.location}: {vcpus} for {sku.quota_family}" if cfg.nodes.spot else
             f"Azure ML dedicated core quota for the {sku.name} family ({sku.quota_family}) in {cfg.location}: "
             f"{vcpus}") + "; request it in the portal (Azure Machine Learning > Quotas) or the cluster stays at 0 "
            "nodes.",
            ("The workspace accepts the VNet only (amlWorkspaceAccess: private; an IP allow list needs a "
             "preview API): submit jobs and use the studio from inside the VNet (VPN gateway, Bastion, a peered "
             "network)." if cfg.aml.workspace_access == "private" else
             "The workspace is open to the Internet by this stack's choice (amlWorkspaceAccess: public): every "
             "call needs an Azure AD identity with a role on it; storage and Key Vault still admit only the "
             "VNet and allowedIpRanges."),
            verb_roles_line("the workspace", self.team_grants(cfg, "members"))]

    def team_grants(self, cfg, level: str) -> list:
        """The workspace, and its storage: azure-ai-ml uploads a job's code snapshot to the workspace's
        containers and reads its outputs there with the caller's identity (identity-based datastores,
        https://learn.microsoft.com/azure/machine-learning/how-to-disable-local-auth-storage). Members write
        anywhere but `scripts`, `status` and `outputs`; admins get the deployer's grant as it is."""
        from infra.components import roles
        from infra.components.access import TeamGrant

        workspace = TeamGrant("service", roles.AZUREML_DATA_SCIENTIST, "`python -m infra submit|status|logs|"
                                                                      "download|cancel|register-model`")
        if level == "admins":
            return [workspace, TeamGrant("storageAccount", roles.BLOB_DATA_WRITER, "`pulumi up` uploads the "
                                         "launched job's code snapshot (the deployer's grant)")]
        return [workspace, TeamGrant("storageAccount", roles.BLOB_DATA_WRITER, "azure-ai-ml uploads a job's "
                                     "code snapshot and reads its outputs in the workspace's containers",
                                     roles.blob_writes_except(("scripts", "status", "outputs")))]


def _budget_stop(azureml: AzureMl) -> StopAction:
    """What the budget guard does to stop the cluster's spend: Compute - Update (ARM PATCH of ClusterUpdateParameters,
    https://learn.microsoft.com/rest/api/azureml/compute/update: "Updates properties of a compute. This call
    will overwrite a compute if it exists"; only the scale settings of an AmlCompute may change) with
    maxNodeCount 0, so the cluster releases its nodes and starts none. NOT VERIFIED: the reference gives
    ScaleSettings.maxNodeCount no minimum and no doc says whether 0 is accepted; if Azure ML refuses it, the
    guard's Logic App run fails (its run history shows the refusal) and only the mails and `infra submit`'s
    refusal remain. API version: the one pulumi-azure-native 3.29 declares the cluster with. Pulumi and the
    components are imported here, as in the backend's methods, for their weight."""
    import pulumi

    from infra.components import roles
    from infra.components.budget import StopAction

    compute = azureml.compute
    return StopAction(
        target_id=pulumi.Output.concat(azureml.workspace.id, "/computes/", compute.name),
        api_version="2025-12-01",
        body={"properties": {"properties": {"scaleSettings": {"maxNodeCount": 0, "minNodeCount": 0}}}},
        role=roles.AZUREML_COMPUTE_OPERATOR, why="scale the GPU cluster to zero nodes when the budget runs "
                                                "out (Compute - Update on this cluster only)")

