"""python -m training predict MODEL IMAGE... : the top classes of each image, by name, from a model.onnx that
training exported. onnxruntime runs the model; its metadata (training/model_card.py) gives the class names, the
normalisation, the input size and layout, and how evaluation resizes a photo, which PIL repeats here: for a
PyTorch model the shorter side to int(size x 256 / 224) and the centre square (torchvision's Resize and CenterCrop
on PIL, as the trainer's evaluation), for a TensorFlow model the whole photo to the square (PIL's bilinear resize,
close to tf.image.resize's). A model.onnx without our metadata is read with ImageNet's normalisation, NCHW, and
labels by index. Runs wherever onnxruntime, numpy and PIL are (.venv-torch, .venv-tf, the training images); the
deployer's .venv (requirements.txt) lacks onnxruntime: `.venv/bin/pip install -r training/requirements-predict.txt`
(REQUIREMENTS), and without it predict says so in one line.

A folder given as IMAGE stands for the images in it and below it (by suffix, sorted); its other files (a .heic
from a phone, notes) are named on stderr as skipped for their type. A file that does not decode is skipped and named
on stderr at the end; the others are predicted (exit 0 when at least one was).

A labelled folder (images in folders named after the model's classes: pets/val/cat/1.jpg) is also scored: after
the predictions, top-1 accuracy overall and per class, and what each class is mistaken for (a confusion summary;
the whole matrix up to CONFUSION_MATRIX_MAX classes).

Examples:
  python -m training predict out/model.onnx photo.jpg
  python -m training predict out/model.onnx photos/ --top 3
  python -m training predict out/model.onnx photos/*.jpg --top 3 --image-size 320
  python -m training predict out/model.onnx pets/val/     # labelled: accuracy per class, confusion summary
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
# Photo formats PIL does not read without a plug-in: named with the fix.
CONVERT = {".heic": "an iPhone photo", ".heif": "an HEIF photo", ".avif": "an AVIF image", ".raw": "a camera raw",
           ".cr2": "a camera raw", ".nef": "a camera raw", ".dng": "a camera raw"}
CONFUSION_MATRIX_MAX = 10  # classes up to which the whole confusion matrix is printed


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
    label: str | None = None  # the class its folder names (a labelled folder), or None

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


def type_reason(path: Path) -> str:
    """Why a folder's file is skipped for its type, with the fix where there is one."""
    suffix = path.suffix.lower()
    if suffix in CONVERT:
        return f"{suffix}: {CONVERT[suffix]}, which PIL does not read; convert it to JPEG"
    return f"{suffix or 'no suffix'}: not an image type predict reads ({', '.join(sorted(FOLDER_SUFFIXES))})"


def expand(paths: list[Path], wrong_type: list[tuple[Path, str]] | None = None) -> list[Path]:
    """IMAGE arguments as files: a folder stands for the images in and below it (hidden ones left out), sorted; its
    other files are appended to `wrong_type` as (path, why); a missing path is refused."""
    files = []
    for path in paths:
        if path.is_dir():
            every = sorted(p for p in path.rglob("*") if p.is_file()
                           and not any(part.startswith(".") for part in p.relative_to(path).parts))
            found = [p for p in every if p.suffix.lower() in FOLDER_SUFFIXES]
            if wrong_type is not None:
                wrong_type += [(p, type_reason(p)) for p in every if p.suffix.lower() not in FOLDER_SUFFIXES]
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
            skipped: list[tuple[Path, str]] | None = None,
            wrong_type: list[tuple[Path, str]] | None = None) -> list[Prediction]:
    """predict_with_card's predictions."""
    return predict_with_card(model, images, k, image_size, skipped, wrong_type)[0]


def predict_with_card(model: Path, images: list[Path], k: int = 5, image_size: int = 0,
                      skipped: list[tuple[Path, str]] | None = None,
                      wrong_type: list[tuple[Path, str]] | None = None) -> tuple[list[Prediction], ModelCard]:
    """The top `k` classes of each image that decodes (a folder: each image in it, as expand() finds, its other files
    appended to `wrong_type`); each one that does not is appended to `skipped` as (path, why), or, with no `skipped`
    list, stops the call before anything is predicted. `image_size`: the input size (0: the size the model trained
    at). An image found in a folder given as IMAGE, in a subfolder named after one of the model's classes, carries that
    class as its label."""
    session, card = load(model)
    folders = [path for path in images if path.is_dir()]
    images = expand(images, wrong_type)  # after the model: a Python without onnxruntime says so first
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
        return [], card
    images = read
    name = session.get_inputs()[0].name
    try:
        logits = np.concatenate([session.run(None, {name: np.stack(batch[i:i + 16])})[0] for i in range(0, len(batch), 16)])
    except Exception as err:  # noqa: BLE001 - onnxruntime's error for an input size the model cannot take
        raise UsageError(f"--image-size {size}: the model does not take this input ({str(err).splitlines()[0][:160]})"
                         "; leave --image-size out") from None
    named = set(card.classes or ())

    def label(path: Path) -> str | None:
        # Only an image found in a folder given as IMAGE is labelled (pets/val/ scores): a photo named on its own
        # is a question, whatever folder it sits in.
        in_folder = any(folder in path.parents for folder in folders)
        return path.parent.name if in_folder and path.parent.name in named else None

    return [Prediction(path, top_k(p, card, min(k, p.shape[-1])), label(path))
            for path, p in zip(images, softmax(logits))], card


def score_lines(predictions: list[Prediction], classes: tuple[str, ...]) -> list[str]:
    """Top-1 accuracy of the labelled predictions, overall and per class (each with what it was mistaken for, most
    often first), and the confusion matrix when the classes are few; [] when none is labelled."""
    labelled = [p for p in predictions if p.label is not None]
    if not labelled:
        return []
    counts: dict[str, dict[str, int]] = {}
    for p in labelled:
        row = counts.setdefault(p.label, {})
        row[p.top[0][0]] = row.get(p.top[0][0], 0) + 1
    right = sum(row.get(label, 0) for label, row in counts.items())
    lines = [f"accuracy: {right / len(labelled):.3f} top-1 ({right}/{len(labelled)} labelled image(s), "
             f"{len(predictions) - len(labelled)} unlabelled); chance {1 / max(1, len(classes)):.3f}"]
    for label in [c for c in classes if c in counts]:
        row = counts[label]
        total, hits = sum(row.values()), row.get(label, 0)
        wrong = sorted(((n, c) for c, n in row.items() if c != label), key=lambda x: (-x[0], x[1]))
        mistaken = ("; mistaken for " + ", ".join(f"{c} {n}" for n, c in wrong[:3])
                    + (f" and {len(wrong) - 3} more" if len(wrong) > 3 else "")) if wrong else ""
        lines.append(f"  {label}: {hits / total:.3f} ({hits}/{total}){mistaken}")
    if len(classes) <= CONFUSION_MATRIX_MAX:
        width = max(len(c) for c in classes)
        lines.append("confusion (rows: true class, columns: predicted):")
        lines.append("  " + " " * width + "".join(f" {c:>{width}}" for c in classes))
        for label in [c for c in classes if c in counts]:
            lines.append(f"  {label:<{width}}" + "".join(f" {counts[label].get(c, 0):>{width}}" for c in classes))
    return lines


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
    wrong_type: list[tuple[Path, str]] = []
    predictions, card = predict_with_card(args.model, args.images, args.top, args.image_size, skipped, wrong_type)
    for prediction in predictions:
        print(prediction.line())
    for line in score_lines(predictions, card.classes or ()):
        print(line)
    for files, what in ((skipped, "that do not decode"), (wrong_type, "of a type predict does not read")):
        if files:
            shown = "; ".join(f"{path} ({why})" for path, why in files[:20]) + (" ..." if len(files) > 20 else "")
            print(f"predict: skipped {len(files)} file(s) {what}: {shown}", file=sys.stderr)
    if not predictions:
        raise UsageError(f"no image decoded ({len(skipped)} skipped, listed above): nothing predicted")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
