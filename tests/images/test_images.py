"""The training images: lint-clean, and pinned like the local training environments (whether pip resolves the
pins for each image's Python: test_image_pins_resolve.py, `make test-images`)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infra import REPO_ROOT
from training import frameworks

HADOLINT = Path(sys.executable).parent / "hadolint"
DOCKERFILES = sorted((REPO_ROOT / "images").glob("*.Dockerfile"))
# Each image of the frameworks table: its Dockerfile and the requirements file it installs.
IMAGE_PINS = [(Path(image.dockerfile).name, image.requirements) for image in frameworks.images()]


def test_there_is_one_dockerfile_per_framework():
    assert [p.name for p in DOCKERFILES] == sorted(dockerfile for dockerfile, _ in IMAGE_PINS)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_is_clean_under_hadolint(dockerfile):
    result = subprocess.run([str(HADOLINT), str(dockerfile)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile,requirements", IMAGE_PINS)
def test_images_install_the_pinned_requirements_and_build_horovod_with_nccl(dockerfile, requirements):
    text = (REPO_ROOT / "images" / dockerfile).read_text()
    # The stager's pins too: with nfsKind azure-files the job stages the data inside this image.
    assert (f"pip install --no-cache-dir -r {requirements} -r training/requirements-stage.txt \\\n"
            "    -r training/requirements-azureml.txt") in text
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


# Each Ubuntu release the images build on: its python3 and its glibc (which manylinux wheels it can run).
UBUNTU = {"22.04": ("3.10", 35), "24.04": ("3.12", 39)}


def image_python(text: str) -> tuple[str, int]:
    """The Python an image's venv runs (a python3.X package it installs, or its Ubuntu's python3) and its glibc."""
    # The base: FROM's image, or the default of the BASE_IMAGE argument FROM names.
    ubuntu = re.search(r"^(?:FROM|ARG BASE_IMAGE=) ?\S+-ubuntu(\d\d\.\d\d)\b", text, re.M).group(1)
    default, glibc = UBUNTU[ubuntu]
    venv = re.search(r"^RUN (python3(?:\.\d+)?) -m venv", text, re.M).group(1)
    version = venv[len("python"):] if venv != "python3" else default
    if venv != "python3":
        assert f"{venv}-venv" in text, f"{venv} is used but its -venv package is not installed"
    return version, glibc


def test_the_image_python_is_read_from_the_dockerfile():
    assert image_python("FROM nvidia/cuda:12.2.2-cudnn8-devel-ubuntu22.04\nRUN python3 -m venv /v\n") == ("3.10", 35)
    assert image_python("FROM x-ubuntu22.04\nRUN apt-get install python3.11-venv\nRUN python3.11 -m venv /v\n") == \
        ("3.11", 35)
    assert image_python("ARG BASE_IMAGE=nvidia/cuda:13.0.0-cudnn-devel-ubuntu24.04\nFROM ${BASE_IMAGE} AS system\n"
                        "RUN python3 -m venv /v\n") == ("3.12", 39)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_package_imports_from_any_directory(dockerfile):
    assert "ENV PYTHONPATH=/opt/dltrain" in dockerfile.read_text()  # the job's copy comes first on its PYTHONPATH
