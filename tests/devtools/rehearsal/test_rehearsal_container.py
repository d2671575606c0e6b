"""The rehearsal's Batch job inside the PyTorch image (`rehearse --container`, devtools/rehearsal/containers.py): a
real Docker engine, the image built from its Dockerfile on the stand-in base, each node's coordination command and
the primary's application command in a container of their own composed as Batch composes container tasks, on the
nodes' own network namespaces; horovodrun across the two nodes' containers over the job's sshd, the ranks train and
export, the model comes back with `infra download`. Minutes and root: `make test-containers`, not `make test`.

Without `node-ssh --client-only` in the application command (its container has no ~/.ssh/config of the coordination
command's) the launch fails with "Permission denied (publickey)"; with launch's old rule (mpi wherever mpirun is
installed) it runs `horovodrun --mpi` against a Horovod without MPI: both were met here first."""
from pathlib import Path

import pytest

from devtools import docker_engine
from tests.devtools.rehearsal.rehearsal_runs import FAST, WHY_NOT, rehearse

UNAVAILABLE = docker_engine.unavailable() or WHY_NOT
pytestmark = pytest.mark.skipif(bool(UNAVAILABLE), reason=UNAVAILABLE or "-")


def engine_processes() -> list[str]:
    """Processes of any engine on the kept data root (the rehearsal's): none may outlive it."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "dockerd" in cmdline and str(docker_engine.CACHE / "data") in cmdline:
                found.append(f"{proc.name}: {cmdline[:120]}")
    return found


def test_the_job_runs_in_the_image_on_two_nodes_and_the_model_comes_back(tmp_path):
    work = tmp_path / "work"
    result = rehearse("--container", "--nodes", "2", "--framework", "pytorch", f"--args={FAST}", "--work", str(work),
                      timeout=1800)
    print(result.stdout[-6000:])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    out = result.stdout
    assert "container: images/pytorch.Dockerfile built on the stand-in base with Horovod --ops gloo" in out
    assert "task exit code 0, retried 0 time(s)" in out
    assert "ranks: world size 2 on hosts" in out and "rank 0 on node0" in out and "rank 1 on node1" in out
    assert "model.onnx from `outputs` in onnxruntime: logits of shape (2, 4)" in out
    report = out[out.index("Rehearsal report"):]
    container = report[report.index("  container:"):report.index("  not rehearsed:")]
    assert "ran in dltrain-pytorch:rehearsal, one container per command" in container
    assert "left out here: --ulimit memlock=-1" in container or "left out here: nothing" in container
    assert "the container: commands run in the local training environment" not in report  # rehearsed now
    # The commands ran in the image: the launch is the image's horovodrun, over Gloo (its Horovod has no MPI), the
    # job's sshd reached node1's container, and the primary wrote its client config in its own container first.
    job = next((work / "results").iterdir())
    stderr = (job / "logs" / "stderr.txt").read_text()
    assert "node-ssh: primary" in stderr and "ssh client config for hosts" in stderr
    assert "launch: 2 ranks on 2 host(s): /opt/venv/bin/horovodrun --gloo -np 2" in stderr
    assert (job / "run" / "model.onnx").is_file()
    # Nothing of the engine is left: no dockerd on the kept data root, no container of this rehearsal's.
    assert engine_processes() == []
    with docker_engine.running(data_root=docker_engine.CACHE / "data") as engine:
        names = engine.docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    assert [name for name in names if name.startswith("dlr")] == []



def test_the_azure_ml_jobs_command_runs_in_the_same_image(tmp_path):
    """The Azure ML backend's command (infra/backends/azureml/job.py: one `python -m training train` per process,
    Azure ML's `${{inputs.data}}` and `${{outputs.run}}` replaced by the folders it mounts) in the image as the
    container rehearsal builds it: the image's own environment and PYTHONPATH, the job's code snapshot as the
    working directory (the SDK's examples run `python main.py` from `code`), the job's environment variables and
    shared memory size, and no Batch folder. One process (Azure ML's mpirun is not played)."""
    from devtools.rehearsal.containers import rehearsal_image
    from infra.backends.azureml import job
    from tests.devtools.rehearsal.rehearsal_runs import pets

    inputs = job.AmlJobInputs(
        stack="dev", framework="pytorch", nodes=1, gpu_sku="Standard_NC24ads_A100_v4", environment="e:1",
        compute="gpu", data_mode="download", max_hours=1, identity_client_id="client",
        train_args=("--image-size", "32", "--batch-size", "4", "--steps", "2", "--workers", "1", "--log-every", "1"))
    data, run = pets(tmp_path / "data"), tmp_path / "run"
    run.mkdir()
    code = job.code_snapshot(tmp_path / "code")
    command = job.command_line(inputs).replace("${{inputs.data}}", "/mnt/azureml/data").replace(
        "${{outputs.run}}", "/mnt/azureml/run")
    env = [word for name, value in job.environment_variables(inputs).items() for word in ("-e", f"{name}={value}")]
    with docker_engine.running(data_root=docker_engine.CACHE / "data") as engine:
        image = rehearsal_image(engine, "pytorch")
        # Its name resolves, as a VM's does (Horovod's Gloo segfaults in hvd.init() when it does not).
        ran = engine.docker("run", "--rm", "--network", "none", "--hostname", "node0", "--add-host",
                            "node0:127.0.0.1", "--shm-size", job.SHM_SIZE, *env,
                            "-v", f"{data}:/mnt/azureml/data:ro", "-v", f"{run}:/mnt/azureml/run", "-v",
                            f"{code}:/mnt/azureml/code:ro", "-w", "/mnt/azureml/code", image, "/bin/bash", "-c",
                            command, check=False, timeout=600)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "done: step 2" in ran.stdout, ran.stdout[-3000:]
    assert (run / "model.onnx").is_file() and (run / "summary.json").is_file()
