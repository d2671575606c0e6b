"""Do a dataset's images decode? Checked on the local folder before an upload sends a byte, so a broken JPEG is
named on the member's machine and not by the trainer once the GPU nodes run (its check, training/data/folder.py
verify_images, opens a sample and stops the job when too many fail).

PIL only (the deployer's .venv has it, through matplotlib): no ML framework. Each image is decoded, not only
opened: a JPEG cut short or with broken entropy-coded data opens fine and fails in load(). JPEGs decode in PIL's
draft mode (libjpeg's DCT scaling to 1/8 of the size, https://pillow.readthedocs.io/en/stable/reference/Image.html
#PIL.Image.Image.draft), which still reads every byte of the image's data but skips most of the inverse DCT;
decoding runs in threads, since PIL releases the GIL while it decodes (ImageFile.load calls the C decoder).
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from training.data import layout

SHOWN = 5  # bad files named in the one line; the count says how many there are


def problem_with(path: Path) -> str | None:
    """Why `path` does not decode as an image, in a few words, or None when it does."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.draft("RGB", (max(1, image.width // 8), max(1, image.height // 8)))  # JPEG only; others ignore it
            image.load()
    except Image.DecompressionBombError:
        return "too many pixels"
    except (OSError, ValueError, SyntaxError, EOFError) as err:  # PIL's kinds for a broken or foreign file
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return "not an image PIL reads" if text.startswith("cannot identify image file") else text[:80]
    return None


def image_names(root: Path) -> list[str]:
    """The images the trainer reads (SPLIT/<class>/IMAGE), relative to `root`, in a stable order."""
    names = []
    for split in layout.SPLITS:
        base = root / split
        if base.is_dir():
            for cls in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
                names += [f"{split}/{cls.name}/{f.name}" for f in sorted(cls.iterdir())
                          if f.is_file() and layout.is_image(f.name) and not f.name.startswith(".")]
    return names


def undecodable(root: Path, names: Iterable[str] | None = None, workers: int = 0) -> list[tuple[str, str]]:
    """(name, why) of each image under `root` that does not decode; `names` default: image_names(root)."""
    names = list(image_names(root) if names is None else names)
    workers = workers or min(8, len(os.sched_getaffinity(0)) or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        found = pool.map(lambda name: (name, problem_with(root / name)), names)
        return [(name, why) for name, why in found if why]


def describe(bad: list[tuple[str, str]]) -> str:
    """The one clause naming them: '2 images do not decode: train/cat/a.jpg (image file is truncated), ...'."""
    named = ", ".join(f"{name} ({why})" for name, why in bad[:SHOWN]) + (" ..." if len(bad) > SHOWN else "")
    many = len(bad) != 1
    return (f"{len(bad)} image{'s' if many else ''} {'do' if many else 'does'} not decode: {named}; fix or remove "
            f"{'them' if many else 'it'}, nothing was uploaded")
