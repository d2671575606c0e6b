"""A model that knows itself (issue 39): --num-classes from the folder, the class names beside the model and in its
ONNX metadata, an export that takes other image sizes, `python -m training predict`, and --init-from/--pretrained."""
import json
import shutil

import numpy as np
import onnxruntime
import pytest
import torch
import torchvision

from tests.training.pytorch.conftest import TORCH, training
from training.errors import UsageError
from training.model_card import ModelCard
from training.predict import eval_pixels, model_input
from training.pytorch import weights


@pytest.fixture(scope="module")
def pets(tmp_path_factory):
    """Real JPEG files in three class folders named as a user's would be: cat, dog, ship (synth-data's classes
    0, 1, 2, renamed)."""
    root = tmp_path_factory.mktemp("pets")
    TORCH.devtools("synth-data", "--out", root, "--classes", "3", "--per-class", "8", "--val-per-class", "0",
                   "--size", "40")
    for index, name in enumerate(("cat", "dog", "ship")):
        (root / "train" / f"n{index:08d}").rename(root / "train" / name)
    return root


def test_three_class_folder_exports_three_named_logits_and_predict_names_a_class(pets, tmp_path):
    """The issue's "done when", in one training process: no --num-classes, started from a 1000-class torchvision
    state_dict (--init-from, its fc resized), 32 px."""
    start = tmp_path / "resnet50-imagenet.pth"
    torch.manual_seed(1)
    torch.save(torchvision.models.resnet50().state_dict(), start)
    out = tmp_path / "run"
    result = training("train", "--data", pets, "--image-size", "32", "--batch-size", "4", "--workers", "0",
                      "--steps", "2", "--export", "--init-from", start, "--output-dir", out)
    assert "fc) freshly initialised (1000 classes there, 3 here)" in result.stdout, result.stdout
    assert json.loads((out / "classes.json").read_text()) == ["cat", "dog", "ship"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["classes"] == ["cat", "dog", "ship"] and summary["run_id"]

    session = onnxruntime.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    assert json.loads(meta["classes"]) == ["cat", "dog", "ship"]
    assert (meta["image_size"], meta["framework"], meta["input_layout"], meta["run_id"]) == (
        "32", "pytorch", "NCHW", summary["run_id"])
    assert json.loads(meta["mean"]) == [0.485, 0.456, 0.406] and json.loads(meta["std"]) == [0.229, 0.224, 0.225]
    for size in (32, 48):  # the size it trained at, and another (dynamic height and width)
        logits = session.run(None, {"images": np.zeros((1, 3, size, size), np.float32)})[0]
        assert logits.shape == (1, 3), (size, logits.shape)

    photo = sorted((pets / "train" / "dog").iterdir())[0]
    predicted = training("predict", out / "model.onnx", photo, "--top", "2")
    (line,) = predicted.stdout.splitlines()
    assert line.startswith(f"{photo}: ") and line.count("%") == 2, line
    assert line.split(": ", 1)[1].split()[0] in ("cat", "dog", "ship"), line
    assert training("predict", out / "model.onnx", photo, "--image-size", "64").returncode == 0
    notes = tmp_path / "notes.txt"
    notes.write_text("not a photo")
    # A file that does not decode is skipped and named; the photo beside it is still predicted.
    skipped = training("predict", out / "model.onnx", photo, notes)
    assert [line.split(": ")[0] for line in skipped.stdout.splitlines()] == [str(photo)]
    assert skipped.stderr == f"predict: skipped 1 file(s) that do not decode: {notes} (not an image PIL reads)\n"
    refused = training("predict", out / "model.onnx", notes, check=False)  # nothing that decodes: nothing predicted
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout
    assert refused.stderr.splitlines()[-1] == "error: no image decoded (1 skipped, listed above): nothing predicted"


@pytest.mark.parametrize("case", ["num-classes-disagrees", "predict-missing-model", "predict-not-an-image",
                                  "init-from-resnet18", "init-from-text", "init-from-with-keras"])
def test_bad_input_is_one_line_naming_it(case, pets, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    resnet18 = tmp_path / "resnet18.pth"
    if case == "init-from-resnet18":
        torch.save(torchvision.models.resnet18().state_dict(), resnet18)
    args, words = {
        "num-classes-disagrees": (["train", "--data", pets, "--num-classes", "4"],
                                  "--num-classes 4: --data"),
        "predict-missing-model": (["predict", tmp_path / "model.onnx", text], "no such file"),
        "predict-not-an-image": (["predict", text, text], "onnxruntime cannot load it"),
        "init-from-resnet18": (["train", "--data", pets, "--init-from", resnet18, "--image-size", "32", "--batch-size", "4", "--steps", "1"],
                               "not torchvision ResNet50 weights (layer1.0.conv1.weight is (64, 64, 3, 3)"),
        "init-from-text": (["train", "--data", pets, "--init-from", text, "--image-size", "32", "--batch-size", "4", "--steps", "1"],
                           "not a PyTorch weights file"),
        "init-from-with-keras": (["train", "--framework", "keras", "--init-from", resnet18], "applies to pytorch only"),
    }[case]
    result = training(*args, "--output-dir", tmp_path / "out", check=False, timeout=120) if args[0] == "train" \
        else training(*args, check=False, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0], result.stderr
    assert not (tmp_path / "out" / "summary.json").exists()
    if case == "num-classes-disagrees":  # refused before the output folder is made, let alone a model
        assert "3 class folders in train/ (cat, dog, ship)" in lines[0] and not (tmp_path / "out").exists()


def test_predict_prepares_a_photo_as_the_trainers_evaluation_does(photos):
    """PIL's resize and centre crop in predict (no torch there) against torchvision's evaluation transform of the
    PIL loader, on photos of ImageNet's sizes and aspect ratios."""
    from PIL import Image

    from training.pytorch.data import FolderDataset

    card = ModelCard(num_classes=4, image_size=48)
    for path in sorted(photos.rglob("*.JPEG"))[:3]:
        expected = FolderDataset([(path, 0)], 48, train=False, seed=0)[0][0].numpy()
        with Image.open(path) as image:
            got = model_input(eval_pixels(image, 48, "center-crop"), card)
        assert got.shape == expected.shape == (3, 48, 48)
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_init_from_a_torchvision_file_or_our_checkpoint_keeps_all_but_the_resized_head(tmp_path):
    torch.manual_seed(3)
    imagenet = torchvision.models.resnet50()  # 1000 classes, as torchvision's files are
    torch.save(imagenet.state_dict(), tmp_path / "tv.pth")
    torch.manual_seed(4)
    model = torchvision.models.resnet50(num_classes=3)
    own_fc = model.fc.weight.detach().clone()
    line = weights.start_from(model, str(tmp_path / "tv.pth"), pretrained=False)
    assert "1000 classes there, 3 here" in line
    assert torch.equal(model.conv1.weight, imagenet.conv1.weight)
    assert torch.equal(model.layer4[2].bn3.running_var, imagenet.layer4[2].bn3.running_var)
    assert torch.equal(model.fc.weight, own_fc)  # the run's own fresh head

    # Our checkpoint (the loop's checkpoint_state, DDP-prefixed keys too), same classes: everything loads.
    trained = {f"module.{k}": v + 1 for k, v in model.state_dict().items()}
    torch.save({"step": 7, "model": trained, "optimizer": {}, "scaler": None, "config": {"framework": "pytorch"}},
               tmp_path / "ckpt-00000007.pt")
    fresh = torchvision.models.resnet50(num_classes=3)
    assert weights.start_from(fresh, str(tmp_path / "ckpt-00000007.pt"), pretrained=False).endswith("ckpt-00000007.pt")
    assert torch.equal(fresh.fc.weight, own_fc + 1) and torch.equal(fresh.conv1.weight, imagenet.conv1.weight + 1)

    with pytest.raises(UsageError, match="no such file"):
        weights.start_from(fresh, str(tmp_path / "missing.pth"), pretrained=False)


def test_pretrained_reads_torchvisions_imagenet_file_from_torch_home(tmp_path, monkeypatch):
    """--pretrained is torchvision's IMAGENET1K_V2 through torch.hub's cache: a file placed there is what loads, so
    nothing reaches the hub (on a node with egress, torch.hub downloads it into the same place)."""
    torch.manual_seed(5)
    imagenet = torchvision.models.resnet50()
    cached = tmp_path / "hub" / "checkpoints" / "resnet50-11ad3fa6.pth"
    cached.parent.mkdir(parents=True)
    torch.save(imagenet.state_dict(), cached)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    model = torchvision.models.resnet50(num_classes=3)
    assert "--pretrained" in weights.start_from(model, "", pretrained=True)
    assert torch.equal(model.layer1[0].conv1.weight, imagenet.layer1[0].conv1.weight)
    shutil.rmtree(tmp_path / "hub")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "nowhere"))
    monkeypatch.setattr(torch.hub, "download_url_to_file", lambda *a, **k: (_ for _ in ()).throw(OSError("no egress")))
    with pytest.raises(UsageError, match="--pretrained: cannot fetch .* give --init-from FILE"):
        weights.start_from(model, "", pretrained=True)
