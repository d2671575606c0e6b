"""`python -m training train` in a Python without the framework asked for (the deployer's .venv without torch, keras
asked in the PyTorch environment): one line naming the environment to use and the install, never a traceback."""
import subprocess
import sys

import pytest

from infra import REPO_ROOT
from training.__main__ import missing_for_training

# `python -m training ARGV` as a Python that lacks MODULE would run it (an import of it raises ModuleNotFoundError).
WITHOUT = "import runpy, sys; sys.modules[sys.argv[1]] = None; sys.argv = ['training', *sys.argv[2:]]; " \
          "runpy.run_module('training', run_name='__main__', alter_sys=True)"


@pytest.mark.parametrize("framework,module,venv", [("pytorch", "torch", ".venv-torch"),
                                                   ("keras", "tensorflow", ".venv-tf")])
def test_train_without_the_frameworks_package_is_one_line_naming_its_environment(framework, module, venv, tmp_path):
    result = subprocess.run([sys.executable, "-c", WITHOUT, module, "train", "--framework", framework,
                             "--output-dir", str(tmp_path / "run")], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and result.stdout == "", result
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"error: --framework {framework} trains in {venv}, and this Python")
    assert f"has no module '{module}': run {venv}/bin/python -m training train" in result.stderr
    assert ("pip install -r training/requirements-local.txt" in result.stderr) == (framework == "pytorch")
    assert not (tmp_path / "run").exists()  # nothing written


def test_a_missing_horovod_names_make_setup_and_the_one_process_path_and_other_modules_stay_bugs():
    line = missing_for_training("keras", "horovod.tensorflow", "/usr/bin/python3")
    assert "needs Horovod, which `make setup` builds into .venv-tf" in line and "--framework pytorch" in line
    assert missing_for_training("pytorch", "yaml_missing_by_bug", "py") is None


def test_the_light_environment_pins_what_the_pytorch_image_pins():
    def pins(path):
        lines = (REPO_ROOT / path).read_text().splitlines()
        return dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))

    local, image = pins("training/requirements-local.txt"), pins("training/requirements-torch.txt")
    assert local and all(image[name] == version for name, version in local.items() if name in image)
    assert not any(name.startswith(("horovod", "nvidia-dali")) for name in local)  # nothing built, nothing for GPUs only
