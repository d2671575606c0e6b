"""The Azure ML backend's training job, built with Azure ML's own SDK entities (azure-ai-ml), so that the SDK's
schema, not ours, says whether it is valid; submitted by the same SDK.

One command job on the stack's compute cluster (https://learn.microsoft.com/azure/machine-learning/how-to-train-distributed-gpu):
- Horovod (pytorch, tensorflow, keras) as an MPI distribution with one process per GPU: Azure ML starts
  mpirun itself, so every process runs `python -m training train` directly;
- PyTorch DDP (trainingArgs with `--dist ddp`) as a PyTorch distribution: Azure ML sets MASTER_ADDR,
  MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK and NODE_RANK per process. LOCAL_WORLD_SIZE is not in that list,
  so the job sets it (one value for every process: the GPUs per node);
- TensorFlow and Keras with `--dist native` (MultiWorkerMirroredStrategy) as a TensorFlow distribution with
  worker_count = nodes: one process per node driving all its GPUs, Azure ML setting each one's TF_CONFIG
  ("TensorFlow" in the guide above; TensorFlowDistribution, https://learn.microsoft.com/python/api/azure-ai-ml/azure.ai.ml.tensorflowdistribution);
- instance_count = nodes; the run folder as the `run` output in the `outputs` container; the dataset as amlDataMode
  says: `download` (the default) stages it onto each node's local disk in the command itself, before `train`, with
  the node stager the Batch nodes run (`python -m training node-stage`, issue 56: a sharded dataset's few thousand
  shards in parallel, each MD5 checked, once per node: every process of the node runs it, the first copies while
  the others wait on its lock and then find its marker), never Azure ML's per-file download or mount of a large
  dataset; `mount` keeps the `data` input as a read-only mount (streamed; for a small dataset);
- the training package as the job's code snapshot (the files `pulumi up` puts into `scripts` for Batch), so a
  code change needs no image rebuild; the image's environment version pins the image digest;
- the data is read with the compute cluster's identity (the job's identity), never a key or SAS;
- the NCCL/InfiniBand environment of the Batch job, and a timeout of trainingMaxHours.
The command runs in a shell: every user argument is quoted (shlex), as in the Batch job.

Node health (issue 40): the nodes do NOT check themselves before `train` here, unlike the Batch pool's start task
(infra/core/node_health.py). The checks the HPC image ships cannot run from the job's command safely:
- the command runs inside the job's container, which sees neither the host's /opt/azurehpc (where the image installs
  azurehpc-health-checks) nor its Docker, and run-health-checks.sh runs the checks in a privileged container of
  its own (`sudo docker run --privileged --gpus all mcr.microsoft.com/aznhc/aznhc-nv`);
- with the MPI distribution Azure ML wraps the command in its own mpirun, one `python -m training train` per rank,
  and MPI_Init may run only once per rank (open-mpi/ompi 7025, ARCHITECTURE.md): the checks' NCCL all-reduce is
  started by their own `mpirun` (customTests/azure_nccl_allreduce.nhc), a second MPI program per rank; run on every
  rank, eight copies would also contend for the same GPUs.
What protects an Azure ML job instead: `train`'s interconnect check on a multi-node job (--interconnect-check).
"""
from __future__ import annotations

import hashlib
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from infra.backends.shared import StackOutputs, job_prefix, job_shape, training_environment
from infra.core.config.stack import StackConfig
from infra.core.containers import AML_DATASTORES, runtime_files
from infra.core.skus import CATALOG, IMAGE_TOPOLOGY_DIR
from training.data import datasets
from training.efficiency import expectation_args
from training.interconnect import job_train_args

DATA_MODES = {"download": "download", "mount": "ro_mount"}  # amlDataMode -> the SDK's input mode
# amlDataMode download: where node-stage puts the dataset, relative to the command's working directory. Azure ML runs
# a job's command in a folder of its own on the node (the code snapshot's); that it lies on the node's local
# temporary disk the docs do not say in so many words: NOT VERIFIED on a cluster here.
LOCAL_DATA = "local-data"
SHM_SIZE = "32g"  # PyTorch DataLoader workers pass batches through /dev/shm (Docker's default is 64 MB)


@dataclass(frozen=True)
class AmlJobInputs:
    stack: str
    framework: str
    nodes: int
    gpu_sku: str
    environment: str  # name:version of the framework's environment
    compute: str
    data_mode: str  # download | mount (amlDataMode)
    train_args: tuple[str, ...]
    max_hours: int
    identity_client_id: str  # the compute cluster's (the nodes') user-assigned identity
    # `submit --dataset NAME`: the job's `data` input is that dataset's folder of the container (training/data/
    # datasets.py); "" its root. Out of repr, so the names of jobs without one stay as they were (job_name).
    dataset: str = field(default="", repr=False)
    # the `data` container's URL (no SAS): with amlDataMode download every node stages the dataset from it (node-stage);
    # "" keeps the `data` input as amlDataMode says. Out of repr, as dataset: one URL per stack.
    data_url: str = field(default="", repr=False)

    @property
    def stages(self) -> bool:
        """Whether the command stages the dataset onto the node's local disk itself (amlDataMode download)."""
        return bool(self.data_url) and self.data_mode == "download"

    @property
    def gpus(self) -> int:
        return CATALOG[self.gpu_sku].gpus

    @property
    def distribution(self) -> str:
        """horovod, ddp or native, as the train flags say (horovod unless `--dist` says otherwise)."""
        args = list(self.train_args)
        for i, arg in enumerate(args):
            if arg == "--dist" and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith("--dist="):
                return arg.split("=", 1)[1]
        return "horovod"


def aml_job_inputs(cfg: StackConfig, outputs: StackOutputs, framework: str | None = None, nodes: int | None = None,
                   train_args: tuple[str, ...] | None = None) -> AmlJobInputs:
    """From the stack config and outputs, with the same overrides and refusals as the Batch job's inputs."""
    shape = job_shape(cfg, outputs.aml_environments, "environment", "cluster", framework, nodes, train_args)
    return AmlJobInputs(
        stack=cfg.stack, framework=shape.framework, nodes=shape.nodes, gpu_sku=cfg.nodes.gpu_sku,
        environment=shape.image, compute=outputs.aml_compute_name, data_mode=cfg.aml.data_mode,
        train_args=shape.train_args, max_hours=cfg.training.max_hours,
        identity_client_id=outputs.pull_identity_client_id, data_url=(outputs.container_urls or {}).get("data", ""))


def job_name(inputs: AmlJobInputs, attempt: str = "") -> str:
    fingerprint = hashlib.sha256(repr(inputs).encode()).hexdigest()[:10]
    return f"{job_prefix(inputs.stack)}{fingerprint}" + (f"-{attempt}" if attempt else "")


def command_line(inputs: AmlJobInputs) -> str:
    """What every process runs; `${{inputs.data}}` and `${{outputs.run}}` are Azure ML's own placeholders. One
    program per process: Azure ML's MPI distribution wraps this whole command in its mpirun, and MPI_Init may run only
    once per rank, even from two processes (open-mpi/ompi issue 7025), so on a multi-node run `train` checks the
    interconnect itself first (--interconnect-check) rather than a second program before it."""
    sku = CATALOG[inputs.gpu_sku]
    train_args = job_train_args(expectation_args(list(inputs.train_args), framework=inputs.framework,
                                                 expected=sku.benchmark_img_per_sec),
                                nodes=inputs.nodes, floor_gbps=sku.allreduce_floor_gbps)
    name = inputs.dataset or datasets.DEFAULT
    data = f"{LOCAL_DATA}/datasets/{shlex.quote(name)}" if inputs.stages else "${{inputs.data}}"
    words = ["python", "-m", "training", "train", "--framework", shlex.quote(inputs.framework),
             "--data", data, "--output-dir", "${{outputs.run}}", "--resume", "auto",
             *(shlex.quote(arg) for arg in train_args)]
    if not inputs.stages:
        return " ".join(words)
    # The node stager first, on every process (it is no MPI program: one MPI_Init per rank still holds), with the
    # job's identity (AZURE_CLIENT_ID picks it for DefaultAzureCredential; no SAS); a failure ends the process
    # before `train`, which the job reports as failed.
    stage = (f"AZURE_CLIENT_ID={shlex.quote(inputs.identity_client_id)} python -m training node-stage "
             f"{shlex.quote(inputs.data_url)} --dataset {shlex.quote(name)} --dest {LOCAL_DATA}")
    return f"{stage} && {' '.join(words)}"


def environment_variables(inputs: AmlJobInputs) -> dict[str, str]:
    sku = CATALOG[inputs.gpu_sku]
    env = training_environment(sku)
    if sku.nccl_topo_file:  # the image's copy: the host's /opt/microsoft is not in an Azure ML container
        env["NCCL_TOPO_FILE"] = f"{IMAGE_TOPOLOGY_DIR}/{PurePosixPath(sku.nccl_topo_file).name}"
    if inputs.distribution == "ddp":
        env["LOCAL_WORLD_SIZE"] = str(inputs.gpus)
    return {k: v for k, v in sorted(env.items()) if v}


def code_snapshot(folder: Path) -> Path:
    """The training package, exactly the files `scripts` holds, under `folder/training` (the job's code)."""
    if folder.exists():
        shutil.rmtree(folder)
    for blob_name, source in runtime_files().items():
        target = folder / blob_name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return folder


def build_job(inputs: AmlJobInputs, name: str, code: Path):
    """The job as azure-ai-ml's Command entity (validated by the SDK's own schema when built and dumped)."""
    from azure.ai.ml import Input, MpiDistribution, Output, PyTorchDistribution, TensorFlowDistribution, command
    from azure.ai.ml.entities import ManagedIdentityConfiguration

    distribution = (PyTorchDistribution(process_count_per_instance=inputs.gpus) if inputs.distribution == "ddp"
                    else TensorFlowDistribution(worker_count=inputs.nodes) if inputs.distribution == "native"
                    else MpiDistribution(process_count_per_instance=inputs.gpus))
    job = command(
        name=name, display_name=name, experiment_name=f"dltrain-{inputs.stack}",
        description=f"ResNet50 {inputs.framework} ({inputs.distribution}) on {inputs.nodes} x {inputs.gpu_sku}",
        command=command_line(inputs), code=str(code), environment=inputs.environment, compute=inputs.compute,
        instance_count=inputs.nodes, distribution=distribution, shm_size=SHM_SIZE,
        environment_variables=environment_variables(inputs),
        inputs={} if inputs.stages else {
            "data": Input(type="uri_folder", path=f"azureml://datastores/{AML_DATASTORES['data']}/paths/"
                                                 f"{datasets.prefix(inputs.dataset or datasets.DEFAULT)}",
                          mode=DATA_MODES[inputs.data_mode])},
        outputs={"run": Output(type="uri_folder", path=f"azureml://datastores/{AML_DATASTORES['outputs']}/paths/{name}/run/",
                               mode="rw_mount")},
        identity=ManagedIdentityConfiguration(client_id=inputs.identity_client_id),
        timeout=inputs.max_hours * 3600, tags={"stack": inputs.stack, "framework": inputs.framework})
    return job
