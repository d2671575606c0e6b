"""The model starts with every residual block as the identity (zero_init_residual): a from-scratch run on a small
folder then does not blow up (training/pytorch/loop.py _build_model has the measured figures)."""
import torch

from training.config import TrainConfig
from training.pytorch.loop import _build_model


def test_each_blocks_last_batchnorm_starts_at_zero_and_the_rest_does_not():
    model = _build_model(TrainConfig(num_classes=3), torch.device("cpu"))
    blocks = [block for layer in (model.layer1, model.layer2, model.layer3, model.layer4) for block in layer]
    assert len(blocks) == 16  # ResNet50's bottlenecks
    assert all(torch.count_nonzero(block.bn3.weight) == 0 for block in blocks)
    assert all(torch.all(block.bn1.weight == 1) for block in blocks)  # the other norms keep their default
    assert model.fc.out_features == 3
