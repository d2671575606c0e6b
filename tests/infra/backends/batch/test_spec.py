"""The Batch job and multi-instance task for 1, 2 and 8 nodes (pure functions), and its shell run for real."""
import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from azure.batch import models

from devtools.rehearsal.batch import batch_env, task_folders
from devtools.rehearsal.nodes import BATCH_ROOT
from infra.backends.batch import spec as batch_spec
from infra.core.containers import runtime_files
from tests.infra.backends.batch import job_nodes

SCRIPTS = "https://st.blob.core.windows.net/scripts"
OUTPUTS = "https://st.blob.core.windows.net/outputs"
IDENTITY = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/pull"


def inputs(nodes=2, **changes):
    base = batch_spec.JobInputs(
        stack="dev", pool_id="gpu", nodes=nodes, gpu_sku="Standard_ND96asr_v4", framework="pytorch",
        image="cr.azurecr.io/pytorch:latest@sha256:00", registry_server="cr.azurecr.io",
        node_identity_id=IDENTITY, node_identity_client_id="client-pull", train_args=("--epochs", "90"),
        retries=3, max_hours=24, data_wait_minutes=120, local_cache=False, scripts_url=SCRIPTS, outputs_url=OUTPUTS)
    return dataclasses.replace(base, **changes)


def _script(command_line: str) -> str:
    prefix = "/bin/bash -c "
    assert command_line.startswith(prefix)
    [script] = shlex.split(command_line[len(prefix):])
    return script


@pytest.mark.parametrize("nodes", [1, 2, 8])
def test_task_runs_horovod_on_every_gpu_of_every_node(nodes):
    spec = inputs(nodes)
    job = batch_spec.job_id(spec)
    task = batch_spec.task_spec(spec, job)
    assert task["multiInstanceSettings"]["numberOfInstances"] == nodes
    assert "node-ssh --port 2222" in task["multiInstanceSettings"]["coordinationCommandLine"]
    script = _script(task["commandLine"])
    assert "python -m training launch --slots 8 --ssh-port 2222 --" in script
    train = script.split("launch --slots 8 --ssh-port 2222 -- ")[-1].split(";")[0]
    assert script.count("python -m training launch") == 1 and "--run interconnect-check" not in script  # one launch
    # Only a multi-node run checks its interconnect, inside train before training, with the floor ND96asr_v4 has
    # none of in the catalog (measured and printed, no verdict).
    assert shlex.split(train) == ["--framework", "pytorch", "--data", "$AZ_BATCH_NODE_MOUNTS_DIR/data/imagenet",
                                  "--output-dir", f"$AZ_BATCH_NODE_MOUNTS_DIR/data/runs/{job}", "--resume", "auto",
                                  "--epochs", "90", *([] if nodes == 1 else ["--interconnect-check"])]
    assert script.index(".staged") < script.index("training launch")  # waits for the staged data first
    assert task["displayName"] == f"horovod pytorch x{nodes * 8}"
    # The SDK accepts the REST-shaped dicts as they are.
    parsed = models.BatchTaskCreateOptions(task)
    assert parsed.multi_instance_settings.number_of_instances == nodes


def test_native_tensorflow_runs_one_worker_per_node_through_the_same_launch():
    """--dist native: the same application command; launch (tests/training/cluster/test_launch_native.py) builds
    each node's TF_CONFIG from AZ_BATCH_HOST_LIST and starts one worker per node."""
    spec = inputs(3, framework="keras", train_args=("--dist", "native", "--epochs", "90"))
    task = batch_spec.task_spec(spec, batch_spec.job_id(spec))
    train = _script(task["commandLine"]).split("launch --slots 8 --ssh-port 2222 -- ")[1].split(";")[0]
    assert shlex.split(train)[-4:] == ["--dist", "native", "--epochs", "90"]
    assert task["displayName"] == "native keras x3"


@pytest.mark.parametrize("sku,topology", [("Standard_ND96asr_v4", "/opt/microsoft/ndv4-topo.xml"),
                                          ("Standard_ND96amsr_A100_v4", "/opt/microsoft/ndv4-topo.xml"),
                                          ("Standard_ND96isr_H100_v5", "/opt/microsoft/ndv5-topo.xml")])
def test_nccl_topology_and_infiniband_options_follow_the_size(sku, topology):
    spec = inputs(gpu_sku=sku)
    env = {e["name"]: e["value"] for e in batch_spec.environment(spec)}
    assert env["NCCL_IB_DISABLE"] == "0" and env["NCCL_IB_PCI_RELAXED_ORDERING"] == "1"
    assert env["OMPI_MCA_pml"] == "ucx" and env["NCCL_TOPO_FILE"] == topology
    options = batch_spec.task_spec(spec, "j")["containerSettings"]["containerRunOptions"]
    assert "--device=/dev/infiniband" in options and "-v /opt/microsoft:/opt/microsoft:ro" in options


def test_a_size_without_infiniband_gets_neither_the_devices_nor_a_topology():
    spec = inputs(1, gpu_sku="Standard_NC24ads_A100_v4")
    env = {e["name"]: e["value"] for e in batch_spec.environment(spec)}
    assert env["NCCL_IB_DISABLE"] == "1" and "NCCL_TOPO_FILE" not in env
    options = batch_spec.task_spec(spec, "j")["containerSettings"]["containerRunOptions"]
    assert "infiniband" not in options and "/opt/microsoft" not in options and "--network=host" in options


def test_storage_is_reached_with_the_pools_identity_and_no_sas_is_in_the_task():
    spec = inputs()
    job = batch_spec.job_id(spec)
    task = batch_spec.task_spec(spec, job)
    identity = {"resourceId": IDENTITY}
    assert task["multiInstanceSettings"]["commonResourceFiles"] == [
        {"storageContainerUrl": SCRIPTS, "blobPrefix": "training/", "identityReference": identity}]
    uploads = {o["filePattern"]: o["destination"]["container"] for o in task["outputFiles"]}
    assert uploads == {"../std*.txt": {"containerUrl": OUTPUTS, "path": f"{job}/logs", "identityReference": identity},
                       "outputs/**/*": {"containerUrl": OUTPUTS, "path": f"{job}/run", "identityReference": identity}}
    assert all(o["uploadOptions"]["uploadCondition"] == "taskcompletion" for o in task["outputFiles"])
    env = {e["name"]: e["value"] for e in task["environmentSettings"]}
    assert env["AZURE_CLIENT_ID"] == "client-pull"  # DefaultAzureCredential picks the pool's identity
    assert "sig=" not in repr(task) and "?sv=" not in repr(task)
    registry = task["containerSettings"]["registry"]
    assert registry == {"registryServer": "cr.azurecr.io", "identityReference": identity}
    assert models.BatchTaskCreateOptions(task).output_files[0].destination.container.identity_reference


def test_every_wait_is_bounded():
    spec = inputs(max_hours=12, data_wait_minutes=30)
    task = batch_spec.task_spec(spec, "j")
    assert task["constraints"] == {"maxTaskRetryCount": 3, "maxWallClockTime": "PT12H"}
    assert "deadline=$((SECONDS + 1800))" in task["commandLine"]
    assert "--resume auto" in task["commandLine"]
    start = batch_spec.start_task_command(True, 30)
    assert "deadline=$((SECONDS + 1800))" in start


def test_job_is_created_waiting_for_its_task():
    spec = inputs()
    job = batch_spec.job_spec(spec, "train-dev-x")
    assert job["poolInfo"] == {"poolId": "gpu"} and job["onAllTasksComplete"] == "noaction"
    assert batch_spec.END_WITH_TASKS == {"onAllTasksComplete": "terminatejob"}
    assert models.BatchJobCreateOptions(job).pool_info.pool_id == "gpu"


def test_fingerprint_follows_the_training():
    assert inputs().fingerprint() == inputs().fingerprint()
    assert inputs().fingerprint() != inputs(train_args=("--epochs", "1")).fingerprint()
    assert inputs().fingerprint() != inputs(8).fingerprint()
    assert batch_spec.job_id(inputs(), attempt="20261121") == f"train-dev-{inputs().fingerprint()}-20261121"


def test_azure_files_job_stages_the_data_itself_with_the_nodes_identity():
    spec = inputs(data_url="https://st.blob.core.windows.net/data")
    task = batch_spec.task_spec(spec, "j")
    assert "python -m training stage https://st.blob.core.windows.net/data" in task["commandLine"]
    assert "sig=" not in repr(task)


def test_local_cache_is_where_the_container_sees_it():
    spec = inputs(local_cache=True)
    script = _script(batch_spec.task_spec(spec, "j")["commandLine"])
    assert '--data "$AZ_BATCH_NODE_SHARED_DIR"/data-cache/imagenet' in script
    start = batch_spec.start_task_command(True, 120)
    assert ".staged" in start and "rsync -a" in start and '"$AZ_BATCH_NODE_SHARED_DIR"/data-cache' in start
    assert "/mnt/" not in start + script  # nothing outside AZ_BATCH_NODE_ROOT_DIR, which the container cannot see
    assert "rsync" not in batch_spec.start_task_command(False, 120)


DATA = "https://st.blob.core.windows.net/data"


def node_local(**changes):
    return inputs(data_tier="node-local", data_url=DATA, **changes)


@pytest.mark.parametrize("dataset, folder", [("", "default"), ("cats", "cats")])
def test_node_local_job_stages_its_dataset_on_every_node_before_its_sshd_and_trains_from_there(dataset, folder):
    """dataTier node-local: the coordination command (every node) runs node-stage for the job's dataset onto the
    node's volume with the pool's identity (its client ID, no SAS) before the job's sshd; the ranks' --data is that
    folder; the primary neither waits for nor stages the NFS share's copy."""
    spec = node_local(dataset=dataset)
    task = batch_spec.task_spec(spec, batch_spec.job_id(spec))
    coordination = _script(task["multiInstanceSettings"]["coordinationCommandLine"])
    stage = ("AZURE_CLIENT_ID=client-pull python -m training node-stage https://st.blob.core.windows.net/data "
             f'--dataset {folder} --dest "$AZ_BATCH_NODE_SHARED_DIR"/local-data || exit $?')
    assert stage in coordination and coordination.index(stage) < coordination.index("node-ssh")
    script = _script(task["commandLine"])
    assert f'--data "$AZ_BATCH_NODE_SHARED_DIR"/local-data/datasets/{folder} ' in script
    assert ".staged" not in script and "training stage" not in script and "imagenet" not in script
    assert "sig=" not in repr(task) and "?sv=" not in repr(task)
    assert models.BatchTaskCreateOptions(task).multi_instance_settings.coordination_command_line
    # a job of another tier or dataset is another job
    assert spec.fingerprint() != inputs(dataset=dataset).fingerprint()
    assert inputs().fingerprint() == dataclasses.replace(inputs(), data_tier="nfs").fingerprint()


def test_node_local_coordination_stops_before_the_sshd_when_staging_fails(tmp_path):
    """A node that cannot stage (no such dataset, a shard bad three times: node-stage exits 2) ends its coordination
    command with that status, so the task fails there and no rank starts; on success the sshd follows."""
    spec = node_local(dataset="cats")
    job = batch_spec.job_id(spec)
    node = batch_node(tmp_path, job)
    calls = tmp_path / "calls"
    body = f'echo "$AZURE_CLIENT_ID $3" >> "{calls}"; [ "$3" = node-stage ] && exit ${{STAGE_EXIT:-0}}; exit 0'
    env = {**os.environ, **node, "PATH": fake_python(tmp_path, body) + ":/usr/bin:/bin"}
    env.pop("AZURE_CLIENT_ID", None)  # the command sets it itself
    coordination = _script(batch_spec.coordination_command(job, spec))
    failed = subprocess.run(["bash", "-c", coordination], cwd=node["AZ_BATCH_TASK_WORKING_DIR"],
                            env={**env, "STAGE_EXIT": "2"}, capture_output=True, text=True)
    assert failed.returncode == 2 and calls.read_text().splitlines() == ["client-pull node-stage"]
    calls.unlink()
    ok = subprocess.run(["bash", "-c", coordination], cwd=node["AZ_BATCH_TASK_WORKING_DIR"], env=env,
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert calls.read_text().splitlines() == ["client-pull node-stage", " node-ssh"]
    argv = (tmp_path / "argv").read_text().splitlines()  # the last call's: node-ssh
    assert argv[:3] == ["-m", "training", "node-ssh"]


def test_node_local_start_task_makes_the_volume_after_the_health_checks():
    from infra.core.skus import CATALOG

    start = _script(batch_spec.start_task_command(False, 120, CATALOG["Standard_ND96isr_H100_v5"], "node-local"))
    assert start.index("azurehpc-health-checks") < start.index("local_volume.sh")
    volume = batch_spec.LOCAL_VOLUME_SCRIPT.read_text()
    assert shlex.quote(volume) in start  # the script itself, carried in the command line
    assert 'local_volume.sh "$AZ_BATCH_NODE_SHARED_DIR"/local-data || exit $?' in start
    assert "rsync" not in start and ".staged" not in start  # no copy from NFS, no wait for its staging


def test_autoscale_formula_asks_for_dedicated_or_spot_nodes():
    formula = batch_spec.autoscale_formula(0, 8)  # sized from the jobs: tests/infra/backends/batch/test_cluster.py evaluates it
    assert "$TargetDedicatedNodes = $target;" in formula and "$TargetLowPriorityNodes = 0;" in formula
    spot = batch_spec.autoscale_formula(0, 8, spot=True)
    assert "$TargetLowPriorityNodes = $target;" in spot and "$TargetDedicatedNodes = 0;" in spot


# --- The job's own shell, run for real in bash on Batch's folder layout ----------------------------------------

def batch_node(tmp_path, job):
    """One node's Batch folders and variables as Batch documents them (devtools/rehearsal/batch.py, pinned to the
    docs' examples in tests/devtools/rehearsal/test_batch_env.py): the scripts Batch downloaded (the common resource files,
    blob names kept) in the task-shared folder, which is the task folder, and the NFS share with the staged marker."""
    variables = batch_env(tmp_path / "batch", ["127.0.0.1"], 0, job, batch_spec.TASK_ID)
    for name in ("AZ_BATCH_NODE_SHARED_DIR", "AZ_BATCH_NODE_MOUNTS_DIR", "AZ_BATCH_TASK_WORKING_DIR"):
        Path(variables[name]).mkdir(parents=True, exist_ok=True)
    for blob, source in runtime_files().items():
        target = Path(variables["AZ_BATCH_TASK_SHARED_DIR"]) / blob
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    dataset = Path(variables["AZ_BATCH_NODE_MOUNTS_DIR"]) / "data" / "imagenet"
    dataset.mkdir(parents=True)
    (dataset / ".staged").touch()
    return variables


def fake_python(tmp_path, body):
    """A `python` first on PATH: records what the job runs, then runs `body` (bash)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > "{tmp_path}/argv"\n{body}\n')
    (bin_dir / "python").chmod(0o755)
    return str(bin_dir)


@pytest.mark.parametrize("hostile", ["--seed $AZ_BATCH_JOB_ID$(touch PWNED)", "--seed `touch PWNED`",
                                     "--seed '$(touch PWNED)'", "--seed \"x; touch PWNED\""])
def test_no_user_text_reaches_the_shell(tmp_path, hostile):
    from infra.core.config.stack import parse
    from infra.core.config.schema import ConfigError

    try:  # the stack config refuses it at plan time (not an int) ...
        parse("x", {"allowedIpRanges": ["20.50.1.7/32"], "trainingArgs": hostile})
    except ConfigError:
        pass
    # ... and even were it let through, the job's shell passes it on as text and runs nothing.
    args = tuple(shlex.split(hostile))
    spec = inputs(train_args=args)
    job = batch_spec.job_id(spec)
    env = {**os.environ, **batch_node(tmp_path, job), "PATH": fake_python(tmp_path, "exit 0") + ":/usr/bin:/bin"}
    result = subprocess.run(["bash", "-c", _script(batch_spec.application_command(spec, job))], cwd=tmp_path, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert not list(tmp_path.rglob("PWNED")), "user text ran as a command"
    argv = (tmp_path / "argv").read_text().splitlines()
    # the user's words as they were, before the interconnect check the job adds on several nodes
    user = argv[:-1] if argv[-1] == "--interconnect-check" else argv
    assert user[-len(args):] == list(args)
    assert argv[argv.index("--data") + 1] == f"{env['AZ_BATCH_NODE_MOUNTS_DIR']}/data/imagenet"


def test_every_rank_imports_the_scripts_batch_downloaded(tmp_path):
    """Coordination (every node) runs from the task-shared folder, where Batch downloaded the package, and leaves
    the download in place, on a retry too (Batch runs it again); the application command runs from there with it
    on PYTHONPATH, which launch forwards to the remote ranks (mpirun -x PYTHON*)."""
    spec = inputs()
    job = batch_spec.job_id(spec)
    node = batch_node(tmp_path, job)
    shared = node["AZ_BATCH_TASK_SHARED_DIR"]
    assert shared == node["AZ_BATCH_TASK_DIR"]  # as documented: one folder
    # The coordination command up to the sshd: run it with a python that reports where `training` comes from.
    probe = (f'[ "$1" = "-m" ] && [ "$2" = "training" ] || exit 9; cd /; '
             f'{sys.executable} -c "import training, sys; print(training.__file__)" > "{tmp_path}/imported"')
    env = {**os.environ, **node, "PATH": fake_python(tmp_path, probe) + ":/usr/bin:/bin"}
    env.pop("PYTHONPATH", None)
    coordination = _script(batch_spec.coordination_command(job))
    for attempt in (1, 2):
        result = subprocess.run(["bash", "-c", coordination], cwd=node["AZ_BATCH_TASK_WORKING_DIR"], env=env,
                                capture_output=True, text=True)
        assert result.returncode == 0, (attempt, result.stderr)
        assert (tmp_path / "imported").read_text().strip() == f"{shared}/training/__init__.py"
        assert sorted(p.relative_to(shared).as_posix() for p in Path(shared, "training").rglob("*.py")) == sorted(
            runtime_files()), "the coordination command changed Batch's download"
    assert "node-ssh" in (tmp_path / "argv").read_text()
    # The application command runs launch in the shared folder with it on PYTHONPATH.
    record = f'pwd > "{tmp_path}/cwd"; echo "$PYTHONPATH" > "{tmp_path}/pythonpath"'
    (tmp_path / "bin").rename(tmp_path / "bin-coordination")
    env["PATH"] = fake_python(tmp_path, record) + ":/usr/bin:/bin"
    result = subprocess.run(["bash", "-c", _script(batch_spec.application_command(spec, job))],
                            cwd=node["AZ_BATCH_TASK_WORKING_DIR"], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "cwd").read_text().strip() == shared
    assert (tmp_path / "pythonpath").read_text().strip() == shared


def test_without_the_scripts_in_the_task_shared_folder_the_job_says_where_it_looked(tmp_path):
    job = batch_spec.job_id(inputs())
    node = batch_node(tmp_path, job)
    shutil.rmtree(Path(node["AZ_BATCH_TASK_SHARED_DIR"]) / "training")
    env = {**os.environ, **node, "PATH": fake_python(tmp_path, "exit 0") + ":/usr/bin:/bin"}
    result = subprocess.run(["bash", "-c", _script(batch_spec.coordination_command(job))], env=env,
                            cwd=node["AZ_BATCH_TASK_WORKING_DIR"], capture_output=True, text=True)
    assert result.returncode == 1 and not (tmp_path / "argv").exists()
    assert result.stderr.strip() == (f"error: the training scripts are not in {node['AZ_BATCH_TASK_SHARED_DIR']}"
                                     "/training, where Batch downloads the common resource files: check the scripts "
                                     "container (pulumi up uploads it)")


HOROVODRUN = """#!/bin/bash
# Stands in for horovodrun, whose own launch the rehearsal runs (tests/devtools/rehearsal): as its ssh launch does, it runs
# a command on every host of -H over the job's ssh (-p), in this working directory with this PYTHONPATH; the
# command says which host it ran on and which `training` it imported there.
set -eu
while [ $# -gt 0 ]; do
  case "$1" in -H) hosts=$2; shift 2;; -p|-np) [ "$1" = -p ] && port=$2; shift 2;; --gloo|--mpi) shift;; *) break;; esac
done
probe="import socket, training; print(socket.gethostname(), training.__file__)"
for host in ${hosts//,/ }; do
  remote="cd $(printf %q "$PWD") && PYTHONPATH=$(printf %q "$PYTHONPATH")"
  ssh -p "$port" "${host%%:*}" "$remote $(printf %q "$(command -v python)") -c $(printf %q "$probe")"
done
"""


@pytest.mark.skipif(bool(job_nodes.unavailable()), reason=job_nodes.unavailable() or "-")
def test_the_jobs_own_commands_import_the_package_and_start_sshd_on_batchs_layout(tmp_path):
    """The task's real coordination and application command lines, run by bash as Batch runs them (split into
    words, no shell of its own) on two nodes with Batch's documented folders (the task-shared folder is the task
    folder, where the scripts were downloaded) and the image's users: every node imports the package and starts
    the job's sshd, and the primary's launch reaches every node over that sshd with the job's key."""
    spec = inputs(nodes=2, processes_per_node=1)
    job = batch_spec.job_id(spec)
    task = batch_spec.task_spec(spec, job)
    task_env = {e["name"]: e["value"] for e in task["environmentSettings"]}
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "horovodrun").write_text(HOROVODRUN)
    (tmp_path / "bin" / "horovodrun").chmod(0o755)
    with job_nodes.pool(tmp_path, 2) as nodes:
        (nodes.export / "imagenet").mkdir()
        (nodes.export / "imagenet" / ".staged").touch()
        wd = task_folders(BATCH_ROOT, job, batch_spec.TASK_ID)["AZ_BATCH_TASK_WORKING_DIR"]
        for node in reversed(nodes.nodes):  # in any order: sshd reads the job's key at each login
            shared = job_nodes.download_scripts(node, job)
            result = job_nodes.run(nodes, node, task["multiInstanceSettings"]["coordinationCommandLine"],
                                   job_nodes.env(nodes, node, job, task_env), wd)
            role = "primary" if node.index == 0 else "node"
            assert result.returncode == 0, result.stderr
            assert f"node-ssh: {role} {node.address}: sshd on port 2222 for hosts" in result.stderr, result.stderr
        primary = nodes.nodes[0]
        environment = job_nodes.env(nodes, primary, job, task_env)
        environment["PATH"] = f"{tmp_path / 'bin'}:{environment['PATH']}"
        result = job_nodes.run(nodes, primary, task["commandLine"], environment, wd)
    assert result.returncode == 0, result.stderr
    assert f"-H {nodes.nodes[0].address}:1,{nodes.nodes[1].address}:1 -p 2222" in result.stderr  # launch's line
    # launched once through horovodrun (train checks the interconnect itself on 2 nodes); the launcher adds its
    # attempt's record line, which `status` reads back (training/cluster/attempts.py)
    from training.cluster.attempts import RECORD_PREFIX

    lines = result.stdout.splitlines()
    assert [line for line in lines if not line.startswith(RECORD_PREFIX)] == [
        f"node0 {shared}/training/__init__.py", f"node1 {shared}/training/__init__.py"]
    assert len([line for line in lines if line.startswith(RECORD_PREFIX)]) == 1


def test_the_data_wait_gives_up_at_its_deadline_with_a_clear_message(tmp_path):
    dataset = tmp_path / "imagenet"
    dataset.mkdir()
    script = batch_spec.wait_for_data(shlex.quote(str(dataset)), 0)
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert result.returncode == batch_spec.DATA_WAIT_EXIT_CODE
    assert "not staged after 0 minutes" in result.stderr and "journalctl -u dltrain-stage" in result.stderr
    (dataset / ".staged").touch()
    assert subprocess.run(["bash", "-c", script], timeout=30).returncode == 0


def test_a_measured_size_passes_its_expected_rate_to_pytorch_runs():
    """training imports no catalog: the size's benchmark figure travels as train's flag (training/efficiency.py)."""
    def train(**changes):
        return shlex.split(" ".join(batch_spec.train_words(inputs(1, **changes), "job")))

    assert train(gpu_sku="Standard_ND96isr_H100_v5")[-2:] == ["--expected-img-per-sec", "5363"]
    assert "--expected-img-per-sec" not in train()  # ND96asr_v4 (A100): not measured
    assert "--expected-img-per-sec" not in train(gpu_sku="Standard_ND96isr_H100_v5", framework="keras")
    mine = ("--expected-img-per-sec", "4000")
    assert train(gpu_sku="Standard_ND96isr_H100_v5", train_args=mine)[-2:] == list(mine)  # the user's wins
