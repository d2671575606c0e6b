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


# ImageNet's typical photo: about 400x350 to 500x500 px, ~110 KB as JPEG (`--imagenet-sizes`)
IMAGENET_WIDTHS, IMAGENET_HEIGHTS = (400, 500), (350, 500)


def _image(rng: np.random.Generator, cls: int, classes: int, width: int, height: int) -> Image.Image:
    hue = np.array([np.sin(cls * 2.4), np.sin(cls * 2.4 + 2.1), np.sin(cls * 2.4 + 4.2)]) * 90 + 128
    yy, xx = np.mgrid[0:height, 0:width]
    angle = np.pi * cls / classes
    side = max(width, height)
    stripes = np.sin((xx * np.cos(angle) + yy * np.sin(angle)) * 12 / side * np.pi)[..., None] * 50
    pixels = hue + stripes + rng.normal(0, 20, (height, width, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")


def _write(job: tuple[Path, tuple[int, int, int, int], int, int, bool]) -> int:
    path, (seed, split, cls, index), classes, size, imagenet_sizes = job
    rng = np.random.default_rng((seed, split, cls, index))  # one stream per image: the same for any job count
    if imagenet_sizes:
        width = int(rng.integers(*IMAGENET_WIDTHS, endpoint=True))
        height = int(rng.integers(*IMAGENET_HEIGHTS, endpoint=True))
    else:
        width = height = size
    _image(rng, cls, classes, width, height).save(path, quality=92)
    return path.stat().st_size


def make_dataset(out: Path, classes: int, per_class: int, size: int, val_per_class: int = 0, seed: int = 0,
                 imagenet_sizes: bool = False, jobs: int = 1) -> tuple[int, int]:
    """Write the dataset (`size` x `size` images, or ImageNet's sizes); returns (files, bytes). Existing files
    are overwritten. `jobs` processes encode in parallel; the images do not depend on it."""
    work = []
    for split_index, (split, n) in enumerate((("train", per_class), ("val", val_per_class))):
        for cls in range(classes if n else 0):  # no split folder without images: the trainer would refuse it
            folder = out / split / class_id(cls)
            folder.mkdir(parents=True, exist_ok=True)
            work += [(folder / f"{class_id(cls)}_{i:05d}.JPEG", (seed, split_index, cls, i), classes, size,
                      imagenet_sizes) for i in range(n)]
    if jobs > 1:
        from multiprocessing import Pool

        with Pool(jobs) as pool:
            sizes = pool.map(_write, work, chunksize=64)
    else:
        sizes = [_write(job) for job in work]
    return len(sizes), sum(sizes)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools synth-data", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder to write (created if missing)")
    parser.add_argument("--classes", type=int, default=4, help="number of classes (default: 4)")
    parser.add_argument("--per-class", type=int, default=32, help="training images per class (default: 32)")
    parser.add_argument("--val-per-class", type=int, default=8, help="validation images per class (default: 8)")
    parser.add_argument("--size", type=int, default=64, help="image side in pixels (default: 64)")
    parser.add_argument("--imagenet-sizes", action="store_true", help="ImageNet's photo sizes instead of --size: "
                        "%d-%d x %d-%d px, about 110 KB each" % (*IMAGENET_WIDTHS, *IMAGENET_HEIGHTS))
    parser.add_argument("--jobs", type=int, default=1, help="processes encoding JPEG files (default: 1)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    args = parser.parse_args(argv)
    for name in ("classes", "per_class", "size", "jobs"):
        if getattr(args, name) <= 0:
            parser.exit(2, f"error: --{name.replace('_', '-')} must be positive\n")
    if args.val_per_class < 0:
        parser.exit(2, "error: --val-per-class must be >= 0\n")
    try:
        count, size = make_dataset(args.out, args.classes, args.per_class, args.size, args.val_per_class, args.seed,
                                   args.imagenet_sizes, args.jobs)
    except OSError as err:
        parser.exit(2, f"error: --out {args.out}: {err.strerror}\n")
    shape = "ImageNet sizes" if args.imagenet_sizes else f"{args.size}x{args.size}"
    print(f"synth-data: wrote {count} JPEG files ({args.classes} classes, {shape}, {size / count / 1024:.0f} KB "
          f"each on average) to {args.out}")
    return 0
