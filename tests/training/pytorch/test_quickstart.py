"""README's local quickstart in .venv-torch: one process with no Horovod installed (the light environment,
training/requirements-local.txt), its first line and validation every epoch, and `predict` on a folder that holds
a file that does not decode."""
import subprocess

import numpy as np
import onnx
from onnx import TensorProto, helper
from PIL import Image

from infra import REPO_ROOT
from tests.training.pytorch.conftest import PYTHON, env
from training import predict

# `python -m training ARGV` as a Python without Horovod runs it (an import of it raises ModuleNotFoundError).
WITHOUT_HOROVOD = "import runpy, sys; sys.modules['horovod'] = None; sys.argv = ['training', *sys.argv[1:]]; " \
                  "runpy.run_module('training', run_name='__main__', alter_sys=True)"


def small_folder(root):
    """3 classes of 4 training and 1 validation JPEG: a folder as an engineer's, as small as a test can afford."""
    for split, count in (("train", 4), ("val", 1)):
        for shade, cls in enumerate(("cat", "dog", "ship")):
            (root / split / cls).mkdir(parents=True)
            for i in range(count):
                Image.new("RGB", (48, 40), (100 * shade, 30 * i, 60)).save(root / split / cls / f"{i}.jpg")
    return root


def test_one_process_trains_without_horovod_and_validates_every_epoch(tmp_path):
    # 12 training images at batch 12: 1 step an epoch, at 32 px, no loader process, to keep it cheap (on shared cores
    # the cost is per step and per process more than per image). Every size given: nothing CPU-sized to say.
    data = small_folder(tmp_path / "pets")
    result = subprocess.run([PYTHON, "-c", WITHOUT_HOROVOD, "train", "--data", str(data), "--epochs", "2",
                             "--image-size", "32", "--batch-size", "12", "--workers", "0", "--log-every", "1",
                             "--no-export", "--output-dir", str(tmp_path / "run")],
                            cwd=REPO_ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"python -m training train: ResNet50 with pytorch on {data} (3 classes)")
    assert lines[1].startswith("training ResNet50 (pytorch, one process, 1 worker(s), cpu): 2 steps (2 epochs of 1), "
                               "image 32 px, batch 12 per worker (global 12), 0 loader process(es)"), lines[1]
    assert "CPU-sized" not in lines[1]  # (tests/training/test_runner.py: the sizes left out are)
    validations = [line for line in lines if line.startswith("epoch ")]
    assert [line.split()[1] for line in validations] == ["1/2", "2/2"] and "val top-1" in validations[0]


def tiny_model(path, size=32, classes=3):
    """An ONNX classifier in the export's shape (NCHW input of `size`, logits of `classes`): mean colour x W."""
    weights = helper.make_tensor("w", TensorProto.FLOAT, [3, classes], np.eye(3, classes, dtype=np.float32).ravel())
    graph = helper.make_graph(
        [helper.make_node("GlobalAveragePool", ["input"], ["pooled"]),
         helper.make_node("Flatten", ["pooled"], ["flat"]), helper.make_node("MatMul", ["flat", "w"], ["logits"])],
        "tiny", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", classes])], [weights])
    # IR version 10: what onnxruntime 1.31 reads (onnx 1.23 writes 14 unless told)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), path)
    return path


def test_predict_on_a_folder_skips_and_names_what_does_not_decode(tmp_path, capsys):
    model = tiny_model(tmp_path / "model.onnx")
    photos = tmp_path / "photos"
    (photos / "more").mkdir(parents=True)
    Image.new("RGB", (40, 30), (250, 0, 0)).save(photos / "red.jpg")
    Image.new("RGB", (40, 30), (0, 0, 250)).save(photos / "more" / "blue.png")
    (photos / "broken.jpg").write_bytes(b"\xff\xd8 cut short")
    (photos / "notes.txt").write_text("not an image, not a suffix predict looks for")
    assert predict.main([str(model), str(photos), "--top", "1"]) == 0
    out, err = capsys.readouterr()
    # every image in and below the folder, sorted; red's mean colour scores class 0 highest, blue's class 2
    assert [line.split(": ")[0] for line in out.splitlines()] == [str(photos / "more" / "blue.png"),
                                                                  str(photos / "red.jpg")]
    assert out.splitlines()[0].split(": ")[1].startswith("2 ") and out.splitlines()[1].split(": ")[1].startswith("0 ")
    assert err.startswith(f"predict: skipped 1 file(s) that do not decode: {photos / 'broken.jpg'} (")
