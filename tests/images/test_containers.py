"""A real Docker engine (devtools/docker_engine.py: Debian's docker.io, unpacked) and the job's containers on it.
Minutes, not seconds (the stand-in base is made once, then cached): `make test-containers`, not `make test`."""
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from devtools import batch_container, docker_engine
from devtools.rehearsal.batch import batch_env
from infra.backends.batch import spec as batch_spec
from tests.images.test_batch_container import job_inputs

UNAVAILABLE = docker_engine.unavailable()
pytestmark = pytest.mark.skipif(bool(UNAVAILABLE), reason=UNAVAILABLE or "-")
REPO_ROOT = Path(__file__).resolve().parents[2]


def leftovers(folder: Path) -> list[str]:
    """What of an engine is still here: its folder, mounts under it, processes naming it."""
    found = [str(folder)] if folder.exists() else []
    found += docker_engine._mounts_under(folder)
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(folder).encode() in (proc / "cmdline").read_bytes():
                    found.append(f"pid {proc.name}")
            except OSError:
                pass
    return found


@pytest.fixture(scope="module")
def engine():
    # SIGTERM (a CI timeout) ends the session as Ctrl-C does, so pytest runs this teardown and the engine stops,
    # rather than failing one test and building on (docker_engine.running keeps a handler it finds)
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with docker_engine.running() as started:
            docker_engine.base_image(started)
            yield started
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_container_runs_on_the_hosts_network_and_ipc(engine):
    ran = engine.docker("run", "--rm", "--network", "host", "--ipc=host", docker_engine.BASE_IMAGE,
                        "sh", "-c", "cat /etc/debian_version && readlink /proc/1/ns/net", timeout=120)
    assert ran.stdout.splitlines()[0].startswith("12."), ran.stdout
    # --network host: the container's network namespace is this machine's own.
    assert ran.stdout.splitlines()[1] == os.readlink("/proc/self/ns/net"), ran.stdout


def test_the_engine_leaves_nothing_behind():
    with docker_engine.running() as started:
        started.docker("run", "-d", "--network", "none", docker_engine.base_image(started), "sleep", "600")
        folder = started.folder
        assert leftovers(folder)
    assert leftovers(folder) == []  # the running container, its shim, mounts and folders: all gone


def test_sigterm_stops_the_engine_and_removes_its_folders():
    script = ("import sys, time\nfrom devtools import docker_engine\n"
              "with docker_engine.running() as e:\n    print(e.folder, flush=True)\n    time.sleep(600)\n")
    process = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    folder = Path(process.stdout.readline().strip())
    assert folder.is_dir() and (folder / "docker.sock").exists()
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 128 + signal.SIGTERM
    assert leftovers(folder) == []


def test_the_jobs_container_runs_with_the_options_the_job_declares(engine, tmp_path):
    """The task the project builds for ND H100 v5 (every option a job declares: host network and IPC, ulimits,
    InfiniBand device, IPC_LOCK, the HPC image's topology files), composed as Batch starts container tasks
    (devtools/batch_container.py), created and run by Docker. What this machine cannot grant is left out by
    batch_container.SANDBOX_RULE, and only that."""
    task = batch_spec.task_spec(job_inputs(), "j")
    root = tmp_path / "batch"
    env = batch_env(root, ["127.0.0.1", "192.0.2.10"], 0, "j", "train")
    batch_container.batch_folders_exist(env)
    kept, left = batch_container.sandbox_options(task["containerSettings"]["containerRunOptions"])
    print(f"{batch_container.SANDBOX_RULE}; left out here: {shlex.join(left) or 'nothing'}")
    assert set(left) <= {"--ulimit", "memlock=-1", "--device=/dev/infiniband", "-v", "/opt/microsoft:/opt/microsoft:ro"}
    local = batch_container.local_task(task, kept)
    created = engine.docker("create", *batch_container.docker_create_args(local, env, docker_engine.BASE_IMAGE,
                                                                          "train-created"), timeout=60)
    inspected = json.loads(engine.docker("inspect", created.stdout.strip()).stdout)[0]
    host = inspected["HostConfig"]
    assert host["NetworkMode"] == "host" and host["IpcMode"] == "host"
    assert {"Name": "stack", "Soft": 67108864, "Hard": 67108864} in host["Ulimits"]
    assert "IPC_LOCK" in host["CapAdd"] and f"{root}:{root}" in host["Binds"]
    assert inspected["Config"]["WorkingDir"] == env["AZ_BATCH_TASK_WORKING_DIR"]
    assert inspected["Path"] == "/bin/bash" and inspected["Args"][0] == "-c"
    # The same container with a trivial command line: it starts, in the task's folder, with the task's variables
    # and the node's network, and writes where the host (Batch's file APIs) sees it.
    probe = {**local, "commandLine": "/bin/bash -c 'pwd; echo $AZURE_CLIENT_ID; readlink /proc/1/ns/net; "
                                     "ulimit -s; echo ran > $AZ_BATCH_TASK_WORKING_DIR/probe'"}
    ran = engine.docker("run", "--rm", *batch_container.docker_create_args(probe, env, docker_engine.BASE_IMAGE,
                                                                           "train-run"), timeout=60)
    assert ran.stdout.splitlines() == [env["AZ_BATCH_TASK_WORKING_DIR"], "client-pull",
                                       os.readlink("/proc/self/ns/net"), "65536"], ran.stdout
    assert (Path(env["AZ_BATCH_TASK_WORKING_DIR"]) / "probe").read_text() == "ran\n"
