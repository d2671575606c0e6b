"""`python -m training predict` from a Python without onnxruntime (the deployer's and members' .venv): one line
naming the install (training/requirements-predict.txt, at the training images' pin), never a traceback."""
import re
import subprocess
import sys

import pytest

from infra import REPO_ROOT

# `python -m training ARGV` as a Python that lacks MODULE would run it (an import of it raises ModuleNotFoundError).
WITHOUT = "import runpy, sys; sys.modules[sys.argv[1]] = None; sys.argv = ['training', *sys.argv[2:]]; " \
          "runpy.run_module('training', run_name='__main__', alter_sys=True)"


@pytest.mark.parametrize("module", ["onnxruntime", "numpy", "PIL"])
def test_without_what_predict_runs_on_one_line_names_the_install(module, tmp_path):
    result = subprocess.run([sys.executable, "-c", WITHOUT, module, "predict", str(tmp_path / "model.onnx"),
                             str(tmp_path / "photo.jpg")], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == "", result
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: python -m training predict runs the model with onnxruntime")
    assert f"has no module '{module}'" in result.stderr
    assert "pip install -r training/requirements-predict.txt" in result.stderr


def pin(path, package):
    found = re.findall(rf"^{package}==(\S+)$", (REPO_ROOT / path).read_text(), re.MULTILINE)
    assert len(found) == 1, (path, package)
    return found[0]


def test_the_predict_install_is_the_training_images_onnxruntime_and_the_docs_name_it():
    assert pin("training/requirements-predict.txt", "onnxruntime") == pin("training/requirements-torch.txt",
                                                                          "onnxruntime")
    assert pin("training/requirements-predict.txt", "onnxruntime") == pin("training/requirements-tf.txt",
                                                                          "onnxruntime")
    assert "onnxruntime" not in (REPO_ROOT / "requirements.txt").read_text()  # the deployer's stays without it
    jobs = (REPO_ROOT / "docs" / "jobs.md").read_text()
    assert ".venv/bin/pip install -r training/requirements-predict.txt" in jobs
    assert ".venv/bin/python -m training predict results/<job>/run/model.onnx" in jobs
