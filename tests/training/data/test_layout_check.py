"""The dataset layout check (training/data/layout.py) that `python -m infra upload` runs on a folder and the submit
gate runs on the `data` container's listing: the trainer's tree passes, a flat or empty folder does not."""
from training.data import folder, layout


def touch(root, *names):
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    return root


def test_the_suffixes_are_the_trainers():
    assert layout.IMAGE_SUFFIXES == folder.IMAGE_SUFFIXES


def test_the_trainers_tree_passes_with_any_case_of_suffix(tmp_path):
    root = touch(tmp_path, "train/cat/a.JPG", "train/dog/b.jpeg", "train/ship/c.PNG", "val/cat/d.jpg",
                 "val/dog/e.jpg", "val/ship/f.png", ".staged", "README.txt")
    found = layout.of_folder(root)
    assert found.problem() is None
    assert found.summary() == "3 classes, 3 training images, 3 validation images"


def test_a_flat_folder_is_refused_and_says_so(tmp_path):
    problem = layout.of_folder(touch(tmp_path, "a.jpg", "b.jpg")).problem()
    assert problem == "no class folders with images under train/ (2 images outside class folders)"
    assert layout.of_folder(touch(tmp_path / "t", "train/a.jpg")).problem().startswith("no class folders")


def test_an_empty_folder_is_refused(tmp_path):
    assert layout.of_folder(tmp_path).problem() == "it is empty"


def test_class_folders_without_images_pass_only_where_the_files_are_not_seen(tmp_path):
    found = layout.of_folder(touch(tmp_path, "train/cat/a.bin"))
    assert found.problem() == "no class folders with images under train/ (1 files, no image in train/<class>/)"
    assert found.problem(images=False) is None  # a container's listing: the trainer checks the files itself


def test_val_with_other_classes_is_refused():
    found = layout.of_names(["train/cat/a.jpg", "train/dog/b.jpg", "val/cat/c.jpg", "val/cow/d.jpg"])
    # The trainer labels val/ by train/'s classes (tests/training/data/test_val_labels.py): dog missing from val/
    # is fine, cow has no label.
    assert found.problem() == ("val/cow/ is not a class of train/ (the model's classes are train/'s folders, and "
                               "val/ is labelled by them): add it to train/ or remove it from val/")


def test_imagenets_archives_are_named_for_what_they_are():
    found = layout.of_names(["ILSVRC2012_img_train.tar", "ILSVRC2012_img_val.tar", "LOC_val_solution.csv"])
    assert found.archives == {"train": 1, "val": 1}
    assert "ImageNet's archives" in found.problem() and "--extract" in found.problem()


def test_training_upload_notes_a_flat_folder_and_refuses_it_with_check_layout(tmp_path, capsys):
    from training.data import upload
    from training.errors import UsageError

    src = touch(tmp_path / "flat", "1.jpg")
    url = "https://nosuchaccount.blob.core.windows.net/data"  # never reached: the refusal comes first
    try:
        upload.main([str(src), url, "--check-layout"])
    except UsageError as refused:
        assert str(refused).startswith(f"SRC {src}: no class folders with images under train/")
        assert "expected train/<class>/IMAGE" in str(refused)
    else:
        raise AssertionError("a flat folder was not refused")
