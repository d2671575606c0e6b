"""The training job as Azure Batch sees it, built by pure functions (no SDK, no network).

One Batch job per training run, holding one multi-instance task: Batch allocates `nodes` nodes of the pool
to it, runs the coordination command on every node (the job's own sshd inside the container, so mpirun can
reach the other nodes), then the application command on the primary: `python -m training launch`, which
starts Horovod over MPI with one process per GPU on every node. The dicts here have the Batch REST API's shape
(camelCase); `infra/backends/batch/service.py` hands them to the SDK unchanged. Both the TrainingJob dynamic resource
(`pulumi up`) and `python -m infra submit` build their jobs here, so both launch the same thing.

Batch's rules this relies on:
- Common resource files are downloaded on every node into the task-shared folder, AZ_BATCH_TASK_SHARED_DIR, the
  same path on every node; the coordination command runs on every node, the application command on the
  primary only after all coordination commands finished (https://learn.microsoft.com/azure/batch/batch-mpi,
  "Resource files" and "Coordination command"). The SDK reference says the same in other words: into the task
  root directory, one above the working directory (MultiInstanceSettings.commonResourceFiles).
- AZ_BATCH_TASK_SHARED_DIR and AZ_BATCH_TASK_DIR are one folder, {job folder}/{task}, with the working folder
  AZ_BATCH_TASK_WORKING_DIR at {task}/wd; AZ_BATCH_HOST_LIST lists the nodes' IPs ("Task environment variables
  related to directory location" in https://learn.microsoft.com/azure/batch/batch-compute-node-environment-variables,
  and https://learn.microsoft.com/azure/batch/files-and-directories). So the scripts are already where every
  rank imports them from: nothing is copied or removed there (a retry runs the coordination command again, on
  the files Batch downloaded for that try).
- A container task sees the folders under AZ_BATCH_NODE_ROOT_DIR and nothing else of the host unless mounted
  (https://learn.microsoft.com/rest/api/batchservice/task/add, containerSettings: "all directories recursively below
  the AZ_BATCH_NODE_ROOT_DIR ... are mapped into the container"). The node-local volume is a file system the start
  task mounts at $AZ_BATCH_NODE_SHARED_DIR/local-data, below that folder: Docker includes the submounts of a bind
  mount by default ("bind-recursive": enabled, the default, and `-v` binds are always recursive:
  https://docs.docker.com/engine/storage/bind-mounts/, "Recursive mounts"), and with its default propagation,
  rprivate (same page), a container sees the mounts that were there when it started: the start task has ended
  before any task starts (startTask.waitForSuccess), so the volume is there first.
- Resource files and output files reach storage with the pool's user-assigned identity (`identityReference`),
  so no SAS sits in the task definition, which anyone who can read the Batch account can read
  (https://learn.microsoft.com/azure/batch/managed-identity-pools).

Where things live on a node:
  $AZ_BATCH_NODE_MOUNTS_DIR/data           the NFS share (the staged dataset; runs/ for job outputs; .jobs/ keys)
  $AZ_BATCH_NODE_SHARED_DIR/local-data     dataTier node-local: the node's local volume (NVMe striped, or the temp disk),
                                           made by the start task; the coordination command stages the job's dataset
                                           into local-data/datasets/<name> (`python -m training node-stage`)
  $AZ_BATCH_NODE_SHARED_DIR/data-cache     dataTier nfs: the dataset copied to local disk by the start task
                                           (dataLocalCache)
  $AZ_BATCH_TASK_SHARED_DIR/training       the training scripts from the `scripts` container, on PYTHONPATH
Checkpoints go to the NFS share, so a retried task resumes where the last one stopped.
"""
from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from infra.backends.batch import allocation
from infra.backends.shared import StackOutputs, job_prefix, job_shape, training_environment
from infra.core import node_health
from infra.core.config.stack import StackConfig
from infra.core.containers import DATASET, SCRIPTS_PREFIX, STAGED_MARKER
from infra.core.skus import CATALOG, GpuSku
from training.cluster.launch import dist_of
from training.efficiency import expectation_args
from training.interconnect import job_train_args

NFS_MOUNT = "data"  # relative mount path: the share appears at $AZ_BATCH_NODE_MOUNTS_DIR/data
LOCAL_CACHE = "data-cache"  # under AZ_BATCH_NODE_SHARED_DIR: on the node's local disk and seen by containers
LOCAL_DATA = "local-data"  # under AZ_BATCH_NODE_SHARED_DIR: dataTier node-local's volume (the start task makes it)
# The script that makes it (NVMe drives striped, or the temporary disk; idempotent), run by the start task as root.
LOCAL_VOLUME_SCRIPT = Path(__file__).with_name("local_volume.sh")
SSH_PORT = 2222  # the containers' sshd for mpirun; the host's own sshd keeps port 22
TASK_ID = "train"
DATA_WAIT_EXIT_CODE = 3  # the data was not staged within the deadline
POLL_S = 60

# Every container shares the host network (MPI and NCCL address nodes by their IPs) and IPC.
CONTAINER_RUN_OPTIONS = "--network=host --ipc=host --ulimit memlock=-1 --ulimit stack=67108864"
# Only on InfiniBand sizes: the RDMA devices and the HPC image's topology files (docker refuses a missing
# device, so a size without InfiniBand must not ask for it).
INFINIBAND_RUN_OPTIONS = "--device=/dev/infiniband --cap-add=IPC_LOCK -v /opt/microsoft:/opt/microsoft:ro"


@dataclass(frozen=True)
class JobInputs:
    """Everything a training job depends on. No secrets: storage is reached with the nodes' identity."""

    stack: str
    pool_id: str
    nodes: int
    gpu_sku: str  # from infra/core/skus.py: GPUs per node, InfiniBand, NCCL topology
    framework: str  # pytorch | tensorflow | keras
    # The full reference, pinned by digest (Registry.image_refs): <registry>/<framework>:<imageTag>@sha256:... for
    # an image `up` built (docker-build's `ref`: a tag "including the build's digest"), <registry>/<framework>@
    # sha256:... for one imported by sharedImages (image_import.py: untagged). Either way the job runs exactly it.
    image: str
    registry_server: str
    node_identity_id: str  # resource ID of the pool's user-assigned identity (pull, scripts, data, outputs)
    node_identity_client_id: str  # its client ID, so Azure SDKs in the task pick it (AZURE_CLIENT_ID)
    train_args: tuple[str, ...]
    retries: int
    max_hours: int  # the task's maxWallClockTime
    data_wait_minutes: int  # how long the task waits for the NFS server to finish staging
    local_cache: bool
    scripts_url: str  # the scripts container URL (no SAS)
    outputs_url: str  # the outputs container URL (no SAS)
    data_url: str = ""  # the data container URL (no SAS): set when the job stages the data itself
    processes_per_node: int = 0  # training processes per node; 0: one per GPU of the size
    allocation_timeout_minutes: int = 30  # how long the job waits for all its nodes (allocation.py)
    dataset: str = ""  # a named dataset of `data` (`submit --dataset`, training/data/datasets.py); "": its root
    # dataTier: node-local (the coordination command stages the dataset onto each node's local volume; data_url is
    # set) or nfs (the ranks read the NFS share). The default is the one jobs had before the key: nfs.
    data_tier: str = "nfs"

    @property
    def slots(self) -> int:
        return self.processes_per_node or self.sku.gpus

    @property
    def sku(self) -> GpuSku:
        return CATALOG[self.gpu_sku]

    def fingerprint(self) -> str:
        """Same training, same fingerprint (no dataset named, the NFS tier: the ones it had before datasets had names
        and before dataTier)."""
        fields = {key: value for key, value in asdict(self).items()
                  if (key != "dataset" or value) and (key != "data_tier" or value != "nfs")}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]


def job_id(inputs: JobInputs, attempt: str = "") -> str:
    """Batch job IDs are unique per account and never reusable after deletion, hence the fingerprint."""
    return f"{job_prefix(inputs.stack)}{inputs.fingerprint()}{'-' + attempt if attempt else ''}"


def batch_path(variable: str, *parts: str) -> str:
    """A shell word for a path under a Batch folder variable: the variable expands, the rest is quoted."""
    rest = "/".join(parts)
    return f'"${variable}"' + (shlex.quote("/" + rest) if rest else "")


def nfs_path(*parts: str) -> str:
    return batch_path("AZ_BATCH_NODE_MOUNTS_DIR", NFS_MOUNT, *parts)


def local_dataset_dir(dataset: str = "") -> str:
    """dataTier node-local: where `node-stage` puts the dataset on the node's volume, DEST/datasets/NAME, the root
    dataset as `default` (docs/data.md)."""
    return batch_path("AZ_BATCH_NODE_SHARED_DIR", LOCAL_DATA, "datasets", dataset or "default")


def data_dir(local_cache: bool, dataset: str = "", data_tier: str = "nfs") -> str:
    """The job's --data: the dataset on the node's local volume (node-local), else the staged container on the
    share, or its named dataset's folder in it (training/data/datasets.py)."""
    if data_tier == "node-local":
        return local_dataset_dir(dataset)
    named = ("datasets", dataset) if dataset else ()
    return (batch_path("AZ_BATCH_NODE_SHARED_DIR", LOCAL_CACHE, DATASET, *named) if local_cache
            else nfs_path(DATASET, *named))


def run_dir(job: str) -> str:
    return nfs_path("runs", job)


def keys_dir(job: str) -> str:
    """Where the primary publishes the job's public key (root-only folder on the share)."""
    return nfs_path(".jobs", job)


def train_words(inputs: JobInputs, job: str) -> list[str]:
    """The `python -m training train` arguments every rank runs, as shell words: the job's own paths expand
    Batch's variables; every user argument is quoted, so no user text is ever run by the shell."""
    return ["--framework", shlex.quote(inputs.framework),
            "--data", data_dir(inputs.local_cache, inputs.dataset, inputs.data_tier),
            "--output-dir", run_dir(job), "--resume", "auto", *(shlex.quote(a) for a in _train_args(inputs))]


def _train_args(inputs: JobInputs) -> list[str]:
    """The user's training flags, with the interconnect check that `train` runs first on a multi-node job and the
    size's floor and expected img/s per GPU from the catalog (training never imports infra, so they travel as flags)."""
    expected = expectation_args(list(inputs.train_args), framework=inputs.framework,
                                expected=inputs.sku.benchmark_img_per_sec)
    return job_train_args(expected, nodes=inputs.nodes, floor_gbps=inputs.sku.allreduce_floor_gbps)


def wait_for_data(dataset: str, minutes: int) -> str:
    """Shell: wait for the NFS server to finish staging `dataset` (a shell word), at most `minutes`."""
    marker = f"{dataset}/{STAGED_MARKER}"
    return (f"deadline=$((SECONDS + {minutes * 60})); until [ -f {marker} ]; do "
            f"if [ $SECONDS -ge $deadline ]; then echo \"error: the dataset is not staged after {minutes} minutes "
            f"(no {STAGED_MARKER} in it): check the NFS server's staging (journalctl -u dltrain-stage on it) "
            f"and submit again\" >&2; exit {DATA_WAIT_EXIT_CODE}; fi; "
            f"echo \"waiting for the NFS server to finish staging the dataset\"; sleep {POLL_S}; done")


def stage_data(dataset: str, data_url: str) -> str:
    """Shell: stage the data container onto the share with the nodes' identity (Azure AD, no SAS), when it
    changed since the share's copy was marked (one listing otherwise); an empty container fails the job
    (training/data/staged.py: never marked, exit status 4)."""
    return f"python -m training stage {shlex.quote(data_url)} {dataset} --mark || exit $?"


def _script(*lines: str) -> str:
    return f"/bin/bash -c {shlex.quote('; '.join(lines))}"


# Batch downloads the scripts (common resource files, blob names kept) into the task-shared folder, which has
# the same path on every node (see the module docstring): every rank imports them from there, and mpirun starts
# the remote ranks in the launcher's working directory. Only read here, never moved: that folder is also
# AZ_BATCH_TASK_DIR, so moving or removing anything in it removes Batch's download.
_IMPORTABLE = ('[ -f "$AZ_BATCH_TASK_SHARED_DIR/training/__main__.py" ] || { echo "error: the training scripts are '
               'not in $AZ_BATCH_TASK_SHARED_DIR/training, where Batch downloads the common resource files: check '
               'the scripts container (pulumi up uploads it)" >&2; exit 1; }; '
               'cd "$AZ_BATCH_TASK_SHARED_DIR" && export PYTHONPATH="$AZ_BATCH_TASK_SHARED_DIR" || exit 1')


def node_stage(inputs: JobInputs) -> str:
    """Shell: dataTier node-local, on every node: the job's dataset from `data` onto the node's local volume
    (`python -m training node-stage`: shards in parallel, each MD5 checked, a bad one fetched again; a node whose
    copy carries the dataset's marker skips it), with the pool's identity: AZURE_CLIENT_ID picks it for
    DefaultAzureCredential; no SAS. The client ID is set on the command itself: the task's environmentSettings
    reach the application command, and whether Batch gives them to the coordination command too its pages do not
    say (batch-mpi, MultiInstanceSettings)."""
    return (f"AZURE_CLIENT_ID={shlex.quote(inputs.node_identity_client_id)} python -m training node-stage "
            f"{shlex.quote(inputs.data_url)} --dataset {shlex.quote(inputs.dataset or 'default')} "
            f"--dest {batch_path('AZ_BATCH_NODE_SHARED_DIR', LOCAL_DATA)} || exit $?")


def coordination_command(job: str, inputs: JobInputs | None = None) -> str:
    """On every node, before the application command: with dataTier node-local the dataset staged onto the node's
    volume first (a failure ends the command, and so the task, before the job's sshd starts), then the job's sshd,
    with the scripts Batch downloaded."""
    stage = [node_stage(inputs)] if inputs is not None and inputs.data_tier == "node-local" else []
    return _script(_IMPORTABLE, *stage,
                   f"exec python -m training node-ssh --port {SSH_PORT} --keys-dir {keys_dir(job)}")


def application_command(inputs: JobInputs, job: str) -> str:
    """On the primary node: make sure the data is staged, launch Horovod across all nodes, then copy the
    run (without checkpoints) to ./outputs, which Batch uploads to the outputs container, whatever the
    exit status."""
    dataset = nfs_path(DATASET)
    # node-local: every node's coordination command has staged the dataset already (node_stage).
    prelude = ([] if inputs.data_tier == "node-local" else
               [stage_data(dataset, inputs.data_url) if inputs.data_url
                else wait_for_data(dataset, inputs.data_wait_minutes)])
    launcher = ["python", "-m", "training", "launch", "--slots", str(inputs.slots), "--ssh-port", str(SSH_PORT)]
    # One launch: on a multi-node job `train` checks the interconnect itself before training (--interconnect-check)
    launch = [*launcher, "--", *train_words(inputs, job)]
    outputs = batch_path("AZ_BATCH_TASK_WORKING_DIR", "outputs")
    # The ssh client config again, in this command's container: whether Batch runs the coordination command in the
    # same container the docs do not say (devtools/rehearsal/containers.py plays the stricter case, where the
    # coordination command's ~/.ssh/config is not here); the job's key is in the task-shared folder either way.
    client = f"python -m training node-ssh --port {SSH_PORT} --keys-dir {keys_dir(job)} --client-only || exit $?"
    return _script(_IMPORTABLE, *prelude, client, " ".join(launch), "rc=$?", f"rm -rf {keys_dir(job)}",
                   f"mkdir -p {outputs}",
                   f"(cd {run_dir(job)} && tar --exclude=./checkpoints -cf - .) | tar -xf - -C {outputs}",
                   "exit $rc")


def environment(inputs: JobInputs) -> list[dict[str, str]]:
    env = training_environment(inputs.sku)
    env["AZURE_CLIENT_ID"] = inputs.node_identity_client_id  # DefaultAzureCredential picks the pool's identity
    return [{"name": k, "value": v} for k, v in sorted(env.items()) if v]


def container_run_options(sku: GpuSku) -> str:
    return f"{CONTAINER_RUN_OPTIONS} {INFINIBAND_RUN_OPTIONS}" if sku.infiniband else CONTAINER_RUN_OPTIONS


# Batch counts a job with terminatejob and no tasks as complete at once, so the job is created with noaction,
# the task added, and then the job updated with this (https://learn.microsoft.com/rest/api/batchservice/job/add,
# onAllTasksComplete).
END_WITH_TASKS = {"onAllTasksComplete": "terminatejob"}


def job_spec(inputs: JobInputs, job: str) -> dict:
    return {
        "id": job,
        "displayName": f"ResNet50 {inputs.framework} on {inputs.nodes}x{inputs.sku.gpus} GPUs ({inputs.stack})",
        "poolInfo": {"poolId": inputs.pool_id},
        "onAllTasksComplete": "noaction",  # END_WITH_TASKS once the task is in
        "usesTaskDependencies": False,
        # Wait for the nodes plus every try's training: Batch ends the job and its task at this bound whatever
        # happened (allocation.job_wall_clock). The task's own maxWallClockTime bounds each try alone.
        "constraints": {"maxWallClockTime": allocation.job_wall_clock(inputs.allocation_timeout_minutes,
                                                                      inputs.max_hours, inputs.retries)},
        "metadata": [{"name": "fingerprint", "value": inputs.fingerprint()},
                     {"name": "framework", "value": inputs.framework},
                     # The deadline this job was given, so status reads the job's own, not today's config.
                     {"name": allocation.DEADLINE_METADATA, "value": str(inputs.allocation_timeout_minutes)}],
    }


def task_spec(inputs: JobInputs, job: str) -> dict:
    identity = {"resourceId": inputs.node_identity_id}
    outputs = f"{job}/"
    return {
        "id": TASK_ID,
        # --dist native: one worker per node (launch builds each node's TF_CONFIG from AZ_BATCH_HOST_LIST)
        "displayName": (f"native {inputs.framework} x{inputs.nodes}" if dist_of(list(inputs.train_args)) == "native"
                        else f"horovod {inputs.framework} x{inputs.nodes * inputs.slots}"),
        "commandLine": application_command(inputs, job),
        "containerSettings": {
            "imageName": inputs.image,
            "containerRunOptions": container_run_options(inputs.sku),
            "registry": {"registryServer": inputs.registry_server, "identityReference": identity},
            "workingDirectory": "taskWorkingDirectory",
        },
        "multiInstanceSettings": {
            "numberOfInstances": inputs.nodes,
            "coordinationCommandLine": coordination_command(job, inputs),
            # The current training scripts, so a fix needs no image rebuild: they shadow the image's copy.
            "commonResourceFiles": [{"storageContainerUrl": inputs.scripts_url, "blobPrefix": SCRIPTS_PREFIX,
                                     "identityReference": identity}],
        },
        "environmentSettings": environment(inputs),
        "outputFiles": [
            {"filePattern": pattern,
             "destination": {"container": {"containerUrl": inputs.outputs_url, "path": outputs + subpath,
                                           "identityReference": identity}},
             "uploadOptions": {"uploadCondition": "taskcompletion"}}
            for pattern, subpath in (("../std*.txt", "logs"), ("outputs/**/*", "run"))
        ],
        # A hung run (a lost node, a deadlock) must not hold every GPU node forever.
        "constraints": {"maxTaskRetryCount": inputs.retries, "maxWallClockTime": f"PT{inputs.max_hours}H"},
        # Root inside the container: InfiniBand devices, locked memory and sshd need it.
        "userIdentity": {"autoUser": {"scope": "pool", "elevationLevel": "admin"}},
    }


def autoscale_formula(min_nodes: int, max_nodes: int, spot: bool = False,
                      allocation_timeout_minutes: int | None = None) -> str:
    """The pool sized from its jobs: the nodes the queued tasks ask for, plus every node while a task runs,
    `min_nodes` once nothing has waited or run for a while, never more than `max_nodes`.

    A job is one multi-instance task of `nodes` instances and a node runs one task (taskSlotsPerNode 1), and
    "for a multi-instance task, $ActiveTasks will include the number of instances set on the task"
    (https://learn.microsoft.com/azure/batch/batch-automatic-scaling#variables): a queued `submit --nodes 1`
    asks for one node, not `max_nodes`. How $RunningTasks counts a running multi-instance task the page does not
    say, so while anything runs the pool keeps the nodes it has: a running job's nodes are never given up (nor a
    resize left waiting for the task to end). What waits is read from the newest sample only: a task counts as
    active until it starts, so the largest sample of the last 5 minutes would still count a job that has just
    started on its nodes, and the next evaluation would add as many idle ones for the whole run. Whether
    anything runs is read from the last 5 minutes (below 70% of samples, the newest): a brief gap in the samples
    does not give a running job's nodes up.

    With `spot` the same count goes to Spot nodes ($TargetLowPriorityNodes, $CurrentLowPriorityNodes: since March
    2026 Batch allocates the low-priority target of a Batch-managed account as Spot VMs,
    https://github.com/Azure/Batch/issues/196) and none to dedicated ones: a job on a mix would be evicted with
    its Spot part anyway (one multi-instance task), so a mix buys no safety and costs the dedicated price. An
    evicted node's task is requeued ("tasks that were running on the preempted node VMs are requeued",
    https://learn.microsoft.com/azure/batch/batch-spot-vms): it counts in $ActiveTasks again, and the pool seeks
    its Spot target back; while anything waits, whether a job runs is read from the newest sample only (below).

    With `allocation_timeout_minutes`, a pool that let a job wait that long with nothing running gives its nodes
    back, down to `min_nodes` (allocation.give_back_lines says how and why).
    """
    target, current = (("$TargetLowPriorityNodes", "$CurrentLowPriorityNodes") if spot
                       else ("$TargetDedicatedNodes", "$CurrentDedicatedNodes"))
    other = "$TargetDedicatedNodes" if spot else "$TargetLowPriorityNodes"
    def recent(metric: str) -> str:
        return (f"{metric}.GetSamplePercent(TimeInterval_Minute * 5) < 70 ? max(0, {metric}.GetSample(1)) : "
                f"max(0, max({metric}.GetSample(TimeInterval_Minute * 5)))")

    return "\n".join([
        "$waiting = max(0, $ActiveTasks.GetSample(1));",
        f"$running = {recent('$RunningTasks')};",
        # While a job waits, what runs is read from the newest sample: an evicted job's task is requeued (it
        # waits again) and ran a minute ago, and its surviving nodes would otherwise be counted beside the
        # nodes it asks for, one idle node more for the whole rerun.
        "$runningNow = max(0, $RunningTasks.GetSample(1));",
        "$holding = $waiting > 0 ? $runningNow : $running;",
        f"$busy = $holding > 0 ? {current} : 0;",
        f"$target = min({max_nodes}, max({min_nodes}, $waiting + $busy));",
        *(allocation.give_back_lines(allocation_timeout_minutes, min_nodes) if allocation_timeout_minutes else []),
        f"{target} = $target;",
        f"{other} = 0;",
        "$NodeDeallocationOption = taskcompletion;",
    ])


def local_volume_command() -> str:
    """Shell: run the local-volume script (LOCAL_VOLUME_SCRIPT, its text carried in the command line, so the start
    task needs no download and no role on storage) to make $AZ_BATCH_NODE_SHARED_DIR/local-data: the size's local
    NVMe drives striped into one volume, or its temporary disk; idempotent, as a start task must be (it runs again
    after a reboot, and "in some cases ... even though the node was not rebooted":
    https://learn.microsoft.com/javascript/api/@azure/arm-batch/starttask)."""
    script = LOCAL_VOLUME_SCRIPT.read_text()
    return (f"bash -c {shlex.quote(script)} local_volume.sh {batch_path('AZ_BATCH_NODE_SHARED_DIR', LOCAL_DATA)} "
            "|| exit $?")


def start_task_command(local_cache: bool, data_wait_minutes: int, sku: GpuSku | None = None,
                       data_tier: str = "nfs") -> str:
    """The pool's start task (on the host, as admin): the size's node health checks first (infra/core/node_health.py:
    with the pool's startTask.waitForSuccess, a node that fails them never takes a task, so no volume is built on
    it), then, with dataTier node-local, the node's local volume (local_volume_command), or with dataLocalCache
    (dataTier nfs), a copy of the dataset from NFS to the node's local disk, under AZ_BATCH_NODE_SHARED_DIR so the
    task's container sees it (resumable)."""
    health = [node_health.check_command(sku)] if sku is not None else []
    if data_tier == "node-local":
        return _script(*health, local_volume_command(), "echo node ready")
    if not local_cache:
        return _script(*health, "echo node ready") if health else "/bin/bash -c 'echo node ready'"
    cache = batch_path("AZ_BATCH_NODE_SHARED_DIR", LOCAL_CACHE)
    # rsync compares size and time, so a node rebooted mid-copy finishes the copy instead of restarting it.
    return _script(*health, wait_for_data(nfs_path(DATASET), data_wait_minutes), f"mkdir -p {cache}",
                   f"rsync -a {nfs_path(DATASET)} {cache}/")


def job_inputs(cfg: StackConfig, outputs: StackOutputs, framework: str | None = None, nodes: int | None = None,
               train_args: tuple[str, ...] | None = None, processes_per_node: int = 0) -> JobInputs:
    """The same inputs `pulumi up` gives the TrainingJob resource, with optional overrides."""
    shape = job_shape(cfg, outputs.image_refs, "image", "pool", framework, nodes, train_args)
    urls = outputs.container_urls
    node_local = cfg.nfs.data_tier == "node-local"
    return JobInputs(
        stack=cfg.stack, pool_id=outputs.pool_id, nodes=shape.nodes, gpu_sku=cfg.nodes.gpu_sku,
        framework=shape.framework, image=shape.image, registry_server=outputs.registry_login_server,
        node_identity_id=outputs.pull_identity_id, node_identity_client_id=outputs.pull_identity_client_id,
        train_args=shape.train_args, retries=cfg.training.retries, max_hours=cfg.training.max_hours,
        data_wait_minutes=cfg.training.data_wait_minutes, local_cache=cfg.nfs.data_local_cache,
        scripts_url=urls["scripts"], outputs_url=urls["outputs"],
        # node-local: every node stages from `data`; nfs with azure-files: the primary stages onto the share
        data_url=urls["data"] if cfg.nfs.kind == "azure-files" or node_local else "",
        processes_per_node=processes_per_node, data_tier=cfg.nfs.data_tier,
        allocation_timeout_minutes=cfg.training.allocation_timeout_minutes)
