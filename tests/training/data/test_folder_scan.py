"""Rank 0 reads the dataset folder and every rank builds its list from rank 0's listing (training/data/folder.py
scan with `broadcast`): the same samples as a scan of its own, without one folder read on the other ranks, and rank
0's refusal raised on every rank. The collective is a function here; the 2-rank Horovod test is
tests/training/pytorch/test_scan_broadcast.py."""
import pytest
from PIL import Image

from training.data import folder
from training.errors import UsageError


def _folder(root):
    for split, per_class in (("train", 3), ("val", 1)):
        for cls in ("cat", "dog", "ship"):
            (root / split / cls).mkdir(parents=True)
            for i in range(per_class):
                Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(root / split / cls / f"{cls}_{i}.JPEG")
    (root / "train" / "dog" / "notes.txt").write_text("not an image")
    (root / "train" / "dog" / ".jpg").write_text("a hidden file: no suffix, as Path.suffix reads it")
    (root / "val" / "ship" / "ship_0.JPEG").unlink()  # a val class folder without images
    return root


def test_every_rank_gets_rank_0s_samples_and_only_rank_0_reads_the_folders(tmp_path, monkeypatch):
    root = _folder(tmp_path / "pets")
    sent = []
    classes, samples = folder.scan(root, "train", rank=0, broadcast=lambda obj: sent.append(obj) or obj)
    assert (classes, samples) == folder.scan(root, "train")  # what every rank scanned on its own before
    assert [p.name for p, _ in samples] == [f"{c}_{i}.JPEG" for c in ("cat", "dog", "ship") for i in range(3)]
    assert len(sent) == 1 and sent[0][0] == "listing"

    def no_reads(*args):
        raise AssertionError("rank 1 read the folder")

    monkeypatch.setattr(folder, "_listing", no_reads)
    monkeypatch.setattr(folder.os, "listdir", no_reads)
    assert folder.scan(root, "train", rank=1, broadcast=lambda obj: sent[0]) == (classes, samples)


def test_val_labelled_by_train_classes_through_the_broadcast(tmp_path):
    root = _folder(tmp_path / "pets")
    sent = []
    folder.scan(root, "val", ["cat", "dog", "ship"], rank=0, broadcast=lambda obj: sent.append(obj) or obj)
    got = folder.scan(root, "val", ["cat", "dog", "ship"], rank=1, broadcast=lambda obj: sent[0])
    assert got == folder.scan(root, "val", ["cat", "dog", "ship"])
    assert [(p.name, label) for p, label in got[1]] == [("cat_0.JPEG", 0), ("dog_0.JPEG", 1)]


def test_rank_0s_refusal_is_raised_on_every_rank_so_none_waits(tmp_path):
    root = tmp_path / "empty"
    (root / "train").mkdir(parents=True)
    sent = []
    with pytest.raises(UsageError, match="train/ has no class folders") as on_rank0:
        folder.scan(root, "train", rank=0, broadcast=lambda obj: sent.append(obj) or obj)
    assert len(sent) == 1  # rank 0 joined the broadcast before raising: the others are not left waiting
    with pytest.raises(UsageError) as on_rank1:
        folder.scan(root, "train", rank=1, broadcast=lambda obj: sent[0])
    assert str(on_rank1.value) == str(on_rank0.value)
