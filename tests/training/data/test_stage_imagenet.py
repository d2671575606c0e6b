"""`stage --extract` of ImageNet's archives as ImageNet ships them, built here from real JPEG files
(devtools/synth_data.py): ILSVRC2012_img_train.tar, a tar of one tar per class (n01440764.tar ...) of that class's
JPEGs; ILSVRC2012_img_val.tar, the validation JPEGs flat (ILSVRC2012_val_00000001.JPEG ...) with their classes in
a labels file. Uploaded to Azurite and staged, they must give the layout the trainer reads."""
import random
import tarfile

import pytest

from devtools.synth_data import make_dataset
from tests.training.data.conftest import cli, tree
from training.data import folder

LABELS = "LOC_val_solution.csv"


def imagenet_archives(tmp_path, labels_form):
    """The two archives and a labels file in `labels_form` ("kaggle": LOC_val_solution.csv's `ImageId,
    PredictionString` rows; "tf": one class per line in image order), and the tree they must stage into."""
    source = tmp_path / "images"
    make_dataset(source, classes=3, per_class=4, size=24, val_per_class=3)
    archives, class_tars = tmp_path / "upload", tmp_path / "class-tars"
    archives.mkdir()
    class_tars.mkdir()
    expected = {f"train/{name}": data for name, data in tree(source / "train").items()}
    with tarfile.open(archives / "ILSVRC2012_img_train.tar", "w") as train:
        for cls in sorted(p for p in (source / "train").iterdir()):
            with tarfile.open(class_tars / f"{cls.name}.tar", "w") as per_class:
                for image in sorted(cls.iterdir()):
                    per_class.add(image, arcname=image.name)
            train.add(class_tars / f"{cls.name}.tar", arcname=f"{cls.name}.tar")
    val_images = sorted((source / "val").rglob("*.JPEG"))
    random.Random(0).shuffle(val_images)  # ImageNet's numbering is not by class
    lines = ["ImageId,PredictionString"] if labels_form == "kaggle" else []
    with tarfile.open(archives / "ILSVRC2012_img_val.tar", "w") as val:
        for number, image in enumerate(val_images, 1):
            name, cls = f"ILSVRC2012_val_{number:08d}.JPEG", image.parent.name
            val.add(image, arcname=name)
            expected[f"val/{cls}/{name}"] = image.read_bytes()
            lines.append(f"{name[:-5]},{cls} 1 2 30 40" if labels_form == "kaggle" else cls)
    (archives / LABELS).write_text("\n".join(lines) + "\n")
    return archives, expected


@pytest.mark.parametrize("labels_form", ["kaggle", "tf"])
def test_imagenet_archives_stage_into_the_layout_the_trainer_reads(labels_form, azurite, container, tmp_path):
    archives, expected = imagenet_archives(tmp_path, labels_form)
    up = cli("upload", archives, azurite.container_url(container, "racwl"), "--prefix", "tars/")
    assert up.returncode == 0, up.stderr
    dest = tmp_path / "imagenet"
    staged = cli("stage", azurite.container_url(container, "rl"), dest, "--prefix", "tars/", "--extract",
                 "--val-labels", LABELS)
    assert staged.returncode == 0, staged.stderr
    assert {k: v for k, v in tree(dest).items() if k != LABELS} == expected  # no n01440764.tar left, no .part
    for split, images in (("train", 12), ("val", 9)):  # the trainer's own scan and check of the folder
        classes, samples = folder.scan(dest, split)
        assert classes == ["n00000000", "n00000001", "n00000002"] and len(samples) == images
        folder.verify_images(samples, max_bad=0.0, seed=0)
    again = cli("stage", azurite.container_url(container, "rl"), dest, "--prefix", "tars/", "--extract",
                "--val-labels", LABELS)
    assert again.returncode == 0 and "0 transferred, 22 skipped" in again.stdout, again.stdout


def test_a_val_archive_without_labels_stops_in_one_line(azurite, container, tmp_path):
    archives, _ = imagenet_archives(tmp_path, "tf")
    (archives / LABELS).unlink()
    assert cli("upload", archives, azurite.container_url(container, "racwl")).returncode == 0
    staged = cli("stage", azurite.container_url(container, "rl"), tmp_path / "imagenet", "--extract")
    # stage's first line says what it copies where; then the one line of the refusal
    assert staged.returncode != 0 and staged.stderr.count("\n") == 2, staged.stderr
    assert "ILSVRC2012_img_val.tar holds images with no class folders" in staged.stderr
    assert "pass --val-labels BLOB" in staged.stderr and "Traceback" not in staged.stderr
    assert not list((tmp_path / "imagenet").rglob("ILSVRC2012_val_*"))  # no flat validation folder to mislead
