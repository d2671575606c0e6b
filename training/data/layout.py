"""Is a dataset in the layout the trainer reads? Pure (standard library only), over relative file names, so the
same check runs on a local folder before `python -m infra upload` moves a byte and on the `data` container's
listing before a job is submitted (infra/backends/staging.py), on either backend.

The trainer (training/data/folder.py) reads `--data DIR` as

  DIR/train/<class>/IMAGE    one folder per class, its images .jpg, .jpeg or .png (any case)
  DIR/val/<class>/IMAGE      optional, classes of train/ (all or some of them)

and numbers the classes in the sorted order of train/'s folder names, val/ labelled by that same list (a class
only in val/ has no label: refused here and by the trainer, in the words of `val_classes_problem`).
`python -m training stage --extract` makes that tree from ImageNet's archives (ILSVRC2012_img_train.tar,
..._val.tar): `archives_only` says whether a folder holds those instead.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

# What training/data/folder.py reads as an image (a test checks that the two agree).
IMAGE_SUFFIXES = frozenset({".jpeg", ".jpg", ".png"})
SPLITS = ("train", "val")
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")  # what `training stage --extract` unpacks (training/data/stage.py)
_SPLIT_ARCHIVE = re.compile(r"(?:^|[_\-.])(train|val)$", re.IGNORECASE)
EXPECTED = ("expected train/<class>/IMAGE (one folder per class; images .jpg, .jpeg or .png) and optionally "
            "val/<class>/IMAGE with classes of train/")


def is_image(name: str) -> bool:
    return PurePosixPath(name).suffix.lower() in IMAGE_SUFFIXES


def val_classes_problem(train: Iterable[str], val: Iterable[str]) -> str | None:
    """Why val/'s classes cannot be labelled by train/'s class list (as the trainer labels them), in one clause
    naming the folders and the fix, or None. val/ may lack some of train/'s classes; a class only in val/ has no
    label in the model."""
    only_val = sorted(set(val) - set(train))
    if not only_val:
        return None
    named = ", ".join(f"val/{name}/" for name in only_val[:5]) + (" ..." if len(only_val) > 5 else "")
    one = len(only_val) == 1
    return (f"{named} {'is not a class' if one else 'are not classes'} of train/ (the model's classes are train/'s "
            f"folders, and val/ is labelled by them): add {'it' if one else 'them'} to train/ or remove "
            f"{'it' if one else 'them'} from val/")


def split_archive(name: str) -> str | None:
    """"train" or "val" when `name` is one of ImageNet's split archives (ILSVRC2012_img_train.tar...), else None."""
    base = PurePosixPath(name).name
    for suffix in ARCHIVE_SUFFIXES:
        if base.lower().endswith(suffix):
            found = _SPLIT_ARCHIVE.search(base[:-len(suffix)])
            return found.group(1).lower() if found else None
    return None


@dataclass
class Layout:
    """What a tree holds, as far as the trainer goes: files per class of each split, and what lies elsewhere.
    Memory grows with the classes, not the files (a container of ImageNet is listed through it)."""

    classes: dict[str, dict[str, int]] = field(default_factory=lambda: {s: {} for s in SPLITS})
    images: dict[str, dict[str, int]] = field(default_factory=lambda: {s: {} for s in SPLITS})
    archives: dict[str, int] = field(default_factory=lambda: {s: 0 for s in SPLITS})
    files: int = 0
    stray_images: int = 0  # images outside SPLIT/<class>/ (a flat folder, or train/IMAGE)
    shards: int = 0  # shards/train-NNNNNN.tar: a sharded dataset (training/data/shards.py), its classes in its manifest

    def add(self, name: str) -> None:
        """One file, by its name relative to the dataset's root ("/"-separated)."""
        parts = PurePosixPath(name).parts
        self.files += 1
        image = is_image(name)
        if len(parts) == 3 and parts[0] in SPLITS:
            split, cls = parts[0], parts[1]
            self.classes[split][cls] = self.classes[split].get(cls, 0) + 1
            if image:
                self.images[split][cls] = self.images[split].get(cls, 0) + 1
            return
        if len(parts) == 2 and parts[0] == "shards" and re.match(r"^train-\d+\.tar$", parts[1]):
            self.shards += 1
            return
        archive = split_archive(name) if len(parts) == 1 else None
        if archive:
            self.archives[archive] += 1
        elif image:
            self.stray_images += 1

    def summary(self) -> str:
        """The layout in a line: classes and images per split."""
        train, val = self.images["train"], self.images["val"]
        line = f"{len(train)} classes, {sum(train.values())} training images"
        return line + (f", {sum(val.values())} validation images" if val else "")

    def problem(self, images: bool = True) -> str | None:
        """Why the trainer could not read this tree, in one clause, or None. `images`: a class counts only with
        image files (a local folder); without it, any file in train/<class>/ does (a container's listing, whose
        files the trainer checks itself)."""
        counted = self.images if images else self.classes
        train, val = counted["train"], counted["val"]
        if self.files == 0:
            return "it is empty"
        if not train:
            if self.shards:
                return None  # a sharded dataset: its manifest names the classes (training/data/shards.py checks it)
            if any(self.archives.values()) and not self.classes["train"]:
                return ("it holds ImageNet's archives, which the stack stages as they are (no --extract); unpack them "
                        "first (`python -m training stage ... --extract` onto a local disk) and upload that tree")
            held = (f"{self.stray_images} images outside class folders" if self.stray_images
                    else f"{self.files} files, no image in train/<class>/")
            return f"no class folders with images under train/ ({held})"
        return val_classes_problem(train, val)


def of_names(names: Iterable[str]) -> Layout:
    layout = Layout()
    for name in names:
        layout.add(name)
    return layout


def of_folder(root: Path) -> Layout:
    """The layout of a local folder (hidden files and folders, such as .staged, left out)."""
    def names():
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                if not name.startswith("."):
                    yield (Path(folder) / name).relative_to(root).as_posix()
    return of_names(names())
