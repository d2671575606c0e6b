"""`predict` on a labelled folder (images in folders named after the model's classes): top-1 accuracy overall and per
class, what each class is mistaken for and the confusion matrix; a folder's files of another type (a phone's .heic)
are named as skipped, with the fix."""
import json

import onnx
from PIL import Image

from tests.training.pytorch.test_quickstart import tiny_model
from training import predict

COLOURS = {"red": (250, 0, 0), "green": (0, 250, 0), "blue": (0, 0, 250)}  # tiny_model scores them 0, 1, 2


def named_model(path):
    """tiny_model with the export's class names in its metadata (training/model_card.py)."""
    model = onnx.load(tiny_model(path))
    onnx.helper.set_model_props(model, {"classes": json.dumps(list(COLOURS)), "image_size": "32"})
    onnx.save(model, path)
    return path


def test_a_labelled_folder_is_scored_per_class_with_its_confusions(tmp_path, capsys):
    model = named_model(tmp_path / "model.onnx")
    val = tmp_path / "pets" / "val"
    photos = {"red": ["red", "red", "blue"], "green": ["green"], "blue": ["blue", "blue"]}  # one red photo is blue
    for label, colours in photos.items():
        (val / label).mkdir(parents=True)
        for i, colour in enumerate(colours):
            Image.new("RGB", (40, 30), COLOURS[colour]).save(val / label / f"{i}.jpg")
    (val / "red" / "IMG_0001.heic").write_bytes(b"ftypheic")  # what a phone gives
    (val / "notes.txt").write_text("taken on Tuesday")
    assert predict.main([str(model), str(val), "--top", "1"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len([line for line in lines if line.startswith(str(val))]) == 6  # each image's own line first
    score = lines[6:]
    assert score[0] == "accuracy: 0.833 top-1 (5/6 labelled image(s), 0 unlabelled); chance 0.333"
    assert score[1:4] == ["  red: 0.667 (2/3); mistaken for blue 1", "  green: 1.000 (1/1)", "  blue: 1.000 (2/2)"]
    assert score[4:] == ["confusion (rows: true class, columns: predicted):",
                         "          red green  blue",
                         "  red       2     0     1",
                         "  green     0     1     0",
                         "  blue      0     0     2"]
    assert err == (f"predict: skipped 2 file(s) of a type predict does not read: {val / 'notes.txt'} (.txt: not an "
                   f"image type predict reads (.bmp, .gif, .jpeg, .jpg, .png, .tif, .tiff, .webp)); "
                   f"{val / 'red' / 'IMG_0001.heic'} (.heic: an iPhone photo, which PIL does not read; convert it "
                   "to JPEG)\n")


def test_an_unlabelled_folder_prints_no_score(tmp_path, capsys):
    model = named_model(tmp_path / "model.onnx")
    (tmp_path / "photos").mkdir()
    Image.new("RGB", (40, 30), COLOURS["red"]).save(tmp_path / "photos" / "a.jpg")
    assert predict.main([str(model), str(tmp_path / "photos")]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "accuracy" not in out
