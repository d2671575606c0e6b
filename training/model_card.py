"""What a trained model says about itself, the same for every framework: its classes in label order, the input it
takes (size, layout, normalisation, how evaluation resizes a photo), the framework and the run that made it.

The runner writes the class names beside the model (OUTPUT_DIR/classes.json) and into summary.json; each export
stamps the whole card into model.onnx as metadata_props (string keys and values, JSON-encoded where a value is a
list); `python -m training predict` reads them back with onnxruntime, so a model.onnx is usable without the run's
folder or its flags. Standard library only (onnx is imported by `stamp_onnx` alone, in the exports).
"""
from __future__ import annotations

import dataclasses
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

# ImageNet's channel statistics, which every framework's input normalisation uses (training/data/folder.py reads them
# from here)
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# How evaluation brings a photo to the model's input (`resize` below):
#   center-crop: the shorter side to int(image_size * 256 / 224), then the centre image_size square (PyTorch's
#                evaluation transform, training/pytorch/data.py FolderDataset)
#   stretch:     the whole photo resized to image_size x image_size (TensorFlow's, training/tensorflow/data.py)
RESIZES = ("center-crop", "stretch")
LAYOUTS = ("NCHW", "NHWC")  # PyTorch's export takes NCHW, TensorFlow's NHWC; both float32 RGB normalised
SYNTHETIC_CLASSES = 1000  # --num-classes auto with synthetic data: ImageNet's


@dataclass(frozen=True)
class ModelCard:
    num_classes: int
    image_size: int  # the size it trained at; the ONNX input's height and width are dynamic where the model allows
    classes: tuple[str, ...] | None = None  # label i is classes[i]; None for synthetic data
    framework: str = ""
    run_id: str = ""
    mean: tuple[float, ...] = MEAN
    std: tuple[float, ...] = STD
    input_layout: str = "NCHW"  # the export sets it (LAYOUTS)
    resize: str = "center-crop"  # the export sets it (RESIZES)
    dataset: str = ""  # `NAME sha256:HASH` of the dataset it trained on (training/data/datasets.py card_text); "" unknown

    def name(self, label: int) -> str:
        """The class name of a label (its index when the model has no names)."""
        return self.classes[label] if self.classes and label < len(self.classes) else str(label)

    def metadata(self) -> dict[str, str]:
        """The card as ONNX metadata_props."""
        values = dataclasses.asdict(self)
        if self.classes is None:
            values.pop("classes")
        return {key: value if isinstance(value, str) else json.dumps(list(value) if isinstance(value, tuple) else value)
                for key, value in values.items()}

    @classmethod
    def from_metadata(cls, props: dict[str, str], num_classes: int, image_size: int) -> ModelCard:
        """The card of a model's metadata_props; what a model exported elsewhere lacks takes the defaults (ImageNet's
        normalisation, NCHW, centre crop). `num_classes`: the width of its logits (0: unknown, the metadata's);
        `image_size`: its input's size where fixed, for a model whose metadata has none.
        Raises ValueError on a value that is not what `metadata` writes."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        values = {}
        for key, text in props.items():
            if key not in known:
                continue
            try:
                value = text if known[key].type == "str" else json.loads(text)
            except json.JSONDecodeError:
                raise ValueError(f"metadata {key!r} is not JSON: {text[:40]!r}") from None
            values[key] = tuple(value) if isinstance(value, list) else value
        # the logits' width is the model's own (metadata cannot overrule it); the trained size is the metadata's
        values = {"num_classes": num_classes, "image_size": image_size, **values}
        if num_classes:
            values["num_classes"] = num_classes
        card = cls(**values)
        if card.input_layout not in LAYOUTS or card.resize not in RESIZES:
            raise ValueError(f"metadata input_layout {card.input_layout!r} or resize {card.resize!r} is not one of "
                             f"{LAYOUTS} / {RESIZES}")
        if card.classes is not None and len(card.classes) != card.num_classes:
            raise ValueError(f"metadata names {len(card.classes)} classes for {card.num_classes} logits")
        return card


def run_id(environ: dict[str, str] | None = None) -> str:
    """The run that made a model: Azure ML's run, else the Batch job (and task), else a fresh random id."""
    env = os.environ if environ is None else environ
    if env.get("AZUREML_RUN_ID"):
        return env["AZUREML_RUN_ID"]
    if env.get("AZ_BATCH_JOB_ID"):
        return "/".join(filter(None, (env["AZ_BATCH_JOB_ID"], env.get("AZ_BATCH_TASK_ID"))))
    return uuid.uuid4().hex[:12]


def write_classes(out: Path, classes: tuple[str, ...] | list[str]) -> Path:
    """OUTPUT_DIR/classes.json: the class names in label order (a JSON list), written whole or not at all."""
    path, tmp = out / "classes.json", out / "classes.json.tmp"
    tmp.write_text(json.dumps(list(classes), indent=1) + "\n")
    os.replace(tmp, path)
    return path


def stamp_onnx(path: Path, card: ModelCard) -> None:
    """Write the card into an ONNX file's metadata_props (replacing any of the same keys)."""
    import onnx

    model = onnx.load(str(path))
    metadata = card.metadata()
    kept = [p for p in model.metadata_props if p.key not in metadata]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    for key, value in metadata.items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(path))
