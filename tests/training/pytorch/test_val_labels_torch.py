"""PyTorch's folder data labels val/ by train/'s classes: a val/ that lacks train/'s first class (cat) keeps dog 1
and ship 2, as the model's head numbers them (training/data/folder.py: scan)."""
import torch
from PIL import Image

from training.config import TrainConfig, resolve_for_device
from training.pytorch.data import FolderData


def test_a_val_without_the_first_class_is_evaluated_under_train_labels(tmp_path):
    for split, classes in (("train", ("cat", "dog", "ship")), ("val", ("dog", "ship"))):
        for shade, cls in enumerate(classes):
            (tmp_path / split / cls).mkdir(parents=True)
            for i in range(2):
                Image.new("RGB", (40, 40), (80 * shade, 40 * i, 0)).save(tmp_path / split / cls / f"{i}.jpg")
    cfg = resolve_for_device(TrainConfig(data=str(tmp_path), image_size=32, batch_size=2, workers=0, num_classes=3,
                                         loader="pil"), gpu=False)
    data = FolderData(tmp_path, cfg, 0, 1, torch.device("cpu"))
    labels = sorted(label for _, batch in data.val for label in batch.tolist())
    assert labels == [1, 1, 2, 2]  # the old scan numbered val/'s own folders: dog 0, ship 1
