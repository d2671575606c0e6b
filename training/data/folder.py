"""The dataset folder every framework reads, `--data DIR`: an ImageNet-layout folder (train/<class>/IMAGE, its scan
and up-front check here, PIL only, no framework) or a sharded dataset (DIR/dataset.json says "format": "shards":
training/data/shards.py, read through training/data/shard_samples.py). `sharded` says which."""
from __future__ import annotations

import os
import random
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image

from training.data import layout, shards
from training.errors import UsageError
from training.model_card import MEAN, STD  # noqa: F401 - ImageNet channel statistics, read from here too

IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}
VERIFY_SAMPLE = 1000  # images opened up front to catch a broken dataset before the cluster spins


def sharded(root: Path) -> bool:
    """Whether `--data DIR` is a sharded dataset (its dataset.json says so) rather than one file per image."""
    return shards.is_sharded(root)


def class_names(root: Path, split: str = "train") -> list[str]:
    """The classes of a folder dataset in label order: its class folders' names, sorted (a sharded dataset: its
    manifest's "classes", made the same way). Every framework numbers labels by this list (through scan), and it
    is what the run writes beside its model (classes.json, the ONNX metadata); raises UsageError on a folder not in
    ImageNet layout."""
    if not root.is_dir():
        raise UsageError(f"--data {root}: no such folder (give an ImageNet-layout folder, a sharded dataset's "
                         "folder or 'synthetic')")
    if sharded(root):
        return list(shards.read_sharded(root).classes)
    folder = root / split
    if not folder.is_dir():
        raise UsageError(f"--data {root}: no {split}/ folder; expected ImageNet layout {split}/<class>/*.JPEG")
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    if not classes:
        raise UsageError(f"--data {root}: {split}/ has no class folders; expected {split}/<class>/*.JPEG")
    return classes


def num_classes(given: int, classes: list[str], root: Path | str) -> int:
    """The head's size for a folder of `classes`: their number when --num-classes is 0 (auto), else the given
    value, which must be that number (a head of another size would train logits no label reaches, or refuse
    labels)."""
    if given and given != len(classes):
        raise UsageError(f"--num-classes {given}: --data {root} has {len(classes)} class folders in train/ "
                         f"({', '.join(classes[:5])}{' ...' if len(classes) > 5 else ''}); leave --num-classes out "
                         f"(or 0) to take {len(classes)}")
    return len(classes)


def scan(root: Path, split: str, classes: list[str] | None = None, *, rank: int = 0,
         broadcast: Callable[[Any], Any] | None = None) -> tuple[list[str], list[tuple[Path, int]]]:
    """Classes and (path, label) of one split; raises UsageError on a folder not in ImageNet layout. `classes`:
    the list to label by (train/'s, for val/: a val/ that lacks one of them keeps every other label; a val/ class
    folder with images that is not in the list is refused, as the layout check refuses it); without it, the
    split's own class folders. With `broadcast` (the framework's collective: rank 0's object on every rank; every
    rank calls scan), rank 0 alone reads the folders and every rank builds its list from rank 0's listing: ImageNet's
    train/ is 1,000 folder reads returning 1.28 M names, which 64 ranks (8 nodes) would each ask of the share."""
    found, images = _listing(root, split) if broadcast is None else _rank0_listing(root, split, rank, broadcast)
    folder = root / split
    if classes is None:
        classes = found
    else:
        problem = layout.val_classes_problem(classes, [cls for cls in found if images[cls]])
        if problem:
            raise UsageError(f"--data {root}: {problem}")
    label = {cls: index for index, cls in enumerate(classes)}
    samples = [(folder / cls / name, label[cls]) for cls in found if cls in label for name in images[cls]]
    if not samples:
        raise UsageError(f"--data {root}: {split}/ has class folders but no .JPEG images")
    return classes, samples


def _listing(root: Path, split: str) -> tuple[list[str], dict[str, list[str]]]:
    """The split's class folders and each one's image names, sorted: the folder reads scan makes."""
    found = class_names(root, split)
    folder = root / split
    # os.path.splitext as Path.suffix reads a name (a leading dot is not a suffix)
    return found, {cls: sorted(name for name in os.listdir(folder / cls)
                               if os.path.splitext(name)[1].lower() in IMAGE_SUFFIXES) for cls in found}


def _rank0_listing(root: Path, split: str, rank: int,
                   broadcast: Callable[[Any], Any]) -> tuple[list[str], dict[str, list[str]]]:
    """Rank 0's _listing on every rank: its names joined and compressed (ImageNet's train/: 26.7 MB of names, 4.4 MB
    sent, 0.3 s to pack and 0.3 s to unpack on one core), or its refusal, raised on every rank so that none waits in
    a broadcast rank 0 never joins. (Every rank asks whether val/ exists itself: one stat, the same answer on a
    share or on nodes staged alike.)"""
    sent = None
    if rank == 0:
        try:
            found, images = _listing(root, split)
            sent = ("listing", found, [zlib.compress("\0".join(images[cls]).encode(), 1) for cls in found])
        except (UsageError, OSError) as err:
            sent = ("refused", type(err).__name__, str(err))
            broadcast(sent)
            raise
    got = broadcast(sent)
    if got[0] == "refused":
        raise (UsageError if got[1] == "UsageError" else OSError)(got[2])
    _, found, packed = got
    return found, {cls: names.split("\0") if names else [] for cls, names in
                   zip(found, (zlib.decompress(blob).decode() for blob in packed))}


def verify_images(samples: list[tuple[Path, int]], max_bad: float, seed: int) -> None:
    """Open a sample of the images; refuse the dataset when more than `max_bad` of them are unreadable."""
    chosen = random.Random(seed).sample(samples, min(VERIFY_SAMPLE, len(samples)))
    bad = []
    for path, _ in chosen:
        try:
            with Image.open(path) as image:
                image.verify()
        except Exception:  # noqa: BLE001 - PIL raises many types for broken files
            bad.append(path)
    if len(bad) > max_bad * len(chosen):
        raise UsageError(f"--data: {len(bad)} of {len(chosen)} sampled images are unreadable (e.g. {bad[0]}), "
                         f"more than --max-bad-images {max_bad}; fix or remove them")
