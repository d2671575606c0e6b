"""val/ is labelled by train/'s class list (training/data/folder.py: scan), as every framework's loader asks it:
a val/ that lacks one of train/'s classes keeps the others' labels; a val/ class that train/ lacks is refused, in
the same words by the trainer and by the layout check that `infra upload` and the submit gate run."""
import pytest

from training.data import folder, layout
from training.errors import UsageError


def touch(root, *names):
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")  # scan reads names only; the loaders' verify_images opens train/'s
    return root


def test_a_val_without_the_first_class_keeps_the_labels_of_train(tmp_path):
    root = touch(tmp_path, "train/cat/1.jpg", "train/dog/2.jpg", "train/ship/3.jpg", "val/dog/4.jpg",
                 "val/ship/5.png")
    classes, _ = folder.scan(root, "train")
    assert classes == ["cat", "dog", "ship"]
    val_classes, val = folder.scan(root, "val", classes)
    assert val_classes == classes  # the model's classes, not val/'s own two
    assert [(path.name, label) for path, label in val] == [("4.jpg", 1), ("5.png", 2)]  # dog 1, ship 2, as in train/
    assert layout.of_folder(root).problem() is None  # the layout check lets the same tree through


def test_a_val_class_that_train_lacks_is_refused_in_one_line_naming_the_folder_and_the_fix(tmp_path):
    root = touch(tmp_path, "train/cat/1.jpg", "train/dog/2.jpg", "val/cat/3.jpg", "val/cow/4.jpg")
    classes, _ = folder.scan(root, "train")
    with pytest.raises(UsageError) as refused:
        folder.scan(root, "val", classes)
    message = str(refused.value)
    assert message == (f"--data {root}: val/cow/ is not a class of train/ (the model's classes are train/'s folders, "
                       "and val/ is labelled by them): add it to train/ or remove it from val/")
    assert "\n" not in message
    # The layout check refuses the same tree with the same clause, before `infra upload` moves a byte.
    assert layout.of_folder(root).problem() == message.removeprefix(f"--data {root}: ")


def test_an_empty_val_class_folder_has_no_label_to_give_and_is_left_alone(tmp_path):
    root = touch(tmp_path, "train/cat/1.jpg", "train/dog/2.jpg", "val/dog/3.jpg")
    (root / "val" / "cow").mkdir()
    _, val = folder.scan(root, "val", ["cat", "dog"])
    assert [label for _, label in val] == [1]
    assert layout.of_folder(root).problem() is None


def test_several_val_classes_that_train_lacks_are_named_together():
    problem = layout.val_classes_problem(["cat"], ["cat", "cow", "pig"])
    assert problem.startswith("val/cow/, val/pig/ are not classes of train/") and problem.endswith(
        "add them to train/ or remove them from val/")
