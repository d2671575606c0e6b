"""The ImageNet-layout folder every framework reads: its scan and up-front check (PIL only, no framework)."""
from __future__ import annotations

import random
from pathlib import Path

from PIL import Image

from training.errors import UsageError

IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # ImageNet channel statistics
VERIFY_SAMPLE = 1000  # images opened up front to catch a broken dataset before the cluster spins


def scan(root: Path, split: str) -> tuple[list[str], list[tuple[Path, int]]]:
    """Classes and (path, label) of one split; raises UsageError on a folder not in ImageNet layout."""
    folder = root / split
    if not folder.is_dir():
        raise UsageError(f"--data {root}: no {split}/ folder; expected ImageNet layout {split}/<class>/*.JPEG")
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    if not classes:
        raise UsageError(f"--data {root}: {split}/ has no class folders; expected {split}/<class>/*.JPEG")
    samples = [(p, label) for label, cls in enumerate(classes)
               for p in sorted((folder / cls).iterdir()) if p.suffix.lower() in IMAGE_SUFFIXES]
    if not samples:
        raise UsageError(f"--data {root}: {split}/ has class folders but no .JPEG images")
    return classes, samples


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
