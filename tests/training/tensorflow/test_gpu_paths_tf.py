"""The TensorFlow paths that only run on GPU nodes, made to run here with the GPU-shaped harness (TensorFlow told
its node has 2 GPUs, the binding recorded, the compute on CPU): every rank bound to its own GPU by train and by the
interconnect check, a run at the GPU defaults (bf16, export on, the in-run check) that exports, and the precision a
GPU without bf16 gets."""
import json
import subprocess

import pytest

from infra import REPO_ROOT
from tests.training.gpu_harness import harness_env, recorded
from tests.training.tensorflow.conftest import TF, TINY, env

tf = pytest.importorskip("tensorflow")

from training.tensorflow.device import bind_gpu, has_bf16  # noqa: E402
from training.errors import UsageError  # noqa: E402


def _ranks(tmp_path, *args, gpus=2, capability="9.0"):
    record = tmp_path / "record"
    result = subprocess.run([TF.horovodrun, "--gloo", "-np", "2", "-H", "localhost:2", TF.python, "-m", "training",
                             *map(str, args)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                            env=harness_env(env(), record, gpus=gpus, capability=capability))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return record, result


def _bound(record):
    return sorted(index for b in recorded(record, "tf.config.set_visible_devices") for index in b["index"])


def test_the_interconnect_check_binds_each_rank_to_its_own_gpu(tmp_path):
    """NCCL refuses two ranks on one GPU, and TensorFlow puts a rank's ops on the first visible GPU: the check must
    bind as training does, or every multi-node TensorFlow/Keras job dies in it."""
    record, _ = _ranks(tmp_path, "interconnect-check", "--framework", "keras", "--size-mb", "0.1", "--iters", "1")
    assert _bound(record) == [0, 1]
    assert sorted(g["index"] for g in recorded(record, "tf.config.experimental.set_memory_growth")) == [0, 1]


def test_ranks_train_at_the_gpu_defaults_check_the_interconnect_and_export(tmp_path):
    """What a TensorFlow job on H100 nodes runs: --precision auto is bf16 there, export is on, and a multi-node job
    checks its interconnect inside train. The model is exported (SavedModel and ONNX, in float32) and summary.json is
    written."""
    out = tmp_path / "run"
    record, result = _ranks(tmp_path, "train", "--framework", "tensorflow", "--data", "synthetic", "--steps", "2",
                            *TINY, "--interconnect-check", "--output-dir", out)
    assert _bound(record) == [0, 1]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["precision"] == "bf16" and summary["device"] == "gpu" and summary["world_size"] == 2
    assert summary["interconnect_ranks"] == 2 and "export_error" not in summary, result.stderr[-2000:]
    assert (out / "model.onnx").exists() and (out / "saved_model").is_dir()


@pytest.mark.parametrize("capability,bf16", [("9.0", True), ("8.0", True), ("7.5", False), ("7.0", False)])
def test_bf16_only_on_gpus_that_have_it(monkeypatch, capability, bf16):
    """A T4 (7.5) or V100 (7.0) has no bf16 units: auto precision is fp16 there (training.config.auto_precision)."""
    device = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    monkeypatch.setattr(tf.config, "get_visible_devices", lambda device_type=None: [device])
    monkeypatch.setattr(tf.config.experimental, "get_device_details",
                        lambda d: {"compute_capability": tuple(map(int, capability.split(".")))})
    assert has_bf16(tf) is bf16


def test_more_ranks_than_gpus_is_refused_in_one_line(monkeypatch):
    devices = [tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")]
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda device_type=None: devices)
    with pytest.raises(UsageError, match="2 ranks on this node but 1 GPU"):
        bind_gpu(tf, 1, 2)


def test_a_model_that_cannot_be_exported_to_onnx_says_why_and_keeps_its_saved_model(tmp_path):
    """As PyTorch's export: no model.onnx for non-finite logits, and the reason reaches summary.json (the runner
    records `export_error`), not only a warning; the SavedModel stands."""
    from tests.training.tensorflow.test_export_tf import small_model
    from training.tensorflow.export import export_checked

    model = small_model(scale=0.05)
    head = model.layers[-1]
    head.kernel.assign(tf.fill(head.kernel.shape, float("nan")))  # what a diverged run leaves
    exported = export_checked(tf, model, tmp_path, image_size=8)
    assert "non-finite logits" in exported["export_error"] and "onnx" not in exported
    assert (tmp_path / "saved_model").is_dir() and not list(tmp_path.glob("model.onnx*"))
