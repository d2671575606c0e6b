"""python -m training predict MODEL IMAGE... : the top classes of each image, by name, from a model.onnx that
training exported. onnxruntime runs the model; its metadata (training/model_card.py) gives the class names, the
normalisation, the input size and layout, and how evaluation resizes a photo, which PIL repeats here: for a
PyTorch model the shorter side to int(size x 256 / 224) and the centre square (torchvision's Resize and CenterCrop
on PIL, as the trainer's evaluation), for a TensorFlow model the whole photo to the square (PIL's bilinear resize,
close to tf.image.resize's). A model.onnx without our metadata is read with ImageNet's normalisation, NCHW, and
labels by index. Runs wherever onnxruntime, numpy and PIL are (.venv-torch, .venv-tf, the training images); the
deployer's .venv (requirements.txt) lacks onnxruntime: `.venv/bin/pip install -r training/requirements-predict.txt`
(REQUIREMENTS), and without it predict says so in one line.

A folder given as IMAGE stands for the images in it and below it (by suffix, sorted). A file that does not decode
is skipped and named on stderr at the end; the others are predicted (exit 0 when at least one was).

Examples:
  python -m training predict out/model.onnx photo.jpg
  python -m training predict out/model.onnx photos/ --top 3
  python -m training predict out/model.onnx photos/*.jpg --top 3 --image-size 320
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from training.errors import UsageError
from training.model_card import ModelCard

REQUIREMENTS = "training/requirements-predict.txt"  # onnxruntime at the training images' pin, numpy, pillow
# What a folder given as IMAGE is searched for (PIL reads all of these).
FOLDER_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})


def missing(module: str) -> UsageError:
    """The one line for a Python that lacks what predict runs on: the module and the install."""
    return UsageError(f"python -m training predict runs the model with onnxruntime, numpy and pillow, and this Python "
                      f"({sys.executable}) has no module {module!r}: pip install -r {REQUIREMENTS} (with this "
                      f"Python's pip, e.g. .venv/bin/pip), or run predict in .venv-torch or .venv-tf")


try:
    import numpy as np
    from PIL import Image
except ModuleNotFoundError as err:
    raise missing(err.name or "numpy") from None


@dataclass(frozen=True)
class Prediction:
    image: Path
    top: list[tuple[str, float]]  # (class name, probability), most probable first

    def line(self) -> str:
        return f"{self.image}: " + ", ".join(f"{name} {prob:.1%}" for name, prob in self.top)


def eval_pixels(image: Image.Image, size: int, resize: str) -> np.ndarray:
    """An RGB photo as evaluation feeds it to the model, before normalisation: size x size x 3 float32 in [0, 1]."""
    image = image.convert("RGB")
    if resize == "stretch":
        image = image.resize((size, size), Image.BILINEAR)
    else:  # center-crop: torchvision's Resize(int(size * 256 / 224)) then CenterCrop(size), on a PIL image
        short = int(size * 256 / 224)
        width, height = image.size
        if width <= height:
            new = (short, int(short * height / width))
        else:
            new = (int(short * width / height), short)
        image = image.resize(new, Image.BILINEAR)
        top, left = int(round((new[1] - size) / 2.0)), int(round((new[0] - size) / 2.0))
        image = image.crop((left, top, left + size, top + size))
    return np.asarray(image, dtype=np.float32) / 255.0


def model_input(pixels: np.ndarray, card: ModelCard) -> np.ndarray:
    """Normalised pixels in the model's layout (one image, no batch axis)."""
    normalised = (pixels - np.asarray(card.mean, np.float32)) / np.asarray(card.std, np.float32)
    return (normalised.transpose(2, 0, 1) if card.input_layout == "NCHW" else normalised).astype(np.float32)


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def top_k(probabilities: np.ndarray, card: ModelCard, k: int) -> list[tuple[str, float]]:
    order = np.argsort(-probabilities, kind="stable")[:k]
    return [(card.name(int(i)), float(probabilities[i])) for i in order]


def load(model: Path):
    """(onnxruntime session, model card) of a model.onnx; UsageError on a file that is not one, or without
    onnxruntime."""
    try:
        import onnxruntime
    except ModuleNotFoundError as err:
        raise missing(err.name or "onnxruntime") from None

    if not model.is_file():
        raise UsageError(f"MODEL {model}: no such file (give the model.onnx a training run exported)")
    try:
        session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001 - onnxruntime raises its own types for files it cannot load
        raise UsageError(f"MODEL {model}: onnxruntime cannot load it ({str(err).splitlines()[0][:160]})") from None
    (inputs,), (outputs, *_) = session.get_inputs(), session.get_outputs()
    layout = session.get_modelmeta().custom_metadata_map.get("input_layout", "NCHW")
    spatial = inputs.shape[2] if layout == "NCHW" else inputs.shape[1]
    classes = outputs.shape[-1]
    try:
        card = ModelCard.from_metadata(session.get_modelmeta().custom_metadata_map,
                                       num_classes=classes if isinstance(classes, int) else 0,
                                       image_size=spatial if isinstance(spatial, int) else 224)
    except ValueError as err:
        raise UsageError(f"MODEL {model}: {err}") from None
    return session, card


def expand(paths: list[Path]) -> list[Path]:
    """IMAGE arguments as files: a folder stands for the images in and below it (hidden ones left out), sorted; a
    missing path is refused."""
    files = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in FOLDER_SUFFIXES
                           and not any(part.startswith(".") for part in p.relative_to(path).parts))
            if not found:
                raise UsageError(f"IMAGE {path}: a folder without images ({', '.join(sorted(FOLDER_SUFFIXES))})")
            files += found
        elif path.exists():
            files.append(path)
        else:
            raise UsageError(f"IMAGE {path}: no such file or folder")
    return files


def unreadable_reason(err: BaseException) -> str:
    text = getattr(err, "strerror", None) or (str(err).strip().splitlines() or [type(err).__name__])[0]
    return "not an image PIL reads" if text.startswith("cannot identify image file") else text[:80]


def predict(model: Path, images: list[Path], k: int = 5, image_size: int = 0,
            skipped: list[tuple[Path, str]] | None = None) -> list[Prediction]:
    """The top `k` classes of each image that decodes (a folder: each image in it, as expand() finds); each one that does not is appended to `skipped` as (path,
    why), or, with no `skipped` list, stops the call before anything is predicted. `image_size`: the input size (0:
    the size the model trained at)."""
    session, card = load(model)
    images = expand(images)  # after the model: a Python without onnxruntime says so first
    size = image_size or card.image_size
    batch, read = [], []
    for path in images:
        try:
            with Image.open(path) as image:
                batch.append(model_input(eval_pixels(image, size, card.resize), card))
                read.append(path)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:  # PIL's for a broken file
            if skipped is None:
                raise UsageError(f"IMAGE {path}: not a readable image ({unreadable_reason(err)})") from None
            skipped.append((path, unreadable_reason(err)))
    if not batch:
        return []
    images = read
    name = session.get_inputs()[0].name
    try:
        logits = np.concatenate([session.run(None, {name: np.stack(batch[i:i + 16])})[0] for i in range(0, len(batch), 16)])
    except Exception as err:  # noqa: BLE001 - onnxruntime's error for an input size the model cannot take
        raise UsageError(f"--image-size {size}: the model does not take this input ({str(err).splitlines()[0][:160]})"
                         "; leave --image-size out") from None
    return [Prediction(path, top_k(p, card, min(k, p.shape[-1]))) for path, p in zip(images, softmax(logits))]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m training predict", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, metavar="MODEL", help="a model.onnx from a training run")
    parser.add_argument("images", type=Path, nargs="+", metavar="IMAGE",
                        help="photos (JPEG, PNG, anything PIL reads), or folders of them")
    parser.add_argument("--top", type=int, default=5, help="classes printed per image, most probable first (default: 5)")
    parser.add_argument("--image-size", type=int, default=0,
                        help="input size in pixels (default: the size the model trained at; the export takes others)")
    args = parser.parse_args(argv)
    if args.top <= 0:
        raise UsageError(f"--top must be positive, got {args.top}")
    if args.image_size < 0 or 0 < args.image_size < 32:
        raise UsageError(f"--image-size {args.image_size}: give 32 or more (or leave it out)")
    skipped: list[tuple[Path, str]] = []
    predictions = predict(args.model, args.images, args.top, args.image_size, skipped)
    for prediction in predictions:
        print(prediction.line())
    if skipped:
        shown = "; ".join(f"{path} ({why})" for path, why in skipped[:20]) + (" ..." if len(skipped) > 20 else "")
        print(f"predict: skipped {len(skipped)} file(s) that do not decode: {shown}", file=sys.stderr)
    if not predictions:
        raise UsageError(f"no image decoded ({len(skipped)} skipped, listed above): nothing predicted")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
