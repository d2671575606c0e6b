"""The same flags through PyTorch, TensorFlow and Keras give the same run: steps, the LR at every step, when
checkpoints are written, the fields of summary.json. Each framework runs for real in its own environment
(.venv-torch, .venv-tf), one worker on CPU, on the same folder of real JPEG files."""
import json
import os
import subprocess

import pytest

from infra import REPO_ROOT
from training import frameworks

ENVS = {f.name: f.image.venv for f in frameworks.FRAMEWORKS.values()}  # every framework of the table
FLAGS = ["--num-classes", "4", "--image-size", "32", "--batch-size", "4", "--workers", "1", "--epochs", "0.5",
         "--log-every", "2", "--checkpoint-every", "3", "--warmup-steps", "2", "--base-lr", "0.05", "--no-export"]


def python_of(framework):
    python = REPO_ROOT / ENVS[framework] / "bin" / "python"
    if not python.exists():
        pytest.skip(f"{ENVS[framework]} is not built (make setup)")
    return str(python)


def run(framework, *args):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONWARNINGS": "ignore"}
    result = subprocess.run([python_of(framework), *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("semantics")
    # 4 classes x 15 images: 60 / 4 = 15 steps an epoch, so --epochs 0.5 is 7.5 steps: 8 in every framework.
    run("pytorch", "-m", "devtools", "synth-data", "--out", root / "data", "--classes", "4", "--per-class", "15",
        "--val-per-class", "2", "--size", "40")
    out = {}
    for framework in ENVS:
        run(framework, "-m", "training", "train", "--framework", framework, "--data", root / "data", *FLAGS,
            "--output-dir", root / framework)
        folder = root / framework
        out[framework] = {"metrics": [r for r in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines())
                                      if "loss" in r],  # training records (a validation's has val_loss)
                          "summary": json.loads((folder / "summary.json").read_text()),
                          "checkpoints": sorted(p.name.split(".")[0] for p in (folder / "checkpoints").iterdir()),
                          "report": (folder / "report.png").is_file()}
    return out


def test_the_same_steps_lr_and_cadence_in_every_framework(runs):
    reference = runs["pytorch"]
    assert [m["step"] for m in reference["metrics"]] == [2, 4, 6, 8]
    for framework, got in runs.items():
        assert [m["step"] for m in got["metrics"]] == [m["step"] for m in reference["metrics"]], framework
        assert [m["epoch"] for m in got["metrics"]] == [m["epoch"] for m in reference["metrics"]], framework
        assert [m["lr"] for m in got["metrics"]] == pytest.approx([m["lr"] for m in reference["metrics"]]), framework
        # Every 3 steps and at the end, the last 3 kept.
        assert got["checkpoints"] == ["ckpt-00000003", "ckpt-00000006", "ckpt-00000008"], framework
        assert got["report"], framework


def test_the_same_summary_fields_and_values_in_every_framework(runs):
    keys = set(runs["pytorch"]["summary"])
    for framework, got in runs.items():
        summary = got["summary"]
        assert set(summary) == keys, framework
        assert summary["framework"] == framework and summary["top1"] is not None
        assert (summary["steps"], summary["total_steps"], summary["global_batch"], summary["images_seen"]) == \
            (8, 8, 4, 32), framework
        assert (summary["device"], summary["precision"], summary["distribution"]) == ("cpu", "fp32", "horovod")
