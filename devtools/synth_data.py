"""A small dataset of real JPEG files in ImageNet layout, for the demo and the tests.

Each class has its own colour and stripe direction under per-image noise, so a model can learn it and a
falling loss means something. Layout: OUT/train/<wnid>/<wnid>_<n>.JPEG and OUT/val/<wnid>/...
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image


def class_id(index: int) -> str:
    return f"n{index:08d}"  # ImageNet class folders are WordNet ids like n01440764


def _image(rng: np.random.Generator, cls: int, classes: int, size: int) -> Image.Image:
    hue = np.array([np.sin(cls * 2.4), np.sin(cls * 2.4 + 2.1), np.sin(cls * 2.4 + 4.2)]) * 90 + 128
    yy, xx = np.mgrid[0:size, 0:size]
    angle = np.pi * cls / classes
    stripes = np.sin((xx * np.cos(angle) + yy * np.sin(angle)) * 12 / size * np.pi)[..., None] * 50
    pixels = hue + stripes + rng.normal(0, 20, (size, size, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")


def make_dataset(out: Path, classes: int, per_class: int, size: int, val_per_class: int = 0, seed: int = 0) -> int:
    """Write the dataset; returns the number of files. Existing files are overwritten."""
    rng = np.random.default_rng(seed)
    count = 0
    for split, n in (("train", per_class), ("val", val_per_class)):
        for cls in range(classes):
            folder = out / split / class_id(cls)
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                _image(rng, cls, classes, size).save(folder / f"{class_id(cls)}_{i:05d}.JPEG", quality=90)
                count += 1
    return count


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools synth-data", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder to write (created if missing)")
    parser.add_argument("--classes", type=int, default=4, help="number of classes (default: 4)")
    parser.add_argument("--per-class", type=int, default=32, help="training images per class (default: 32)")
    parser.add_argument("--val-per-class", type=int, default=8, help="validation images per class (default: 8)")
    parser.add_argument("--size", type=int, default=64, help="image side in pixels (default: 64)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    args = parser.parse_args(argv)
    for name in ("classes", "per_class", "size"):
        if getattr(args, name) <= 0:
            parser.exit(2, f"error: --{name.replace('_', '-')} must be positive\n")
    if args.val_per_class < 0:
        parser.exit(2, "error: --val-per-class must be >= 0\n")
    try:
        count = make_dataset(args.out, args.classes, args.per_class, args.size, args.val_per_class, args.seed)
    except OSError as err:
        parser.exit(2, f"error: --out {args.out}: {err.strerror}\n")
    print(f"synth-data: wrote {count} JPEG files ({args.classes} classes, {args.size}x{args.size}) to {args.out}")
    return 0
