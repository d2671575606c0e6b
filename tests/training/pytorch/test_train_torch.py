import json
import signal
import subprocess
import time

import psutil
import pytest
import torch

from infra import REPO_ROOT
from tests.training.pytorch.conftest import HOROVODRUN, PYTHON, TINY, TORCHRUN, env, horovod, training


def _metrics(out):
    # training records (a validation's has val_loss and val_top1 instead)
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def test_two_horovod_ranks_stay_identical_and_loss_falls(dataset, tmp_path):
    out = tmp_path / "run"
    # Learnable and stable: batch 8 per rank, peak LR 0.002 (at batch 4 and 0.025 the loss of this 4-class set
    # first explodes to 10-35, then comes back down as the LR decays: a pass that means little).
    horovod("--data", str(dataset), "--num-classes", "4", *TINY, "--batch-size", "8", "--log-every", "1",
            "--steps", "32", "--base-lr", "0.032", "--warmup-steps", "2", "--output-dir", str(out),
            script=REPO_ROOT / "tests/training/pytorch/rank_params.py")
    rank0, rank1 = (torch.load(out / f"rank-{r}.pt") for r in (0, 1))
    for name, tensor in rank0.items():
        assert torch.equal(tensor, rank1[name]), f"{name} differs between ranks"
    initial = torch.load(out / "checkpoints" / "ckpt-00000032.pt", weights_only=False)["model"]
    for name, tensor in rank0.items():  # rank 0 checkpointed the state both ranks ended in
        assert torch.equal(initial[name], tensor), name
    losses = [m["loss"] for m in _metrics(out)]
    assert len(losses) == 32
    assert sum(losses[-8:]) / 8 < 0.8 * sum(losses[:8]) / 8, losses  # per step it is noisy: quarters of the run
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["img_per_sec"] > 0 and summary["top1"] is not None
    assert set(summary) >= {"img_per_sec_ci95", "img_per_sec_per_worker", "images_seen", "wall_time_s", "final_loss"}
    assert summary["images_seen"] == 32 * 8 * 2
    assert list((out / "tensorboard").iterdir()), "no TensorBoard events"


def test_resumed_run_ends_with_the_same_weights_as_an_uninterrupted_one(dataset, tmp_path):
    common = ["--data", str(dataset), "--num-classes", "4", *TINY, "--steps", "20", "--checkpoint-every", "100"]
    training("train", *common, "--output-dir", str(tmp_path / "straight"))
    # Stopped mid-epoch (16 steps an epoch), then resumed into the next epoch.
    training("train", *common, "--stop-at-step", "7", "--output-dir", str(tmp_path / "resumed"))
    assert [p.name for p in (tmp_path / "resumed" / "checkpoints").iterdir()] == ["ckpt-00000007.pt"]
    result = training("train", *common, "--resume", "auto", "--output-dir", str(tmp_path / "resumed"))
    assert "resumed from" in result.stdout and "at step 7" in result.stdout
    straight = torch.load(tmp_path / "straight/checkpoints/ckpt-00000020.pt", weights_only=False)
    resumed = torch.load(tmp_path / "resumed/checkpoints/ckpt-00000020.pt", weights_only=False)
    for name, tensor in straight["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name
    # The same log records, plus one at the preemption point (step 7).
    resumed_log = [m for m in _metrics(tmp_path / "resumed") if m["step"] != 7]
    straight_log = _metrics(tmp_path / "straight")
    assert [(m["step"], m["lr"], m["loss"]) for m in resumed_log] == [(m["step"], m["lr"], m["loss"]) for m in straight_log]


def test_resume_auto_skips_a_corrupt_newest_checkpoint(dataset, tmp_path):
    common = ["--data", "synthetic", "--num-classes", "4", *TINY, "--steps", "6", "--checkpoint-every", "2"]
    out = tmp_path / "run"
    training("train", *common, "--stop-at-step", "4", "--output-dir", str(out))
    (out / "checkpoints" / "ckpt-00000004.pt").write_bytes(b"truncated")
    result = training("train", *common, "--resume", "auto", "--output-dir", str(out))
    assert "skipping unreadable checkpoint ckpt-00000004.pt" in result.stderr
    assert "at step 2" in result.stdout
    assert sorted(p.name for p in (out / "checkpoints").iterdir())[-1] == "ckpt-00000006.pt"


def test_killing_one_rank_ends_the_job_non_zero_within_60_s(tmp_path):
    out = tmp_path / "run"
    job = subprocess.Popen([HOROVODRUN, "--gloo", "-np", "2", "-H", "localhost:2", PYTHON, "-m", "training", "train",
                            "--data", "synthetic", "--num-classes", "4", *TINY, "--steps", "100000",
                            "--output-dir", str(out)], cwd=REPO_ROOT, env=env(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text():
            assert time.monotonic() < deadline and job.poll() is None, "training never started"
            time.sleep(1)
        rank1 = next(p for p in psutil.Process(job.pid).children(recursive=True)
                     if p.environ().get("HOROVOD_RANK") == "1" and "training" in " ".join(p.cmdline()))
        rank1.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        code = job.wait(timeout=60)
        assert code != 0
        assert time.monotonic() - killed < 60
    finally:
        if job.poll() is None:
            for child in psutil.Process(job.pid).children(recursive=True):
                child.kill()
            job.kill()


def test_ddp_with_torchrun_two_processes(tmp_path):
    out = tmp_path / "run"
    result = subprocess.run([TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "training", "train",
                             "--dist", "ddp", "--data", "synthetic", "--num-classes", "4", *TINY, "--steps", "4",
                             "--output-dir", str(out)], cwd=REPO_ROOT, env=env(), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 4 and summary["images_seen"] == 4 * 4 * 2


def test_onnx_export_matches_pytorch_under_onnxruntime(tmp_path):
    out = tmp_path / "run"
    training("train", "--data", "synthetic", "--num-classes", "4", "--image-size", "64", "--batch-size", "4",
             "--steps", "2", "--export", "--output-dir", str(out))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["onnx"].endswith("model.onnx") and not (out / "model.onnx.tmp").exists()
    check = subprocess.run([PYTHON, "-c", f"""
import numpy as np, onnxruntime, torch, torchvision
state = torch.load({str(out / 'checkpoints' / 'ckpt-00000002.pt')!r}, weights_only=False)['model']
model = torchvision.models.resnet50(num_classes=4); model.load_state_dict(state); model.eval()
x = np.random.default_rng(1).standard_normal((3, 3, 64, 64)).astype(np.float32)
got = onnxruntime.InferenceSession({str(out / 'model.onnx')!r}).run(None, {{'images': x}})[0]
with torch.no_grad(): want = model(torch.from_numpy(x)).numpy()
assert got.shape == (3, 4), got.shape
print(float(np.abs(got - want).max()))
"""], env=env(), capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr
    assert float(check.stdout.strip()) < 1e-3


def _bad_jpegs(root, good, bad):
    folder = root / "train" / "n00000000"
    folder.mkdir(parents=True)
    from PIL import Image
    for i in range(good):
        Image.new("RGB", (40, 40), (i, 0, 0)).save(folder / f"g{i}.JPEG")
    for i in range(bad):
        (folder / f"b{i}.JPEG").write_bytes(b"not a jpeg at all")
    return root


@pytest.mark.parametrize("case", ["unknown-precision", "unknown-framework-value", "missing-dataset", "not-imagenet",
                                  "no-images", "unreadable-jpegs", "unwritable-output", "bad-config-file",
                                  "ddp-with-keras", "dali-with-tensorflow", "unknown-config-key",
                                  "missing-resume-file"])
def test_bad_input_is_one_line_and_non_zero(case, tmp_path):
    out = ["--output-dir", str(tmp_path / "out")]
    args, words = {
        "unknown-precision": (["--precision", "fp8", *out], "invalid choice: 'fp8'"),
        "unknown-framework-value": (["--framework", "jax", *out], "invalid choice: 'jax'"),
        "missing-dataset": (["--data", str(tmp_path / "nope"), *out], "no such folder"),
        "not-imagenet": (["--data", str(tmp_path), *out], "no train/ folder"),
        "no-images": (["--data", str((tmp_path / "d" / "train" / "c").mkdir(parents=True) or tmp_path / "d"), *out],
                      "no .JPEG images"),
        "unreadable-jpegs": (["--data", str(_bad_jpegs(tmp_path / "bad", 6, 4)), *out],
                             "4 of 10 sampled images are unreadable"),
        "unwritable-output": (["--output-dir", str((tmp_path / "file").write_text("x") and tmp_path / "file" / "o")],
                              "not writable"),
        "bad-config-file": (["--config", str((tmp_path / "c.yaml").write_text("steps: [") and tmp_path / "c.yaml")],
                            "not valid YAML"),
        "ddp-with-keras": (["--framework", "keras", "--dist", "ddp", *out], "applies to pytorch only"),
        "dali-with-tensorflow": (["--framework", "tensorflow", "--loader", "dali", *out], "reads folders with tf.data"),
        "unknown-config-key": (["--config", str((tmp_path / "k.yaml").write_text("stepz: 3") and tmp_path / "k.yaml")],
                               "unknown option 'stepz'"),
        "missing-resume-file": (["--resume", str(tmp_path / "x.pt"), "--data", "synthetic", "--image-size", "32",
                                 "--batch-size", "2", "--steps", "1", *out], "no such checkpoint file"),
    }[case]
    result = training("train", *args, check=False, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out" / "summary.json").exists()


def test_config_file_with_flag_overrides(tmp_path):
    config = tmp_path / "train.yaml"
    config.write_text("data: synthetic\nnum-classes: 4\nimage_size: 32\nbatch_size: 2\nsteps: 3\nexport: false\n")
    result = training("train", "--config", str(config), "--steps", "2", "--output-dir", str(tmp_path / "o"))
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["steps"] == 2, result.stdout


def test_help_documents_every_flag_with_its_default():
    result = training("train", "--help")
    for flag in ("--framework", "--dist", "--data", "--precision", "--channels-last", "--compile", "--resume",
                 "--fp16-allreduce", "--label-smoothing", "--lr-schedule", "--checkpoint-every", "--keep-checkpoints"):
        assert flag in result.stdout, flag
    assert "(default: 0.9)" in result.stdout


def test_mlflow_logs_the_same_metrics_to_a_local_store(tmp_path, monkeypatch):
    """`--mlflow` without MLFLOW_TRACKING_URI: a local store in the run folder, read back with MLflow's own
    client: the params, every logged step's loss as metrics.jsonl has it, the summary and its artifacts."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # for this reader, as the trainer sets it for itself
    out = tmp_path / "run"
    training("train", "--data", "synthetic", "--num-classes", "4", *TINY, "--steps", "4", "--mlflow",
             "--output-dir", str(out))
    client = MlflowClient(tracking_uri=(out / "mlruns").resolve().as_uri())
    experiment = client.get_experiment_by_name("dltrain")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.params["framework"] == "pytorch" and run.data.params["world_size"] == "1"
    history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "loss")}
    assert history == {m["step"]: pytest.approx(m["loss"]) for m in _metrics(out)}
    summary = json.loads((out / "summary.json").read_text())
    assert run.data.metrics["final/img_per_sec"] == pytest.approx(summary["img_per_sec"])
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"summary.json", "report.png"}
    assert run.info.status == "FINISHED"


def test_without_the_flag_or_a_tracking_uri_nothing_goes_to_mlflow(tmp_path):
    out = tmp_path / "run"
    training("train", "--data", "synthetic", "--num-classes", "4", *TINY, "--steps", "2", "--output-dir", str(out))
    assert not (out / "mlruns").exists()
