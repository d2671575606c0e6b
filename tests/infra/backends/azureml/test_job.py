"""The Azure ML job, built with azure-ai-ml's own entities and checked by the SDK itself: its REST object (what
the service receives) and its YAML form loaded back with `load_job` (the SDK's schema validates it)."""
import dataclasses
import subprocess

import pytest

from infra import REPO_ROOT
from infra.backends.shared import JobError, StackOutputs
from infra.core.config import stack as config
from infra.core.containers import AML_DATASTORES, runtime_files
from infra.backends.azureml import job as aml_job
from tests.infra.conftest import evaluation_for



def stack_inputs(**overrides):
    cfg = config.from_stack_file("nlp")
    return aml_job.aml_job_inputs(cfg, StackOutputs.from_json(evaluation_for("nlp").outputs), **overrides)


def built(tmp_path, inputs):
    """(the REST object as a dict, the job loaded back from its YAML by the SDK)."""
    from azure.ai.ml import load_job

    name = aml_job.job_name(inputs)
    job = aml_job.build_job(inputs, name, aml_job.code_snapshot(tmp_path / "code"))._to_job()
    job.dump(tmp_path / "job.yaml")
    return job._to_rest_object().as_dict()["properties"], load_job(tmp_path / "job.yaml"), name


def test_horovod_is_an_mpi_job_with_one_process_per_gpu_on_every_node(tmp_path):
    inputs = stack_inputs()
    rest, loaded, name = built(tmp_path, inputs)
    assert rest["jobType"] == "Command" and rest["distribution"] == {"distributionType": "Mpi",
                                                                     "processCountPerInstance": 8}
    assert rest["resources"]["instanceCount"] == 4 == inputs.nodes
    outputs = evaluation_for("nlp").outputs
    assert loaded.environment == outputs["amlEnvironments"]["pytorch"] and loaded.compute == outputs["amlComputeName"]
    assert loaded.distribution.process_count_per_instance == 8 and loaded.resources.instance_count == 4
    # amlDataMode download: no `data` input (Azure ML's per-file download); every node stages the dataset itself
    assert "data" not in loaded.inputs
    assert loaded.outputs["run"].path == f"azureml://datastores/{AML_DATASTORES['outputs']}/paths/{name}/run/"
    assert loaded.identity.client_id == outputs["pullIdentityClientId"]  # the cluster's identity reads the data
    assert loaded.limits.timeout == config.from_stack_file("nlp").training.max_hours * 3600
    # 4 nodes: every process checks the interconnect inside train, before training (ND96asr_v4 has no floor:
    # figure only): one program per process, as Azure ML's mpirun allows (one MPI_Init per rank)
    data_url = outputs["containerUrls"]["data"]
    assert loaded.command == (f"AZURE_CLIENT_ID={outputs['pullIdentityClientId']} python -m training node-stage "
                              f"{data_url} --dataset default --dest local-data && "
                              "python -m training train --framework pytorch --data local-data/datasets/default "
                              "--output-dir ${{outputs.run}} --resume auto --epochs 90 --batch-size 256 --precision bf16 "
                              "--interconnect-check")
    env = loaded.environment_variables
    # the image's copy of the size's topology file: an Azure ML container does not see the host's /opt/microsoft
    assert env["NCCL_IB_DISABLE"] == "0" and env["NCCL_TOPO_FILE"] == "/opt/dltrain/nccl-topology/ndv4-topo.xml"
    assert "LOCAL_WORLD_SIZE" not in env
    # The code snapshot is the training package, exactly what `scripts` holds for the Batch backend.
    snapshot = {p.relative_to(tmp_path / "code").as_posix() for p in (tmp_path / "code").rglob("*.py")}
    assert snapshot == set(runtime_files())


def test_ddp_is_a_pytorch_distribution_with_the_local_world_size_set(tmp_path):
    rest, loaded, _ = built(tmp_path, stack_inputs(train_args=("--dist", "ddp", "--epochs", "1"), nodes=2))
    assert rest["distribution"] == {"distributionType": "PyTorch", "processCountPerInstance": 8}
    assert loaded.resources.instance_count == 2
    assert loaded.environment_variables["LOCAL_WORLD_SIZE"] == "8"


def test_native_tensorflow_is_a_tensorflow_distribution_with_one_worker_per_node(tmp_path):
    # The nlp stack deploys pytorch only: its inputs with the TensorFlow image's environment in their place.
    inputs = dataclasses.replace(stack_inputs(train_args=("--dist", "native", "--epochs", "1"), nodes=2),
                                 framework="keras", environment="tensorflow:3")
    rest, loaded, _ = built(tmp_path, inputs)
    assert rest["distribution"] == {"distributionType": "TensorFlow", "workerCount": 2, "parameterServerCount": 0}
    assert loaded.distribution.worker_count == 2 and loaded.resources.instance_count == 2
    assert "--framework keras" in loaded.command and loaded.command.endswith("--dist native --epochs 1")


def test_mount_mode_reads_the_data_in_place(tmp_path):
    cfg = config.parse("nlp", {**config.read_stack_file("nlp", REPO_ROOT), "amlDataMode": "mount"},
                       placeholders_ok=True)
    inputs = aml_job.aml_job_inputs(cfg, StackOutputs.from_json(evaluation_for("nlp").outputs))
    _, loaded, _ = built(tmp_path, inputs)
    assert loaded.inputs["data"].mode == "ro_mount"
    assert loaded.inputs["data"].path == f"azureml://datastores/{AML_DATASTORES['data']}/paths/"
    assert "node-stage" not in loaded.command and "--data ${{inputs.data}} " in loaded.command


def test_download_mode_stages_the_named_dataset_on_every_node_before_train_with_the_jobs_identity(tmp_path):
    """The staging step runs in every process of a node (Azure ML's MPI wraps the whole command): node-stage takes
    a lock per dataset folder, so one copies and the others find its marker; it is no MPI program, so train stays
    the rank's one MPI_Init. A failure stops the process before train (&&). No SAS anywhere."""
    inputs = dataclasses.replace(stack_inputs(), dataset="cats")
    _, loaded, _ = built(tmp_path, inputs)
    stage, train = loaded.command.split(" && ")
    assert stage.endswith("--dataset cats --dest local-data") and "python -m training node-stage https://" in stage
    assert train.startswith("python -m training train") and " --data local-data/datasets/cats " in train
    assert "sig=" not in loaded.command and "data" not in loaded.inputs


@pytest.mark.parametrize("sku,nodes,floor", [("Standard_ND96isr_H100_v5", 2, "20"),
                                              ("Standard_ND96isr_H200_v5", 2, "20"),
                                              ("Standard_ND96isr_H100_v5", 1, None)])
def test_the_interconnect_check_runs_on_multi_node_jobs_with_the_sizes_floor(sku, nodes, floor):
    inputs = dataclasses.replace(stack_inputs(train_args=("--allow-slow-interconnect", "--epochs", "1")),
                                 gpu_sku=sku, nodes=nodes)
    line = aml_job.command_line(inputs)
    # one MPI program per rank: train (node-stage before it, on the node's disk, is none)
    assert line.count("python -m training train") == 1 and line.count("&&") == 1
    assert "--allow-slow-interconnect" in line  # train's own flag now: it runs the check
    if floor is None:
        assert "--interconnect-check" not in line
    else:
        assert line.endswith(f"--interconnect-check --interconnect-floor-gbps {floor}")


def test_no_user_text_reaches_the_shell(tmp_path):
    """Azure ML runs the command in a shell: user arguments arrive verbatim, and nothing in them runs."""
    hostile = ("--base-lr", "$(touch pwned)", "--note", "`id`; rm -rf / 'quoted'")
    line = aml_job.command_line(stack_inputs(train_args=hostile))
    probe = line.replace("python -m training node-stage", "true").replace("python -m training train", "printf '%s\\n'") \
        .replace("${{inputs.data}}", "D") \
        .replace("${{outputs.run}}", "O")
    result = subprocess.run(["bash", "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    # the user's words arrive as they were, before the interconnect check the job adds on 4 nodes
    assert result.stdout.splitlines()[-5:] == [*hostile, "--interconnect-check"] and not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("overrides,message", [
    ({"framework": "tensorflow"}, "--framework tensorflow: the stack has no tensorflow environment"),
    ({"nodes": 5}, "--nodes 5: give 1 to 4"),
])
def test_a_job_the_stack_cannot_run_is_refused_in_one_line(overrides, message):
    with pytest.raises(JobError, match=message):
        stack_inputs(**overrides)


def test_a_measured_size_passes_its_expected_rate_before_the_interconnect_check():
    h100 = dataclasses.replace(stack_inputs(), gpu_sku="Standard_ND96isr_H100_v5", nodes=2)
    assert aml_job.command_line(h100).endswith(
        "--expected-img-per-sec 5363 --interconnect-check --interconnect-floor-gbps 20")
    assert "--expected-img-per-sec" not in aml_job.command_line(stack_inputs())  # ND96asr_v4: not measured
