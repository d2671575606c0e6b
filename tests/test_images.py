"""The training images: lint-clean, and pinned like the local training environments."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infra.config import REPO_ROOT

HADOLINT = Path(sys.executable).parent / "hadolint"
DOCKERFILES = sorted((REPO_ROOT / "images").glob("*.Dockerfile"))


def test_there_is_one_dockerfile_per_framework():
    assert [p.name for p in DOCKERFILES] == ["pytorch.Dockerfile", "tensorflow.Dockerfile"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_is_clean_under_hadolint(dockerfile):
    result = subprocess.run([str(HADOLINT), str(dockerfile)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile,requirements", [
    ("pytorch.Dockerfile", "training/requirements-torch.txt"),
    ("tensorflow.Dockerfile", "training/requirements-tf-gpu.txt"),
])
def test_images_install_the_pinned_requirements_and_build_horovod_with_nccl(dockerfile, requirements):
    text = (REPO_ROOT / "images" / dockerfile).read_text()
    # The stager's pins too: with nfsKind azure-files the job stages the data inside this image.
    assert f"pip install --no-cache-dir -r {requirements} -r training/requirements-stage.txt" in text
    assert "images/build_horovod.sh" in text and "--ops nccl" in text
    assert "openmpi-bin" in text and "libucx0" in text and "ibverbs-providers" in text
    assert "COPY training/ training/" in text


def _pin(path, package):
    match = re.search(rf"^{re.escape(package)}(\[[^\]]*\])?==(\S+)", (REPO_ROOT / path).read_text(), re.M)
    return match.group(2) if match else None


def test_tensorflow_pins_agree_between_local_and_image():
    assert _pin("training/requirements-tf-cpu.txt", "tensorflow-cpu") == "2.15.1"
    assert _pin("training/requirements-tf-gpu.txt", "tensorflow") == "2.15.1"


def test_torch_pins():
    assert _pin("training/requirements-torch.txt", "torch") == "2.14.0"
    assert _pin("training/requirements-torch.txt", "torchvision") == "0.29.2"


def test_build_script_refuses_bad_options_with_one_line():
    script = REPO_ROOT / "images" / "build_horovod.sh"
    result = subprocess.run(["bash", str(script), "--python", sys.executable, "--framework", "mxnet"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.strip() == \
        "build_horovod: --framework must be pytorch or tensorflow, got 'mxnet'"
    help_text = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True)
    assert help_text.returncode == 0 and "C++20" in help_text.stdout and "--ops" in help_text.stdout
