"""The rehearsal's Batch job inside the PyTorch image (`rehearse --container`, devtools/rehearsal/containers.py): a
real Docker engine, the image built from its Dockerfile on the stand-in base (Horovod with Open MPI and Gloo, CPU
operations: images/build_horovod.sh --ops mpi), each node's coordination command and the primary's application
command in a container of their own composed as Batch composes container tasks, on the nodes' own network namespaces;
`horovodrun --mpi` across the two nodes' containers, 2 ranks a node (world size 4): mpirun's daemon started in node 1's
container over the job's sshd; the ranks train and export, the model comes back with `infra download`. Then the same
under faults: node 1's sshd gone when the job starts, then a rank killed mid-run; each ends its attempt with one line
naming node 1 as a node fault, and Batch's retry finishes the run. The Keras job the same way in the TensorFlow
image (world size 4 under `horovodrun --mpi`). Minutes and root: `make test-containers`.

Without `node-ssh --client-only` in the application command (its container has no ~/.ssh/config of the coordination
command's) the launch fails with "Permission denied (publickey)"; with launch's old rule (mpi wherever mpirun is
installed) it runs `horovodrun --mpi` against a Horovod without MPI: both were met here first."""
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from devtools import docker_engine
from training import frameworks
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


def rehearsed_in_image(framework: str, train_args: str, work: Path) -> str:
    """`rehearse --container` on 2 nodes of 2 ranks; its output, once the run's common promises are checked: the image
    built with Horovod --ops mpi, one attempt, ranks 0-1 on node0 and 2-3 on node1, the ONNX model back."""
    dockerfile = frameworks.FRAMEWORKS[framework].image.dockerfile
    result = rehearse("--container", "--nodes", "2", "--processes-per-node", "2", "--framework", framework,
                      f"--args={train_args}", "--work", str(work), timeout=2400)
    print(result.stdout[-6000:])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    out = result.stdout
    assert f"container: {dockerfile} built on the stand-in base with Horovod --ops mpi" in out
    assert "task exit code 0, retried 0 time(s)" in out
    assert "rank 0 on node0" in out and "rank 1 on node0" in out and "rank 2 on node1" in out and "rank 3 on node1" in out
    assert "model.onnx from `outputs` in onnxruntime: logits of shape (2, 4)" in out
    return out


def test_ddp_runs_under_mpirun_in_the_image_on_two_nodes_of_two_ranks_and_the_model_comes_back(tmp_path):
    work = tmp_path / "work"
    out = rehearsed_in_image("pytorch", f"{FAST} --dist ddp", work)
    assert "ranks: world size 4 on hosts" in out
    report = out[out.index("Rehearsal report"):]
    container = report[report.index("  container:"):report.index("  not rehearsed:")]
    assert "ran in dltrain-pytorch:rehearsal, one container per command" in container
    assert "left out here: --ulimit memlock=-1" in container or "left out here: nothing" in container
    assert "the ranks ran under horovodrun --mpi: 4 ranks on 2 nodes (mpirun started by horovodrun" in container
    assert "the container: commands run in the local training environment" not in report  # rehearsed now
    assert "mpirun: across nodes Horovod starts the remote ranks" not in report  # rehearsed now
    # The commands ran in the image: the launch is the image's horovodrun with MPI (its Horovod has it), the job's
    # sshd reached node1's container, and the primary wrote its client config in its own container first.
    job = next((work / "results").iterdir())
    stderr = (job / "logs" / "stderr.txt").read_text()
    assert "node-ssh: primary" in stderr and "ssh client config for hosts" in stderr
    assert "launch: 4 ranks on 2 host(s): /opt/venv/bin/horovodrun --mpi -np 4 -H " in stderr
    assert (job / "run" / "model.onnx").is_file()
    # Nothing of the engine is left: no dockerd on the kept data root, no container of this rehearsal's.
    assert engine_processes() == []
    with docker_engine.running(data_root=docker_engine.CACHE / "data") as engine:
        names = engine.docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    assert [name for name in names if name.startswith("dlr")] == []



# Keras: 4 steps an epoch at world size 4 (160 images, global batch 32), validated each epoch; 12 steps are 3 epochs.
KERAS_FAST = "--num-classes 4 --image-size 32 --batch-size 8 --steps 12 --log-every 4 --checkpoint-every 6 --workers 1"


def test_keras_runs_under_mpirun_in_the_tensorflow_image_on_two_nodes_of_two_ranks_and_the_model_comes_back(tmp_path):
    """The TensorFlow image (its Horovod step with `--ops mpi` on the stand-in), `horovodrun --mpi` across the two
    nodes' containers, 2 ranks a node: Horovod's all-reduces go through Open MPI (TCP on the nodes' veth), the ranks
    train and checkpoint, and the SavedModel's ONNX comes back. Rank 0's output in stdout.txt is lines: mpirun gives
    each rank a pseudo-terminal, where the progress bar once drew thousands of erase codes into one line."""
    work = tmp_path / "work"
    out = rehearsed_in_image("keras", KERAS_FAST, work)
    report = out[out.index("Rehearsal report"):]
    assert "  throughput: " in report and " img/s (CPU, MPI over TCP)" in report
    assert "the ranks ran under horovodrun --mpi: 4 ranks on 2 nodes (mpirun started by horovodrun" in report
    assert "ran in dltrain-tensorflow:rehearsal, one container per command" in report
    job = next((work / "results").iterdir())
    stderr = (job / "logs" / "stderr.txt").read_text()
    stdout = (job / "logs" / "stdout.txt").read_text()
    assert "launch: 4 ranks on 2 host(s): /opt/venv/bin/horovodrun --mpi -np 4 -H " in stderr
    assert "\x1b[2K" not in stdout and "\r" not in stdout, stdout[:2000]
    assert "training ResNet50 (keras, horovod, 4 worker(s), cpu): 12 steps" in stdout
    assert (job / "run" / "model.onnx").is_file() and (job / "run" / "summary.json").is_file()
    assert engine_processes() == []


def _node_processes(pool, node) -> dict[int, tuple[int, list[bytes]]]:
    """The node's processes (its network namespace's, its containers' included): pid -> (parent pid, argv)."""
    found = {}
    for pid in pool._pids(node):
        try:
            words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            parent = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        found[pid] = (parent, words)
    return found


def _ranks(pool, node):
    """The node's ranks: `training train` processes whose parent is not one (a rank's loader workers are)."""
    procs = _node_processes(pool, node)
    train = {pid for pid, (_, words) in procs.items() if b"training" in words and b"train" in words}
    return sorted(pid for pid in train if procs[pid][0] not in train)


def test_under_mpirun_a_nodes_sshd_gone_and_a_rank_killed_each_end_with_a_line_naming_the_node(tmp_path, capsys):
    """--dist horovod, world size 4. Attempt 1: node 1's sshd is killed as its coordination command returns (Batch
    starts the application command only after every node's has), so the launch finds it gone. Attempt 2 (Batch's retry starts the job's sshd again): a rank of node 1 is killed
    (SIGKILL) after the checkpoint of step 10; mpirun ends the others at once, before any rank can write a fault
    record, and names the rank. Each attempt ends with one line naming node 1 as a node fault; attempt 3 finishes."""
    from devtools.rehearsal.run import rehearse as run_rehearsal
    from training.cluster import attempts

    faults = {}

    def break_node_one(service, pool, job):
        node = pool.nodes[1]
        checkpoints = pool.export / "runs" / job / "checkpoints"
        run = service._run

        def run_then_stop_sshd(job_id, on, command_line, *args, **kwargs):
            code = run(job_id, on, command_line, *args, **kwargs)
            coordination = " node-ssh " in command_line and " -m training launch " not in command_line
            if job_id == job and on.index == 1 and coordination and "sshd" not in faults:
                # the listener: "/usr/sbin/sshd -f ..." or, retitled by OpenSSH 9, "sshd: ... [listener] ..."
                sshd = [pid for pid, (_, words) in _node_processes(pool, node).items()
                        if b"sshd" in words[0] and b"@" not in words[0]]
                for pid in sshd:
                    os.kill(pid, signal.SIGKILL)
                faults["sshd"] = len(sshd)
            return code
        service._run = run_then_stop_sshd  # the job's first coordination command on node 1, then its sshd gone

        def watch():
            deadline = time.monotonic() + 900
            while not (checkpoints / "ckpt-00000010.pt").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            ranks = _ranks(pool, node)
            if ranks:
                os.kill(ranks[0], signal.SIGKILL)
            faults["rank"] = (time.monotonic(), len(ranks))
        threading.Thread(target=watch, daemon=True).start()

    result = run_rehearsal("dev", 2, "pytorch", FAST + " --no-export", tmp_path / "work", processes_per_node=2,
                           container=True, fault=break_node_one)
    out = capsys.readouterr().out
    print(out[-6000:])
    assert faults.get("sshd") == 1, faults  # the job's sshd on node 1, the one process listening
    assert faults.get("rank", (0, 0))[1] == 2, faults  # both of node 1's ranks were running when one was killed
    assert result.exit_code == 0 and result.retries == 2 and result.world_size == 4, out[-4000:]
    node1 = result.hosts[1].partition(":")[0]
    stdout = (result.downloaded / "logs" / "stdout.txt").read_text()
    stderr = (result.downloaded / "logs" / "stderr.txt").read_text()
    records = attempts.read_lines(stdout)
    assert [(a["kind"], a["reason"], a["blamed_hosts"]) for a in records[-3:]] == [
        ("node", "host unreachable", [node1]), ("node", "rank killed", [node1]), ("ok", "done", [])], records
    lines = [line for line in stderr.splitlines() if line.startswith("fault: ")]
    assert len(lines) == 2 and all(line.startswith(f"fault: node {node1}: ") for line in lines), lines
    assert re.search(r": rank [23] ended by signal 9 \(Killed\) \(mpirun: on node ", lines[1]), lines
    assert stderr.count("/opt/venv/bin/horovodrun --mpi -np 4 -H ") == 3


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
