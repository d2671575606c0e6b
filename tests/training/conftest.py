"""Training tests run the real thing in .venv-torch: horovodrun with 2 Gloo ranks on CPU, torchrun for DDP."""
import os
import subprocess

import pytest

from tests.conftest import REPO_ROOT

VENV = REPO_ROOT / ".venv-torch" / "bin"
PYTHON, HOROVODRUN, TORCHRUN = str(VENV / "python"), str(VENV / "horovodrun"), str(VENV / "torchrun")
# Small and fast on 2 cores: 32 px images, batch 4 per rank, 1 loader worker.
TINY = ["--image-size", "32", "--batch-size", "4", "--workers", "1", "--log-every", "2", "--no-export"]


def env():
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONWARNINGS": "ignore"}


def training(*args, timeout=300, check=True):
    result = subprocess.run([PYTHON, "-m", "training", *args], cwd=REPO_ROOT, env=env(), capture_output=True,
                            text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def horovod(*args, np=2, timeout=300, script=None):
    command = [HOROVODRUN, "--gloo", "-np", str(np), "-H", f"localhost:{np}", PYTHON]
    command += [str(script), *args] if script else ["-m", "training", *args]
    result = subprocess.run(command, cwd=REPO_ROOT, env=env(), capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    """4 learnable classes of real JPEG files, 16 train + 4 val each, 40 px."""
    root = tmp_path_factory.mktemp("dataset")
    training("synth-data", "--out", str(root), "--classes", "4", "--per-class", "16", "--val-per-class", "4",
             "--size", "40")
    return root
