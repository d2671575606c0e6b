"""README's local path leaves nothing behind for git, and `--mlflow` in an environment without MLflow's client names
the exact install at once (training/tracking.py)."""
import subprocess
import sys

import pytest

from infra import REPO_ROOT
from training import tracking
from training.config import parse_args
from training.errors import UsageError


@pytest.mark.parametrize("path", [".venv-local/bin/python", ".venv-mlflow/bin/mlflow", "run/model.onnx",
                                  "results/train-dev-1/stdout.txt"])
def test_what_readme_creates_is_ignored_by_git(path):
    result = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO_ROOT)
    assert result.returncode == 0, f"{path} is not in .gitignore"


def test_a_source_folder_named_run_is_not_ignored():
    nested = "/".join(("training", "run", "x.py"))  # a folder named run inside the source: not the run's output
    ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", nested], cwd=REPO_ROOT)
    assert ignored.returncode == 1


def test_mlflow_missing_names_the_pinned_install_for_this_python(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    pin = tracking.client_pin()
    assert pin.startswith("mlflow-skinny==") and pin in (REPO_ROOT / "training/requirements-tf.txt").read_text()
    with pytest.raises(UsageError) as refused:
        tracking.require_client(True)
    assert f"`{sys.executable} -m pip install {pin}`" in str(refused.value) and "\n" not in str(refused.value)
    tracking.require_client(False)  # without --mlflow nothing is asked

    from training import runner

    cfg = parse_args(["--output-dir", str(tmp_path / "run"), "--mlflow", "--steps", "1"])
    with pytest.raises(UsageError, match="--mlflow: MLflow's client is not installed"):
        runner.run(cfg, lambda c: pytest.fail("the model was built before the refusal"))
    assert not (tmp_path / "run").exists()  # nothing written


def test_the_cpu_install_is_the_local_pins_from_pytorchs_cpu_index():
    lines = [line.strip() for line in (REPO_ROOT / "training/requirements-local-cpu.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    # nothing pinned twice: the versions are requirements-local.txt's (which test_missing_framework.py holds to the
    # image's), only the index differs
    assert lines == ["--extra-index-url https://download.pytorch.org/whl/cpu", "-r requirements-local.txt"]
    assert "torch==2.14.0" in (REPO_ROOT / "training/requirements-local.txt").read_text().splitlines()
