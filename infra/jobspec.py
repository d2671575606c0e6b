"""The training job as Azure Batch sees it, built by pure functions (no SDK, no network).

One Batch job per training run, holding one multi-instance task: Batch allocates `nodes` nodes of the pool
to it, runs the coordination command on every node (an sshd inside the container, so mpirun can reach the
other nodes), then the application command on the primary: `python -m training launch`, which starts
Horovod over MPI with one process per GPU on every node. The dicts here have the Batch REST API's shape
(camelCase); `infra/batch.py` hands them to the SDK unchanged. Both the TrainingJob dynamic resource
(`pulumi up`) and `python -m infra submit` build their jobs here, so both launch the same thing.

Where things live on a node:
  $AZ_BATCH_NODE_MOUNTS_DIR/data        the NFS share (the staged dataset; runs/ for job outputs)
  /mnt/data-cache                       the dataset copied to local disk by the start task (dataLocalCache)
  $AZ_BATCH_TASK_WORKING_DIR/training   the training scripts from the `scripts` container (resource files)
Checkpoints go to the NFS share, so a retried or preempted task resumes where the last one stopped.
"""
from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import asdict, dataclass

NFS_MOUNT = "data"  # relative mount path: the share appears at $AZ_BATCH_NODE_MOUNTS_DIR/data
NFS_PATH = "$AZ_BATCH_NODE_MOUNTS_DIR/" + NFS_MOUNT
LOCAL_CACHE = "/mnt/data-cache"
DATASET = "imagenet"  # the data container is staged into <share>/imagenet
SSH_PORT = 2222  # the containers' sshd for mpirun; the host's own sshd keeps port 22
TASK_ID = "train"
STAGED_MARKER = ".staged"  # written into the dataset folder once staging has finished
SECRET_FIELDS = ("scripts_url", "outputs_url", "data_url")
SCRIPTS_PREFIX = "training/"

# NCCL and UCX over InfiniBand on the HPC image (ND A100 v4 / H100 v5): relaxed PCI ordering for the
# NICs, the topology file the image ships, and TCP bootstrap on the Ethernet interface.
NCCL_ENV = {
    "NCCL_IB_DISABLE": "0",
    "NCCL_IB_PCI_RELAXED_ORDERING": "1",
    "UCX_IB_PCI_RELAXED_ORDERING": "on",
    "NCCL_SOCKET_IFNAME": "eth0",
    "UCX_NET_DEVICES": "mlx5_ib0:1",
    "NCCL_TOPO_FILE": "/opt/microsoft/ndv4-topo.xml",
    "NCCL_DEBUG": "WARN",
    "OMPI_MCA_pml": "ucx",
    "OMPI_MCA_btl": "^openib,smcuda",
}
# The container sees the InfiniBand devices and the host's topology files, shares the host network (MPI
# and NCCL address nodes by their IPs) and may pin memory for RDMA.
CONTAINER_RUN_OPTIONS = ("--network=host --ipc=host --ulimit memlock=-1 --ulimit stack=67108864 "
                         "--device=/dev/infiniband --cap-add=IPC_LOCK -v /opt/microsoft:/opt/microsoft:ro")


@dataclass(frozen=True)
class JobInputs:
    """Everything a training job depends on. SAS URLs are secrets and are left out of the fingerprint."""

    stack: str
    pool_id: str
    nodes: int
    gpus_per_node: int
    infiniband: bool
    framework: str  # pytorch | tensorflow | keras
    image: str  # full reference, registry/name:tag
    registry_server: str
    pull_identity_id: str  # resource ID of the user-assigned identity that may pull from the registry
    train_args: tuple[str, ...]
    retries: int
    local_cache: bool
    scripts_url: str  # the scripts container URL with its read SAS (secret)
    outputs_url: str  # the outputs container URL with its write SAS (secret)
    data_url: str = ""  # the data container URL with its read SAS (secret): set when the job stages the data

    def fingerprint(self) -> str:
        """Same training, same fingerprint: a renewed SAS alone does not start a new job."""
        public = {k: v for k, v in asdict(self).items() if k not in SECRET_FIELDS}
        return hashlib.sha256(json.dumps(public, sort_keys=True).encode()).hexdigest()[:10]


def job_id(inputs: JobInputs, attempt: str = "") -> str:
    """Batch job IDs are unique per account and never reusable after deletion, hence the fingerprint."""
    return f"train-{inputs.stack}-{inputs.fingerprint()}{'-' + attempt if attempt else ''}"


def data_dir(local_cache: bool) -> str:
    return f"{LOCAL_CACHE}/{DATASET}" if local_cache else f"{NFS_PATH}/{DATASET}"


def run_dir(job: str) -> str:
    return f"{NFS_PATH}/runs/{job}"


def train_command(inputs: JobInputs, job: str) -> list[str]:
    """The `python -m training train` arguments every rank runs; --resume auto makes retries continue."""
    return ["--framework", inputs.framework, "--data", data_dir(inputs.local_cache), "--output-dir", run_dir(job),
            "--resume", "auto", *inputs.train_args]


def _quote(arg: str) -> str:
    # $AZ_BATCH_* must still expand inside the task's shell, so those arguments are double-quoted.
    return f'"{arg}"' if arg.startswith("$AZ_BATCH_") and '"' not in arg else shlex.quote(arg)


def wait_for_data(dataset: str) -> str:
    """Shell: block until the dataset on the share is complete (the NFS server stages it after boot)."""
    marker = f"{dataset}/{STAGED_MARKER}"
    return (f'until [ -f "{marker}" ]; do echo "waiting for the NFS server to finish staging {dataset}"; '
            "sleep 60; done")


def stage_data(dataset: str) -> str:
    """Shell: stage the data container onto the share once (the SAS comes from the environment, never argv)."""
    marker = f"{dataset}/{STAGED_MARKER}"
    return (f'[ -f "{marker}" ] || {{ python -m training stage env:DATA_CONTAINER_URL "{dataset}" '
            f'&& touch "{marker}"; }} || exit 1')


def application_command(inputs: JobInputs, job: str) -> str:
    """On the primary node: make sure the data is staged, launch Horovod across all nodes, then copy the
    run (without checkpoints) to ./outputs, which Batch uploads to the outputs container, whatever the
    exit status."""
    dataset = f"{NFS_PATH}/{DATASET}"
    prelude = stage_data(dataset) if inputs.data_url else wait_for_data(dataset)
    launch = ["python", "-m", "training", "launch", "--slots", str(inputs.gpus_per_node),
              "--ssh-port", str(SSH_PORT), "--", *train_command(inputs, job)]
    run = _quote(run_dir(job))
    script = (f"{prelude}; {' '.join(_quote(a) for a in launch)}; rc=$?; mkdir -p outputs; "
              f"(cd {run} && tar --exclude=./checkpoints -cf - .) | tar -xf - -C outputs; exit $rc")
    return f"/bin/bash -c {shlex.quote(script)}"


def coordination_command() -> str:
    """On every node, before the application command: the sshd mpirun uses to start remote ranks."""
    return f"/bin/bash -c 'mkdir -p /run/sshd && /usr/sbin/sshd -p {SSH_PORT}'"


def environment(inputs: JobInputs) -> list[dict[str, str]]:
    env = dict(NCCL_ENV) if inputs.infiniband else {"NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "WARN"}
    env["PYTHONUNBUFFERED"] = "1"
    if inputs.data_url:
        env["DATA_CONTAINER_URL"] = inputs.data_url
    return [{"name": k, "value": v} for k, v in sorted(env.items())]


def job_spec(inputs: JobInputs, job: str) -> dict:
    return {
        "id": job,
        "displayName": f"ResNet50 {inputs.framework} on {inputs.nodes}x{inputs.gpus_per_node} GPUs ({inputs.stack})",
        "poolInfo": {"poolId": inputs.pool_id},
        "onAllTasksComplete": "terminatejob",  # the job ends with its task, so the pool can scale to zero
        "usesTaskDependencies": False,
        "metadata": [{"name": "fingerprint", "value": inputs.fingerprint()},
                     {"name": "framework", "value": inputs.framework}],
    }


def task_spec(inputs: JobInputs, job: str) -> dict:
    outputs = f"{job}/"
    return {
        "id": TASK_ID,
        "displayName": f"horovod {inputs.framework} x{inputs.nodes * inputs.gpus_per_node}",
        "commandLine": application_command(inputs, job),
        "containerSettings": {
            "imageName": inputs.image,
            "containerRunOptions": CONTAINER_RUN_OPTIONS,
            "registry": {"registryServer": inputs.registry_server,
                         "identityReference": {"resourceId": inputs.pull_identity_id}},
            "workingDirectory": "taskWorkingDirectory",
        },
        "multiInstanceSettings": {
            "numberOfInstances": inputs.nodes,
            "coordinationCommandLine": coordination_command(),
            # The current training scripts, so a fix needs no image rebuild: ./training shadows the image's.
            "commonResourceFiles": [{"storageContainerUrl": inputs.scripts_url, "blobPrefix": SCRIPTS_PREFIX}],
        },
        "environmentSettings": environment(inputs),
        "outputFiles": [
            {"filePattern": pattern,
             "destination": {"container": {"containerUrl": inputs.outputs_url, "path": outputs + subpath}},
             "uploadOptions": {"uploadCondition": "taskcompletion"}}
            for pattern, subpath in (("../std*.txt", "logs"), ("outputs/**/*", "run"))
        ],
        "constraints": {"maxTaskRetryCount": inputs.retries},
        # Root inside the container: InfiniBand devices and locked memory need it.
        "userIdentity": {"autoUser": {"scope": "pool", "elevationLevel": "admin"}},
    }


def autoscale_formula(min_nodes: int, max_nodes: int, low_priority: bool) -> str:
    """All nodes while a training task waits or runs, `min_nodes` when the queue has been empty a while.

    A job takes every node at once (one multi-instance task with `max_nodes` instances), so the pool grows
    straight to the maximum rather than one node per task; nodes go only after their task completes.
    """
    dedicated, spot = ("0", "$target") if low_priority else ("$target", "0")
    return "\n".join([
        "$samples = $PendingTasks.GetSamplePercent(TimeInterval_Minute * 5);",
        "$tasks = $samples < 70 ? max(0, $PendingTasks.GetSample(1)) : "
        "max(0, max($PendingTasks.GetSample(TimeInterval_Minute * 5)));",
        f"$target = $tasks > 0 ? {max_nodes} : {min_nodes};",
        f"$TargetDedicatedNodes = {dedicated};",
        f"$TargetLowPriorityNodes = {spot};",
        "$NodeDeallocationOption = taskcompletion;",
    ])


def start_task_command(local_cache: bool) -> str:
    """The pool's start task: with dataLocalCache, copy the dataset from NFS to local disk (resumable)."""
    if not local_cache:
        return "/bin/bash -c 'echo node ready'"
    # rsync compares size and time, so a node rebooted mid-copy finishes the copy instead of restarting it.
    script = f"{wait_for_data(NFS_PATH + '/' + DATASET)}; mkdir -p {LOCAL_CACHE} && rsync -a \"{NFS_PATH}/{DATASET}\" {LOCAL_CACHE}/"
    return f"/bin/bash -c {shlex.quote(script)}"
