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
import time

import pytest

from devtools import docker_engine
from infra import REPO_ROOT
from training import frameworks

UNAVAILABLE = docker_engine.unavailable()
pytestmark = pytest.mark.skipif(bool(UNAVAILABLE), reason=UNAVAILABLE or "-")
# Each image: its Dockerfile and a check of the installed pins in the built stage (the package that defines it).
IMAGES = {image.name: image for image in frameworks.images()}
PROBES = {"pytorch": "import torch, torchvision, onnxruntime, azure.storage.blob; print(torch.__version__)",
          "tensorflow": "import tensorflow as tf, onnxruntime, azure.storage.blob; print(tf.__version__)"}


@pytest.fixture(scope="module")
def engine():
    with docker_engine.running(data_root=docker_engine.CACHE / "data") as started:
        docker_engine.base_image(started)
        yield started


def test_a_failed_build_names_its_step():
    output = ("Step 1/3 : FROM base\n ---> 1\nStep 2/3 : RUN apt-get install -y nosuchpackage\n"
              "E: Unable to locate package nosuchpackage\n")
    assert docker_engine.failed_step(output) == ("Step 2/3 : RUN apt-get install -y nosuchpackage: "
                                                 "E: Unable to locate package nosuchpackage")


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
