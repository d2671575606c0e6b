"""TensorFlow/Keras tests run the real thing in .venv-tf: horovodrun with 2 Gloo ranks on CPU."""
import os
import subprocess

import pytest

from tests.conftest import REPO_ROOT

VENV = REPO_ROOT / ".venv-tf" / "bin"
PYTHON, HOROVODRUN = str(VENV / "python"), str(VENV / "horovodrun")
TINY = ["--image-size", "32", "--batch-size", "4", "--workers", "1", "--log-every", "2"]


def env():
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONWARNINGS": "ignore", "TF_CPP_MIN_LOG_LEVEL": "3"}


def training(*args, timeout=300, check=True):
    result = subprocess.run([PYTHON, "-m", "training", *map(str, args)], cwd=REPO_ROOT, env=env(),
                            capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def horovod(*args, np=2, timeout=400, script=None):
    command = [HOROVODRUN, "--gloo", "-np", str(np), "-H", f"localhost:{np}", PYTHON]
    command += [str(script), *map(str, args)] if script else ["-m", "training", *map(str, args)]
    result = subprocess.run(command, cwd=REPO_ROOT, env=env(), capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    """4 learnable classes of real JPEG files, 16 train + 4 val each, 40 px."""
    root = tmp_path_factory.mktemp("dataset")
    training("synth-data", "--out", root, "--classes", "4", "--per-class", "16", "--val-per-class", "4",
             "--size", "40")
    return root
