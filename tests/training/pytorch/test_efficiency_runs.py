"""The efficiency view on real runs (training/efficiency.py): each bound made to HAPPEN with real parts, and the run's
own classification checked, never a wall-clock figure.

- input-bound: one rank reading 4096 px JPEG files with --workers 0, so every batch is decoded (PIL) in the training
  process itself while the model waits; at 32 px the model's step is far cheaper than four such decodes.
- exchange-bound: two Horovod ranks with HOROVOD_CYCLE_TIME at 2 s (Horovod's own setting: its background thread
  negotiates the all-reduces once per cycle), so every step's gradient exchange waits for the next cycle.
"""
import json

import pytest

from tests.training.pytorch.conftest import TINY, TORCH
from tests.training.training_env import TrainingEnv
from training import efficiency, frameworks


@pytest.fixture(scope="module")
def huge_photos(tmp_path_factory):
    """4 JPEG files of 4096 x 4096 px (2 classes): one batch of 4 costs seconds of decode on one core."""
    root = tmp_path_factory.mktemp("huge")
    TORCH.devtools("synth-data", "--out", root, "--classes", "2", "--per-class", "2", "--val-per-class", "0",
                   "--size", "4096")
    return root


def _efficiency(out, stdout):
    summary = json.loads((out / "summary.json").read_text())["efficiency"]
    return summary, efficiency.parse_progress(stdout)  # what `infra status` reads back from the job's stdout


def test_a_loader_decoding_in_the_training_process_is_input_bound(huge_photos, tmp_path):
    out = tmp_path / "run"
    result = TORCH.training("train", "--data", huge_photos, "--num-classes", "2", "--steps", "4", *TINY,
                            "--workers", "0", "--expected-img-per-sec", "5155", "--output-dir", out)
    summary, reading = _efficiency(out, result.stdout)
    assert summary["bound"] == efficiency.INPUT, summary
    assert summary["time_shares"]["data"] >= efficiency.INPUT_BOUND_SHARE
    assert reading.bound.startswith(efficiency.INPUT), result.stdout
    # The size's figure travels as a flag, and a CPU run does not hold itself to a GPU's figure.
    assert summary["expected_img_per_sec_per_worker"] is None and "CPU" in summary["expected_basis"]
    assert reading.expected is None


def test_a_delayed_all_reduce_is_exchange_bound(tmp_path):
    out = tmp_path / "run"
    delayed = TrainingEnv(frameworks.get("pytorch").image.venv, {"HOROVOD_CYCLE_TIME": "2000"})  # ms; a set value wins
    result = delayed.horovod("train", "--data", "synthetic", "--steps", "4", *TINY, "--output-dir", out)
    summary, reading = _efficiency(out, result.stdout)
    assert summary["bound"] == efficiency.EXCHANGE, summary
    assert summary["time_shares"]["exchange"] >= efficiency.EXCHANGE_BOUND_SHARE
    assert summary["time_shares"]["data"] < efficiency.INPUT_BOUND_SHARE  # synthetic batches wait for nothing
    assert reading.bound.startswith(efficiency.EXCHANGE), result.stdout
