"""Both training images built from their own Dockerfiles by a real Docker engine (devtools/docker_engine.py), on
the local stand-in base: `make test-containers` (minutes; root).

The real bases (nvidia/cuda ...-ubuntu24.04 for PyTorch, ...-ubuntu22.04 for TensorFlow) cannot be fetched here, so
BASE_IMAGE is the stand-in (Debian bookworm minbase). What differs from the real build:
- no CUDA toolkit, cuDNN or NCCL in the base: the last stage (Horovod built with NCCL, then the package and the
  topology files) needs them, so the build stops at `--target python`, after the apt packages, the venv and the
  pip install of the image's pins (the CUDA wheels pip pulls for torch / tensorflow[and-cuda] included);
- the distribution: Debian 12's packages of the same names (Open MPI 4.1, UCX 1.13, rdma-core 44) in place of
  Ubuntu's;
- Python: Debian 12's 3.11 for both images (the PyTorch image has Ubuntu 24.04's 3.12; the TensorFlow image
  installs python3.11, as here);
- the base's only addition: this machine's CA bundle and pip's `cert` setting (pip reaches PyPI through this
  machine's TLS interception).
Each build's wall time is printed; the engine's data root is kept in .cache/docker/data, so a repeated run reuses
the layers (and the base) whose inputs did not change.
"""
import os
import shlex
import signal
import shutil
import time
from pathlib import Path

import pytest

from devtools import batch_container, docker_engine
from devtools.rehearsal.batch import batch_env
from infra import REPO_ROOT
from infra.backends.batch import spec as batch_spec
from tests.images.test_batch_container import job_inputs
from training import frameworks

UNAVAILABLE = docker_engine.unavailable()
pytestmark = pytest.mark.skipif(bool(UNAVAILABLE), reason=UNAVAILABLE or "-")
# Each image: its Dockerfile and a check of the installed pins in the built stage (the package that defines it).
IMAGES = {image.name: image for image in frameworks.images()}
PROBES = {"pytorch": "import torch, torchvision, onnxruntime, azure.storage.blob; print(torch.__version__)",
          "tensorflow": "import tensorflow as tf, onnxruntime, azure.storage.blob; print(tf.__version__)"}


@pytest.fixture(scope="module")
def engine():
    # SIGTERM (a CI timeout) ends the session as Ctrl-C does, so pytest runs this teardown and the engine stops,
    # rather than failing one test and building on (docker_engine.running keeps a handler it finds)
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with docker_engine.running(data_root=docker_engine.CACHE / "data") as started:
            docker_engine.base_image(started)
            yield started
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("name", sorted(PROBES))
def test_the_dockerfile_builds_on_the_stand_in_up_to_horovod(engine, name):
    image = IMAGES[name]
    tag = f"dltrain-{name}:stand-in"
    start = time.monotonic()
    docker_engine.build(engine, REPO_ROOT / image.dockerfile, tag, target="python",
                        build_args={"BASE_IMAGE": docker_engine.BASE_IMAGE})
    print(f"{image.dockerfile} built to --target python on {docker_engine.BASE_IMAGE} in "
          f"{time.monotonic() - start:.0f} s")
    pins = [line.split("==") for line in (REPO_ROOT / image.requirements).read_text().splitlines()
            if "==" in line and not line.startswith("#")]
    frozen = engine.docker("run", "--rm", "--network", "none", tag, "pip", "freeze", timeout=120).stdout
    installed = {line.split("==")[0].lower(): line.split("==")[1] for line in frozen.splitlines() if "==" in line}
    for package, version in pins:
        package = package.split("[")[0].lower()
        assert installed.get(package, "").split("+")[0] == version, f"{package}=={version}: {installed.get(package)}"
    probe = engine.docker("run", "--rm", "--network", "none", tag, "python", "-c", PROBES[name], timeout=300)
    assert probe.stdout.strip(), probe.stderr


def test_the_jobs_ssh_works_inside_the_built_image_when_home_is_elsewhere(engine, tmp_path):
    """The job's coordination command (spec.coordination_command: node-ssh with the scripts Batch downloads into the
    task-shared folder) in the PyTorch image as built above, in a container composed as Batch composes the task's
    (devtools/batch_container.py, the sandbox rule applied), with HOME set to another folder: the image's sshd starts
    (its privilege-separation user, /run/sshd), and ssh in the same container reaches it with the job's port and key
    from the config node-ssh wrote. The commands run by `docker exec` in one container that outlives them; whether
    Batch runs a multi-instance task's two commands so, the docs do not say (batch_container's docstring)."""
    image = "dltrain-pytorch:stand-in"
    if engine.docker("image", "inspect", image, check=False).returncode:
        pytest.skip("needs the PyTorch image built by test_the_dockerfile_builds_on_the_stand_in_up_to_horovod")
    address = "127.61.7.9"  # a loopback address of its own (the job's sshd binds the node's address, port 2222)
    task = batch_spec.task_spec(job_inputs(), "j")
    env = {**batch_env(tmp_path / "batch", [address, "192.0.2.10"], 0, "j", "train"),
           "HOME": str(tmp_path / "batch" / "elsewhere")}
    batch_container.batch_folders_exist(env)
    shutil.copytree(REPO_ROOT / "training", Path(env["AZ_BATCH_TASK_SHARED_DIR"]) / "training",
                    ignore=shutil.ignore_patterns("__pycache__"))  # what Batch's commonResourceFiles download
    kept, _ = batch_container.sandbox_options(task["containerSettings"]["containerRunOptions"])
    held = {**batch_container.local_task(task, kept), "commandLine": "sleep 300"}
    name = f"train-ssh-{os.getpid()}"
    engine.docker("run", "-d", "--rm", *batch_container.docker_create_args(held, env, image, name), timeout=60)
    try:
        def in_task(command_line):
            return engine.docker("exec", "-w", env["AZ_BATCH_TASK_WORKING_DIR"], name, *shlex.split(command_line),
                                 check=False, timeout=120)

        started = in_task(batch_spec.coordination_command("j"))
        assert started.returncode == 0, started.stderr
        shown = in_task(f"ssh -G 192.0.2.10")
        assert {"port 2222", "user root"} <= set(shown.stdout.splitlines()), shown.stdout
        logged_in = in_task(f"ssh {address} echo logged in as $(id -un)")  # the job's own sshd, its key only
        assert logged_in.returncode == 0 and logged_in.stdout.strip() == "logged in as root", logged_in.stderr
        # The application command's first step (node-ssh --client-only), in the same container, as when Batch runs
        # both commands in one: it rewrites the same config, and ssh still logs in (the rehearsal plays the other
        # case, a container per command: tests/devtools/rehearsal/test_rehearsal_container.py).
        client = in_task("/bin/bash -c 'cd \"$AZ_BATCH_TASK_SHARED_DIR\" && PYTHONPATH=. python -m training node-ssh "
                         f"--port {batch_spec.SSH_PORT} --keys-dir {batch_spec.keys_dir('j')} --client-only'")
        assert client.returncode == 0 and "ssh client config for hosts" in client.stderr, client.stderr
        again = in_task(f"ssh {address} echo logged in")
        assert again.returncode == 0 and again.stdout.strip() == "logged in", again.stderr
    finally:
        engine.docker("rm", "-f", name, check=False)
