"""TensorFlow (custom loop) and Keras (fit) with 2 real Horovod ranks on CPU."""
import json
import pickle
import subprocess

import numpy as np
import pytest

from infra import REPO_ROOT
from tests.training.tensorflow.conftest import PYTHON, TINY, env, horovod, training

FRAMEWORKS = ["tensorflow", "keras"]
EXPORTS = "keras"  # the learnable run that also exports (see learnable_runs)
SUMMARY_FIELDS = {"framework", "world_size", "img_per_sec", "img_per_sec_ci95", "img_per_sec_per_worker",
                  "img_per_sec_per_worker_ci95", "images_seen", "wall_time_s", "final_loss", "top1", "steps",
                  "resumed_from_step", "device", "precision", "global_batch"}


@pytest.fixture(scope="module")
def learnable_runs(dataset, tmp_path_factory):
    """Each framework trained once, 2 ranks, on the 4-class JPEG set: framework -> output folder.

    Batch 8 per rank and peak LR 0.002: ResNet50 from scratch at 32 px diverges at 0.0125 with batch 4, in
    PyTorch too on the same batches. 48 steps: after 32 the top-1 on the 16 validation images was still at
    chance on some CPUs (0.25 for both paths, here, with pillow 13 and TF 2.15.1), while at 48 both reach 1.0
    and the loss halves (2.37 -> 1.23, quarter means).

    Only EXPORTS's run exports ResNet50 (SavedModel, tf2onnx, onnxruntime's check: ~34 s of CPU on rank 0): both
    loops hand their Keras model to the same export_checked, whose check test_export_tf.py tests on a small model.
    Keras's is the one kept: its model is the one compiled (with Horovod's optimizer) when it is saved."""
    runs = {}
    for framework in FRAMEWORKS:
        runs[framework] = out = tmp_path_factory.mktemp(framework) / "run"
        horovod("--framework", framework, "--data", dataset, "--num-classes", "4", "--steps", "48", "--base-lr",
                "0.032", "--warmup-steps", "2", "--image-size", "32", "--batch-size", "8", "--workers", "1",
                "--log-every", "1", *([] if framework == EXPORTS else ["--no-export"]), "--output-dir", out,
                script=REPO_ROOT / "tests/training/tensorflow/rank_weights.py")
    return runs


def _losses(out):
    return [r["loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_two_ranks_stay_identical_loss_falls_and_outputs_are_complete(framework, learnable_runs):
    out = learnable_runs[framework]
    ranks = [pickle.loads((out / f"rank-{r}.pkl").read_bytes()) for r in (0, 1)]
    weights = [rank["weights"] for rank in ranks]
    assert len(weights[0]) == len(weights[1]) > 100
    assert all(np.array_equal(a, b) for a, b in zip(*weights))
    # AutoGraph converted none of Horovod's gradient all-reduce (training/tensorflow/loop.py's step, keras_fit.py's
    # optimizer: the same graph, traced sooner); the rank's own other conversions (the input pipeline's map
    # functions, Keras's loss) are listed, so the probe sees what this rank converted.
    for rank in ranks:
        assert rank["autograph"] and not [name for name in rank["autograph"] if "allreduce" in name], rank["autograph"]
    records = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    assert [r["step"] for r in records] == list(range(1, 49))
    losses = [r["loss"] for r in records]
    first, last = np.mean(losses[:8]), np.mean(losses[-8:])  # per step it is noisy: quarters of the run
    assert last < 0.8 * first, losses
    summary = json.loads((out / "summary.json").read_text())
    assert SUMMARY_FIELDS <= set(summary) and summary["world_size"] == 2 and summary["framework"] == framework
    # Better than one class for all (0.25): evaluation uses BatchNorm statistics that followed training.
    assert summary["top1"] > 0.25, summary["top1"]
    assert list((out / "tensorboard").iterdir())
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["ckpt-00000048.tfckpt"]
    if framework != EXPORTS:
        assert not (out / "saved_model").exists() and "onnx" not in summary
        return
    # The SavedModel loads and classifies in a process of its own.
    check = ("import sys, numpy as np, tensorflow as tf; m = tf.saved_model.load(sys.argv[1]); "
             "y = m.signatures['serving_default'](images=tf.zeros((2, 32, 32, 3))); "
             "print(list(y.values())[0].shape)")
    loaded = subprocess.run([PYTHON, "-c", check, str(out / "saved_model")], capture_output=True, text=True,
                            env=env(), timeout=120)
    assert loaded.returncode == 0 and "(2, 4)" in loaded.stdout, loaded.stderr[-2000:]


def test_keras_fit_and_the_custom_loop_train_alike(learnable_runs):
    # Same initial weights, data, LR per step, decay and loss: the two paths differ only in who runs the step.
    # Early steps agree closely; later ones drift apart by float rounding that training amplifies.
    keras, custom = (_losses(learnable_runs[framework])[:8] for framework in ("keras", "tensorflow"))
    np.testing.assert_allclose(keras, custom, rtol=1e-3)


# Keras's fit only (the custom loop's took ~165 s of CPU more): both loops share the checkpoint code (runtime.py's
# load_checkpoint, restore, checkpoint_state), the custom loop's own difference (a resumed run skips the first step's
# broadcast, which from equal weights changes nothing) would not show here, and test_native_tf.py resumes the custom
# loop from a Keras checkpoint through the same restore. Keras's own part: fit, compiled after restore, from the step.
@pytest.mark.parametrize("framework", ["keras"])
def test_resume_ends_where_an_uninterrupted_run_ends(framework, tmp_path):
    common = ["train", "--framework", framework, "--data", "synthetic", "--num-classes", "10", "--steps", "6",
              "--checkpoint-every", "3", "--no-export", *TINY]
    horovod(*common, "--output-dir", tmp_path / "straight")
    horovod(*common, "--stop-at-step", "3", "--output-dir", tmp_path / "split")
    resumed = horovod(*common, "--resume", "auto", "--output-dir", tmp_path / "split")
    assert "resumed from" in resumed.stdout and "at step 3" in resumed.stdout

    def final(run):
        return pickle.loads((tmp_path / run / "checkpoints" / "ckpt-00000006.tfckpt").read_bytes())

    straight, split = final("straight"), final("split")
    assert straight["step"] == split["step"] == 6
    for a, b in zip(straight["model"] + straight["optimizer"], split["model"] + split["optimizer"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    logs = [[r for r in map(json.loads, (tmp_path / run / "metrics.jsonl").read_text().splitlines())
             if "loss" in r] for run in ("straight", "split")]
    straight_lr, split_lr = ({r["step"]: r["lr"] for r in log} for log in logs)
    assert split_lr.keys() == straight_lr.keys() | {3}  # the split run also logs where it stopped
    assert all(split_lr[step] == lr for step, lr in straight_lr.items())


@pytest.mark.parametrize("framework,precision", [("tensorflow", "bf16"), ("keras", "fp16")])
def test_mixed_precision_trains_and_summarises(framework, precision, tmp_path):
    # One rank: the policy, the fp16 loss scaling around the optimizer, and float32 losses and logits.
    training("train", "--framework", framework, "--precision", precision, "--data", "synthetic",
             "--num-classes", "10", "--steps", "4", "--no-export", *TINY, "--output-dir", tmp_path / "o")
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["precision"] == precision and summary["steps"] == 4 and np.isfinite(summary["final_loss"])


@pytest.mark.parametrize("args,message", [
    (["--framework", "tensorflow", "--channels-last"], "--channels-last applies to pytorch only"),
    (["--framework", "keras", "--xla"], "--xla applies to --framework tensorflow only"),
    (["--framework", "keras", "--compile"], "--compile applies to pytorch only"),
    (["--framework", "tensorflow", "--dist", "ddp"], "--dist ddp applies to pytorch only"),
    (["--framework", "pytorch", "--xla"], "use --compile"),
    (["--framework", "keras", "--data", "/no/such/folder"], "--data /no/such/folder: no such folder"),
])
def test_flags_that_do_not_apply_and_bad_paths_fail_with_one_line(args, message, tmp_path):
    result = training("train", *args, "--steps", "1", "--output-dir", tmp_path / "o", check=False)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr[-2000:]
    assert not (tmp_path / "o" / "summary.json").exists()


@pytest.mark.parametrize("user_value,on", [(None, True), ("0", False)])
def test_training_imports_tensorflow_with_onednn_on_unless_the_user_turned_it_off(user_value, on):
    """TensorFlow's own start-up line says whether its oneDNN kernels are on (on its own it turns them on only on
    CPUs with AVX512_VNNI, AVX512_BF16 or AMX); a TF_ENABLE_ONEDNN_OPTS the user set wins."""
    environment = {key: value for key, value in env().items() if key != "TF_ENABLE_ONEDNN_OPTS"}
    environment["TF_CPP_MIN_LOG_LEVEL"] = "0"  # TensorFlow's info lines, where it says so
    if user_value is not None:
        environment["TF_ENABLE_ONEDNN_OPTS"] = user_value
    result = subprocess.run([PYTHON, "-c", "from training.tensorflow.runtime import import_tensorflow; "
                             "import_tensorflow()"], capture_output=True, text=True, env=environment, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert ("oneDNN custom operations are on" in result.stderr) == on, result.stderr[-2000:]
