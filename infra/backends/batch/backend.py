"""The Batch backend (the reference architecture): what the program, plan, the cost estimate and the job verbs ask
of it (infra/backends/__init__.py: Backend). Pulumi and the Azure clients are imported inside the methods."""
from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING

from infra.backends.batch import spec as batch_spec
from infra.backends.batch.nfs_user_data import STAGE_RECHECK_MINUTES
from infra.backends.declared import Declared, Foundation
from infra.backends.shared import (StackOutputs, job_prefix, now_utc, quota_vcpus, require_staged, resolve_job,
                                   verb_roles_line)
from infra.backends.verbs import Cancel, Download, JobContext, Logs, Status, Submit
from infra.core import cost, naming, node_health
from infra.core.containers import DATASET
from infra.core.skus import BATCH_SIZES_DOC
from training.data.staged import request_name

if TYPE_CHECKING:
    from infra.backends.batch.cluster import Cluster
    from infra.components.budget import StopAction


def nfs_report(cfg) -> bool:
    """Whether the NFS server stages `data` and reports it in `status`: nfsKind vm with dataTier nfs. With dataTier
    node-local every node stages the job's dataset from `data` itself (spec.node_stage), and the server stages
    nothing."""
    return cfg.nfs.kind == "vm" and cfg.nfs.data_tier == "nfs"


def data_tier_line(cfg) -> str:
    """Plan's line on where the job's ranks read the data (dataTier), and which of the pool's and job's commands put
    it there (spec.start_task_command, spec.node_stage)."""
    if cfg.nfs.data_tier == "node-local":
        return ("  data (dataTier node-local): the pool's start task makes each node's local volume after the health "
                f"checks ({batch_spec.LOCAL_VOLUME_SCRIPT.name}: the size's NVMe drives striped, or its temporary "
                f"disk, at $AZ_BATCH_NODE_SHARED_DIR/{batch_spec.LOCAL_DATA}); the job's coordination command stages "
                "its dataset onto it on every node before the job's sshd (`python -m training node-stage <data URL> "
                "--dataset NAME`, the pool's identity, no SAS; a node holding the dataset's marker copies nothing); "
                f"the ranks read {batch_spec.LOCAL_DATA}/datasets/NAME; the NFS share keeps checkpoints and outputs")
    cache = (", copied to each node's disk by the start task (dataLocalCache)" if cfg.nfs.data_local_cache else "")
    return (f"  data (dataTier nfs): the ranks read the NFS share's copy of `data`{cache}; "
            + ("the NFS server stages it" if cfg.nfs.kind == "vm" else "each job stages it onto the share"))


def allocation_mode_line(cfg, vcpus: str) -> str:
    """Plan's line on the Batch account's pool allocation mode (batchPoolAllocation): which quota the nodes draw on,
    and why the default is batch-service. "Batch service quotas and limits"
    (https://learn.microsoft.com/azure/batch/batch-quota-limit): in Batch-service mode each account has its own core
    quotas, which "for some types of subscription have been reduced ... in some cases to zero", and a subscription
    gets 1-3 Batch accounts per region by default; user-subscription mode uses the subscription's per-family quota
    across all accounts ("The quotas in your subscription for regional compute cores, per-series compute cores, and
    other resources are used and enforced": batch-account-create-portal), but needs a Key Vault reference and the
    Batch service's role on the subscription, a subscription owner's grant no stack makes (cluster.py says what
    each needs). batch-service stays the default: it needs nothing outside the stack's resource group, and Batch's
    docs advise it ("For most cases, you should use the default Batch service pool allocation mode")."""
    from infra.backends.batch.cluster import BATCH_ORCHESTRATION_ROLE, BATCH_SERVICE_APP_ID, USER_SUBSCRIPTION_DOC

    family = cfg.nodes.sku.quota_family
    if cfg.nodes.pool_allocation == "user-subscription":
        kind = ("Spot (low-priority) vCPU quota of the region" if cfg.nodes.spot else
                f"per-family vCPU quota for {family}")
        return (f"Pool allocation: user-subscription (batchPoolAllocation). The nodes are VMs in this subscription "
                f"and draw on its {kind} in {cfg.location}, {vcpus} at maxNodes, shared with every other "
                "user-subscription Batch account and Azure ML workspace there (`python -m infra preflight` reads its "
                "usage). The stack declares the account's Key Vault and grants the Batch service (object "
                f"{cfg.nodes.batch_service_object_id}, batchServiceObjectId) Key Vault Secrets Officer on it; a "
                "subscription owner grants that service principal, once per subscription, its role on the "
                "subscription: `az role assignment create --assignee-object-id "
                f"{cfg.nodes.batch_service_object_id} --assignee-principal-type ServicePrincipal --role "
                f"{BATCH_ORCHESTRATION_ROLE} --scope /subscriptions/{cfg.subscription_id or '<subscription>'}` (Azure Batch Service "
                f"Orchestration Role; the docs also name Contributor; app {BATCH_SERVICE_APP_ID}; "
                f"{USER_SUBSCRIPTION_DOC}). The default, batch-service, needs none of this. Changing the mode on a "
                "deployed stack replaces its Batch account and pool (only Batch Account - Create sets the mode).")
    kind = "Spot" if cfg.nodes.spot else f"dedicated {family}"
    return (f"Pool allocation: batch-service (batchPoolAllocation, the default: Batch's docs advise it for most "
            f"cases and it needs nothing outside the resource group). The nodes draw on the Batch account's own "
            f"{kind} core quota, {vcpus} at maxNodes, requested for this account alone, and this subscription may "
            f"hold only 1-3 Batch accounts per region ({cfg.location}; `python -m infra preflight` counts them). "
            "user-subscription draws on the subscription's shared per-family quota instead (as Azure ML does); it "
            "needs a Key Vault the stack declares and a subscription owner's one-time grant to the Batch service. "
            "Changing the mode on a deployed stack replaces its Batch account and pool (only Batch Account - Create "
            "sets the mode).")


class BatchBackend:
    name = "batch"
    required_outputs = ("batch_account_endpoint", "pool_id", "image_refs", "registry_login_server",
                        "pull_identity_id", "pull_identity_client_id", "container_urls")
    live_outputs = ("batch_account_endpoint", "pool_id")
    refused_verbs = {"register-model": "register-model needs backend azureml (its model registry); a Batch job's "
                                       "model is run/model.onnx in what `python -m infra download` fetches"}

    def declare(self, foundation: Foundation, name: str, cfg, rg) -> Declared:
        """The NFS server, the Batch account and pool, and the training job (unless trainingLaunchOnUp is false)."""
        import pulumi

        from infra.backends.batch.cluster import Cluster, ClusterArgs
        from infra.backends.batch.nfs import NfsArgs, NfsNames, NfsServer
        from infra.backends.batch.training_job import TrainingJob, TrainingJobArgs
        from infra.components import roles
        from infra.components.access import grants_deployer

        child = pulumi.ResourceOptions(parent=foundation.parent)
        storage, registry = foundation.storage, foundation.registry
        urls = storage.container_urls
        nodes = foundation.node_identity.identity
        nfs = NfsServer(f"{name}-nfs", NfsArgs(
            cfg.nfs, rg, cfg.location, cfg.tags, export_to=str(cfg.network.compute_subnet),
            names=NfsNames(vm=f"nfs-{cfg.team}-{cfg.stack}", host=f"nfs-{cfg.team}",
                           account=naming.nfs_storage_account(cfg.team, cfg.stack, cfg.location,
                                                              cfg.naming_subscription)),
            storage_subnet_id=foundation.network.storage_subnet.id,
            compute_subnet_id=foundation.network.compute_subnet.id,
            container_urls={c: urls[c] for c in ("data", "scripts", "status")},
            container_ids={c: storage.containers[c].id for c in ("data", "scripts", "status")},
            writer_role_id=storage.writer_role_id),
            pulumi.ResourceOptions(parent=foundation.parent, depends_on=storage.scripts))
        cluster = Cluster(f"{name}-cluster", ClusterArgs(
            cfg.nodes, cfg.training, cfg.nfs, rg, cfg.location, cfg.tags,
            account_name=naming.batch_account(cfg.team, cfg.stack, cfg.location, cfg.naming_subscription),
            allowed_ip_ranges=cfg.network.allowed_ip_ranges, compute_subnet_id=foundation.network.compute_subnet.id,
            registry_server=registry.registry.login_server, image_names=registry.image_names,
            pull_identity_id=nodes.id, nfs_source=nfs.mount_source,
            nfs_options=nfs.mount_options,
            # The nodes prefetch the launched job's image when they start: it must be pushed by then.
            depends_on=[registry.acr_pull, nfs, *registry.images.values()],
            key_vault_name=lambda generation: naming.key_vault(cfg.team, cfg.stack, cfg.location, generation,
                                                              cfg.naming_subscription),
            now=foundation.now, node_egress_ip=foundation.network.egress_ip.ip_address),
            child)
        foundation.monitoring.watch_batch("batch", cluster.account.id)
        if cluster.key_vault:  # user-subscription: the account's vault, whose audit events say what Batch keeps there
            foundation.monitoring.watch_key_vault("batch-key-vault", cluster.key_vault.id)
        job, deployer_grants = None, []
        if self.launches_on_up(cfg):
            # With the vm kind the job is submitted once the NFS server reports the data staged (see TrainingJob);
            # with dataTier node-local the server stages nothing, and the gate checks `data` alone.
            status = urls["status"] if nfs_report(cfg) else ""
            # The deployer's grants for that: list `data` and read the staging report (the data check before the
            # job is submitted), submit (and on destroy delete) the job. None with teamAdmins: the admins' group
            # grants hold them (access.grants_deployer).
            if grants_deployer(cfg.access):
                deployer_grants.append(storage.grant(
                    "deployer-data", foundation.deployer, "data", roles.BLOB_DATA_READER,
                    principal_type=cfg.deployer_principal_type,
                    description=f"{roles.DEPLOYER}`pulumi up` checks that `data` holds the dataset before it "
                                "submits the training job"))
                if status:
                    deployer_grants.append(storage.grant(
                        "deployer-status", foundation.deployer, "status", roles.BLOB_DATA_READER,
                        principal_type=cfg.deployer_principal_type,
                        description=f"{roles.DEPLOYER}`pulumi up` reads the NFS server's staging report before it "
                                    "submits the training job"))
                deployer_grants.append(cluster.grant(
                    "deployer-jobs", foundation.deployer, roles.BATCH_JOB_SUBMITTER,
                    principal_type=cfg.deployer_principal_type,
                    description=f"{roles.DEPLOYER}`pulumi up` submits the training job (and `destroy` deletes it)"))
            # The job's inputs from the same stack outputs `python -m infra submit` reads: one mapping.
            stack_outputs = pulumi.Output.all(
                pool_id=cluster.pool.name, image_refs=registry.image_refs,
                registry_login_server=registry.registry.login_server, pull_identity_id=nodes.id,
                pull_identity_client_id=nodes.client_id, container_urls=urls)
            job = TrainingJob(f"{name}-job", TrainingJobArgs(
                batch_endpoint=cluster.endpoint, data_status_url=status, data_container_url=urls["data"],
                inputs=stack_outputs.apply(lambda outputs: self.job_inputs(cfg, StackOutputs(**outputs)))),
                pulumi.ResourceOptions(parent=foundation.parent, depends_on=[
                    cluster.pool, *storage.scripts, *foundation.node_grants, *deployer_grants]))
        return Declared(
            outputs={
                "nfs_kind": cfg.nfs.kind,
                "nfs_mount_source": nfs.mount_source,
                "batch_account_name": cluster.account.name,
                "batch_account_endpoint": cluster.endpoint,
                "pool_id": cluster.pool.name,
                "training_job_id": job.job_id if job else "",
            },
            service_id=cluster.account.id, budget_stop=_budget_stop(cluster),
            components={"nfs": nfs, "cluster": cluster}, job=job, deployer_grants=tuple(deployer_grants))

    def launches_on_up(self, cfg) -> bool:
        return cfg.training.launch_on_up  # the account admits allowedIpRanges, where `up` runs

    def job_inputs(self, cfg, outputs: StackOutputs, framework: str | None = None, nodes: int | None = None,
                   train_args: tuple[str, ...] | None = None) -> batch_spec.JobInputs:

        return batch_spec.job_inputs(cfg, outputs, framework, nodes, train_args)

    def submit(self, ctx: JobContext, inputs: Submit) -> None:
        from infra.backends.batch import operate

        cfg, outputs = ctx.cfg, ctx.outputs
        service = ctx.connect(outputs)
        job_inputs = self.job_inputs(cfg, outputs, inputs.framework, inputs.nodes, inputs.train_args(cfg))
        if inputs.dataset and inputs.dataset != "default":  # its folder in the staged container (datasets.py)
            job_inputs = dataclasses.replace(job_inputs, dataset=inputs.dataset)
        if not inputs.skip_data_check:
            require_staged(outputs, ctx.staged, nfs_report(cfg), cfg.stack, inputs.dataset)
        operate.submit(service, job_inputs, now_utc(), sys.stdout, stack_flags=ctx.stack_flags)

    def status(self, ctx: JobContext, inputs: Status) -> None:
        from infra.backends.batch import operate

        service = ctx.connect(ctx.outputs)
        job = resolve_job(service, ctx.cfg.stack, inputs.job)
        print("\n".join(operate.status(service, job, cost.estimate(ctx.cfg).node_price).lines()))

    def logs(self, ctx: JobContext, inputs: Logs) -> None:
        from infra.backends.batch import operate

        service = ctx.connect(ctx.outputs)
        job = resolve_job(service, ctx.cfg.stack, inputs.job)
        operate.logs(service, job, "stderr" if inputs.stderr else "stdout", inputs.follow, sys.stdout)

    def download(self, ctx: JobContext, inputs: Download) -> None:
        """From the `outputs` container: the job service is asked only for the newest job's name."""
        from infra.backends.batch import operate

        job = inputs.job or resolve_job(ctx.connect(ctx.outputs), ctx.cfg.stack, None)
        print(operate.download(ctx.outputs.container_urls["outputs"], job, inputs.dest))
        print(f"outputs of {job} in {inputs.dest / job}")

    def cancel(self, ctx: JobContext, inputs: Cancel) -> None:
        from infra.backends.batch import operate

        service = ctx.connect(ctx.outputs)
        job = resolve_job(service, ctx.cfg.stack, inputs.job)
        operate.cancel(service, job)
        print(f"cancelled {job}: its task is stopped; outputs written so far stay on NFS and in `outputs`")

    def usage_now(self, service, outputs: StackOutputs, stack: str) -> tuple[int, int]:
        """The pool's nodes (BatchService.pool_nodes: dedicated + low-priority/Spot), and the stack's jobs in state
        active ("The Job is available to have Tasks scheduled"; the others are disabling, disabled, enabling,
        terminating, completed, deleting: BatchJobState, https://learn.microsoft.com/dotnet/api/
        azure.compute.batch.batchjobstate, the REST spec's enum)."""

        dedicated, spot = service.pool_nodes(outputs.pool_id)
        jobs = service.list_jobs(job_prefix(stack))
        return dedicated + spot, sum(job.get("state") == "active" for job in jobs)

    def restage_refusal(self, cfg) -> str | None:
        """Its ability to restage (infra/backends/__init__.py: Restages): the NFS server's, with nfsKind vm."""
        if nfs_report(cfg):
            return None
        if cfg.nfs.data_tier == "node-local":
            return ("with dataTier node-local each job stages its dataset from `data` onto every node's local volume "
                    "at its start (a node holding the dataset as it is now skips the copy)")
        return "with nfsKind azure-files each job stages `data` at its start, only what changed"

    def launch_lines(self, cfg) -> list[str]:
        data = [data_tier_line(cfg)]
        if self.launches_on_up(cfg):
            return [f"  launched on `pulumi up`: {cfg.training.framework} on {cfg.nodes.max_nodes} node(s) x "
                    f"{cfg.nodes.sku.gpus} GPUs, retried up to {cfg.training.retries} times with --resume auto", *data]
        return [f"  not launched on `pulumi up` (trainingLaunchOnUp: false): `python -m infra submit --stack "
                f"{cfg.stack}`", *data]

    def ready_when(self, cfg) -> str:
        if nfs_report(cfg):
            return ("once the NFS server reports `data` staged as it is now (it checks every minute while waiting, "
                    f"lists `data` every {STAGE_RECHECK_MINUTES} minutes once staged; `python -m infra restage` asks "
                    "at once)")
        if cfg.nfs.data_tier == "node-local":
            return "once `data` holds the dataset (every node stages it onto its local volume at the job's start)"
        return "once `data` holds the dataset (the job stages what changed at its start)"

    def node_health_line(self, cfg) -> str | None:
        return node_health.plan_line(cfg.nodes.sku)  # the pool's start task runs the checks

    def before_up(self, cfg) -> list[str]:
        sku, vcpus = cfg.nodes.sku, quota_vcpus(cfg)
        # https://learn.microsoft.com/azure/batch/batch-quota-limit#resource-quotas: a Batch-service account has a
        # dedicated core quota per VM family and one low-priority core quota for all families (the account's
        # lowPriorityCoreQuota), both often 0 on a new account; since March 2026 the low-priority quota is what
        # Spot nodes count against (https://github.com/Azure/Batch/issues/196: the low-priority properties now
        # mean Spot in Batch-managed accounts).
        quota = (f"Batch Spot core quota (the account's lowPriorityCoreQuota, one for all VM families, spot: true) "
                 f"in {cfg.location}: {vcpus} for {sku.quota_family}" if cfg.nodes.spot else
                 f"Batch dedicated core quota for the {sku.name} family ({sku.quota_family}) in {cfg.location}: "
                 f"{vcpus}")
        from infra.backends.batch.cluster import api_version_warning

        listed = ("Batch's supported-size table lists its series" if sku.batch_listed
                  else "Batch's size docs are silent on it")
        return [
            f"Is {sku.name} offered to Batch pools in {cfg.location}? {listed} ({BATCH_SIZES_DOC}); the region's "
            f"answer: `az batch location list-skus --location {cfg.location} --query \"[?name=='{sku.name}']\"` "
            "(an empty list: pick another size or region).",
            f"{quota}. A new Batch account often has 0 for GPU families: after the account exists, request it "
            "(portal: Batch account > Quotas > Request quota increase), or the pool stays at 0 nodes with a quota "
            "error in its resize errors.",
            allocation_mode_line(cfg, vcpus),
            verb_roles_line("the Batch account", self.team_grants(cfg, "members")),
            *filter(None, [api_version_warning()])]

    def team_grants(self, cfg, level: str) -> list:
        """Both levels: the job verbs on the account; with nfsKind vm, `infra submit` reads the staging report
        and `infra restage` writes its request, no other blob of `status` (the deployer's grants are within these:
        Job Submitter, and Blob Data Reader on `data` and `status`)."""
        from infra.components import roles
        from infra.components.access import TeamGrant

        grants = [TeamGrant("service", roles.BATCH_JOB_SUBMITTER, "`python -m infra submit|status|logs|cancel` "
                                                                  "(jobs, tasks and their files)")]
        if nfs_report(cfg):
            grants.append(TeamGrant("status", roles.BLOB_DATA_WRITER, "`python -m infra submit` reads the NFS "
                                    "server's staging report, `python -m infra restage` writes its request",
                                    roles.blob_writes_only(request_name(DATASET))))
        return grants


def _budget_stop(cluster: Cluster) -> StopAction:
    """What the budget guard does to stop the pool's spend: Pool - Update (ARM PATCH,
    https://learn.microsoft.com/rest/api/batchmanagement/pool/update) with fixed scale settings of zero nodes: the
    pool leaves its autoscale formula (ScaleSettings holds either fixedScale or autoScale:
    https://learn.microsoft.com/azure/templates/microsoft.batch/batchaccounts/pools) and removes its nodes; Requeue
    stops running tasks now and puts them back in the queue (nodeDeallocationOption), so a job resumes from its
    checkpoint once `pulumi up` restores the formula. API version: 2025-06-01, which Batch keeps
    (budget.BATCH_POOL_UPDATE_API_VERSION says why). Pulumi and the components are imported here, as in the backend's
    methods, for their weight."""
    import pulumi

    from infra.components import roles
    from infra.components.budget import BATCH_POOL_UPDATE_API_VERSION, StopAction

    return StopAction(
        target_id=pulumi.Output.concat(cluster.account.id, "/pools/", cluster.pool.name),
        api_version=BATCH_POOL_UPDATE_API_VERSION,
        body={"properties": {"scaleSettings": {"fixedScale": {
            "targetDedicatedNodes": 0, "targetLowPriorityNodes": 0, "nodeDeallocationOption": "Requeue"}}}},
        role=roles.BATCH_ACCOUNT_CONTRIBUTOR, why="scale the GPU pool to zero nodes when the budget runs out "
                                                 "(Pool - Update on this pool only)")

