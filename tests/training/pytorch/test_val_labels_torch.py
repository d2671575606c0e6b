"""PyTorch's folder data labels val/ by train/'s classes: a val/ that lacks train/'s first class (cat) keeps dog 1
and ship 2, as the model's head numbers them (training/data/folder.py: scan)."""
import torch

from tests.training.training_env import train_without_first_val_class
from training.config import TrainConfig, resolve_for_device
from training.pytorch.data import FolderData


def test_a_val_without_the_first_class_is_evaluated_under_train_labels(tmp_path):
    train_without_first_val_class(tmp_path)
    cfg = resolve_for_device(TrainConfig(data=str(tmp_path), image_size=32, batch_size=2, workers=0, num_classes=3,
                                         loader="pil"), gpu=False)
    data = FolderData(tmp_path, cfg, 0, 1, torch.device("cpu"))
    labels = sorted(label for _, batch in data.val for label in batch.tolist())
    assert labels == [1, 1, 2, 2]  # the old scan numbered val/'s own folders: dog 0, ship 1
