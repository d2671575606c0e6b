"""--dist native (tf.distribute.MultiWorkerMirroredStrategy): two real worker processes on CPU, each with the
TF_CONFIG that training/cluster/launch.py builds, for Keras and then TensorFlow's custom loop. Kept small (3
steps each at 32 px): the Keras cluster is stopped at step 2, as a preemption would, and a new TensorFlow
cluster resumes from its checkpoint (both loops write the same format) to the end."""
import json
import socket
import subprocess

from infra import REPO_ROOT
from training import runner
from training.cluster.launch import tf_config
from training.config import parse_args
from tests.training.tensorflow.conftest import PYTHON, env
from tests.training.tensorflow.test_train_tf import SUMMARY_FIELDS

FLAGS = ["--dist", "native", "--num-classes", "4", "--image-size", "32", "--batch-size", "4", "--workers", "1",
         "--steps", "3", "--log-every", "1", "--warmup-steps", "1", "--base-lr", "0.05", "--no-export"]


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def native_cluster(*args):
    """Two workers, one process each, as two nodes would start them; both must exit 0."""
    workers = [f"localhost:{port}" for port in _free_ports(2)]
    procs = [subprocess.Popen([PYTHON, "-m", "training", "train", *map(str, args)], cwd=REPO_ROOT,
                              env={**env(), "TF_CONFIG": tf_config(workers, index)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for index in range(2)]
    outputs = [p.communicate(timeout=400)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    return outputs


def test_keras_and_tensorflow_train_natively_on_two_workers_and_resume_across_clusters(dataset, tmp_path):
    keras, tensorflow = tmp_path / "keras", tmp_path / "tensorflow"
    out = native_cluster("--framework", "keras", "--data", dataset, *FLAGS, "--stop-at-step", "2",
                         "--output-dir", keras)
    assert "training ResNet50 (keras, native, 2 worker(s), cpu)" in out[0]
    resumed = keras / "checkpoints" / "ckpt-00000002.tfckpt"
    out = native_cluster("--framework", "tensorflow", "--data", dataset, *FLAGS, "--resume", resumed,
                         "--output-dir", tensorflow)
    assert f"resumed from {resumed} at step 2" in out[0]

    # The runner's plan, as Horovod runs it: 2 workers x 4 = a global batch of 8, the LR of each step.
    plan = runner.plan(parse_args(["--framework", "keras", "--data", str(dataset), *FLAGS]), world_size=2, steps_per_epoch=8)
    for folder, steps in ((keras, [1, 2]), (tensorflow, [3])):
        records = [r for r in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
        assert [r["step"] for r in records] == steps, folder
        assert [r["lr"] for r in records] == [plan.lr(s - 1) for s in steps], folder
        assert all(r["loss"] > 0 for r in records), folder
    summary = json.loads((tensorflow / "summary.json").read_text())
    assert SUMMARY_FIELDS <= set(summary)  # the fields a Horovod run's summary has
    assert (summary["framework"], summary["distribution"], summary["world_size"], summary["global_batch"]) == \
        ("tensorflow", "native", 2, 8)
    assert (summary["steps"], summary["resumed_from_step"], summary["images_seen"]) == (3, 2, 8)
    assert 0 <= summary["top1"] <= 1  # 16 validation images, each worker its half
    assert sorted(p.name for p in (tensorflow / "checkpoints").iterdir()) == ["ckpt-00000003.tfckpt"]
    assert (json.loads((keras / "summary.json").read_text())["steps"], (keras / "report.png").is_file()) == (2, True)
