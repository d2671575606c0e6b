"""The Batch job and multi-instance task for 1, 2 and 8 nodes (pure functions)."""
import dataclasses
import shlex

import pytest
from azure.batch import models

from infra import jobspec

SAS_SCRIPTS = "https://st.blob.core.windows.net/scripts?sv=1&sp=rl&sig=SCRIPTS"
SAS_OUTPUTS = "https://st.blob.core.windows.net/outputs?sv=1&sp=cw&sig=OUTPUTS"


def inputs(nodes=2, **changes):
    base = jobspec.JobInputs(
        stack="dev", pool_id="gpu", nodes=nodes, gpus_per_node=8, infiniband=True, framework="pytorch",
        image="cr.azurecr.io/pytorch:latest@sha256:00", registry_server="cr.azurecr.io",
        pull_identity_id="/subscriptions/s/.../userAssignedIdentities/pull", train_args=("--epochs", "90"),
        retries=3, local_cache=False, scripts_url=SAS_SCRIPTS, outputs_url=SAS_OUTPUTS)
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize("nodes", [1, 2, 8])
def test_task_runs_horovod_on_every_gpu_of_every_node(nodes):
    spec = inputs(nodes)
    job = jobspec.job_id(spec)
    task = jobspec.task_spec(spec, job)
    assert task["multiInstanceSettings"]["numberOfInstances"] == nodes
    assert "sshd -p 2222" in task["multiInstanceSettings"]["coordinationCommandLine"]
    script = shlex.split(task["commandLine"])[2]  # /bin/bash -c SCRIPT
    assert "python -m training launch --slots 8 --ssh-port 2222 --" in script
    train = script.split("launch --slots 8 --ssh-port 2222 -- ")[1].split(";")[0]
    assert shlex.split(train) == ["--framework", "pytorch", "--data", "$AZ_BATCH_NODE_MOUNTS_DIR/data/imagenet",
                                  "--output-dir", f"$AZ_BATCH_NODE_MOUNTS_DIR/data/runs/{job}", "--resume", "auto",
                                  "--epochs", "90"]
    assert script.index(".staged") < script.index("training launch")  # waits for the staged data first
    assert task["displayName"] == f"horovod pytorch x{nodes * 8}"
    # The SDK accepts the REST-shaped dicts as they are.
    parsed = models.BatchTaskCreateOptions(task)
    assert parsed.multi_instance_settings.number_of_instances == nodes


def test_environment_sets_nccl_over_infiniband_and_holds_no_secret():
    env = {e["name"]: e["value"] for e in jobspec.environment(inputs())}
    assert env["NCCL_IB_DISABLE"] == "0" and env["NCCL_IB_PCI_RELAXED_ORDERING"] == "1"
    assert env["OMPI_MCA_pml"] == "ucx" and "NCCL_TOPO_FILE" in env
    assert not any("sig=" in v for v in env.values())
    no_ib = {e["name"]: e["value"] for e in jobspec.environment(inputs(1, infiniband=False))}
    assert no_ib["NCCL_IB_DISABLE"] == "1"


def test_resource_and_output_files_use_the_container_sas_and_retries_resume():
    spec = inputs()
    job = jobspec.job_id(spec)
    task = jobspec.task_spec(spec, job)
    assert task["multiInstanceSettings"]["commonResourceFiles"] == [
        {"storageContainerUrl": SAS_SCRIPTS, "blobPrefix": "training/"}]
    uploads = {o["filePattern"]: o["destination"]["container"] for o in task["outputFiles"]}
    assert uploads == {"../std*.txt": {"containerUrl": SAS_OUTPUTS, "path": f"{job}/logs"},
                       "outputs/**/*": {"containerUrl": SAS_OUTPUTS, "path": f"{job}/run"}}
    assert all(o["uploadOptions"]["uploadCondition"] == "taskcompletion" for o in task["outputFiles"])
    assert task["constraints"] == {"maxTaskRetryCount": 3}
    assert "--resume auto" in task["commandLine"]
    # The SAS travel in Batch properties, never in a command line.
    assert "sig=" not in task["commandLine"] + task["multiInstanceSettings"]["coordinationCommandLine"]
    registry = task["containerSettings"]["registry"]
    assert registry == {"registryServer": "cr.azurecr.io", "identityReference": {"resourceId": spec.pull_identity_id}}
    assert "--device=/dev/infiniband" in task["containerSettings"]["containerRunOptions"]


def test_job_ends_with_its_task_on_the_pool():
    spec = inputs()
    job = jobspec.job_spec(spec, "train-dev-x")
    assert job["poolInfo"] == {"poolId": "gpu"} and job["onAllTasksComplete"] == "terminatejob"
    assert models.BatchJobCreateOptions(job).pool_info.pool_id == "gpu"


def test_fingerprint_follows_the_training_not_the_sas():
    assert inputs().fingerprint() == inputs(scripts_url=SAS_SCRIPTS + "x", outputs_url="o", data_url="d").fingerprint()
    assert inputs().fingerprint() != inputs(train_args=("--epochs", "1")).fingerprint()
    assert inputs().fingerprint() != inputs(8).fingerprint()
    assert jobspec.job_id(inputs(), attempt="20261121") == f"train-dev-{inputs().fingerprint()}-20261121"


def test_azure_files_job_stages_the_data_itself_with_the_sas_from_the_environment():
    spec = inputs(data_url="https://st.blob.core.windows.net/data?sp=rl&sig=DATA")
    task = jobspec.task_spec(spec, "j")
    assert "python -m training stage env:DATA_CONTAINER_URL" in task["commandLine"]
    assert "sig=" not in task["commandLine"]
    env = {e["name"]: e["value"] for e in task["environmentSettings"]}
    assert env["DATA_CONTAINER_URL"].endswith("sig=DATA")


def test_local_cache_trains_from_local_disk_after_the_start_task_copied_it():
    spec = inputs(local_cache=True)
    assert "--data /mnt/data-cache/imagenet" in jobspec.task_spec(spec, "j")["commandLine"]
    start = jobspec.start_task_command(True)
    assert ".staged" in start and "rsync -a" in start
    assert "rsync" not in jobspec.start_task_command(False)


@pytest.mark.parametrize("low_priority,dedicated,spot", [(False, "$target", "0"), (True, "0", "$target")])
def test_autoscale_formula(low_priority, dedicated, spot):
    formula = jobspec.autoscale_formula(0, 8, low_priority)
    assert "$target = $tasks > 0 ? 8 : 0;" in formula
    assert f"$TargetDedicatedNodes = {dedicated};" in formula
    assert f"$TargetLowPriorityNodes = {spot};" in formula
