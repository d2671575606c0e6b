"""LARS (`--optimizer lars`) against its formula, worked by hand here (MLPerf's ResNet reference, LARSOptimizer):
    trust = eta ||w|| / (||g|| + wd ||w||)  (1 where a norm is 0);  v = m v + lr trust (g + wd w);  w = w - v
and for biases and batch-norm parameters  v = m v + lr g  (no trust ratio, no decay)."""
import json

import pytest
import torch

from training.config import TrainConfig
from training.pytorch import optim

from tests.training.pytorch.conftest import TINY, training

LR, MOMENTUM, DECAY = 2.0, 0.9, 0.01  # eta is the reference's 0.001


class Tiny(torch.nn.Module):
    """A weight matrix, its bias and a batch-norm layer: what LARS adapts and what it leaves alone."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)
        self.norm = torch.nn.BatchNorm1d(2)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([[3.0, 4.0]]))  # ||w|| = 5
            self.linear.bias.copy_(torch.tensor([0.5]))
            self.norm.weight.copy_(torch.tensor([1.0, 1.0]))


def step(model, optimizer):
    model.linear.weight.grad = torch.tensor([[0.6, 0.8]])  # ||g|| = 1
    model.linear.bias.grad = torch.tensor([0.2])
    model.norm.weight.grad = torch.tensor([0.1, -0.1])
    model.norm.bias.grad = torch.tensor([0.0, 0.0])
    optimizer.step()


@pytest.fixture
def tiny():
    model = Tiny()
    cfg = TrainConfig(optimizer="lars", base_lr=LR, momentum=MOMENTUM, weight_decay=DECAY)
    optimizer = optim.build(model, cfg)
    for group in optimizer.param_groups:
        group["lr"] = LR  # as the runner sets it before each step
    return model, optimizer


def test_one_lars_step_by_hand(tiny):
    model, optimizer = tiny
    step(model, optimizer)
    # trust = 0.001 x 5 / (1 + 0.01 x 5) = 1/210; v = 2/210 x ([0.6, 0.8] + 0.01 x [3, 4]) = [0.63, 0.84] / 105
    #       = [0.006, 0.008]; w = [3, 4] - v
    assert model.linear.weight.flatten().tolist() == pytest.approx([2.994, 3.992], abs=1e-6)
    # bias and batch-norm: v = 2 x g, no decay, no trust ratio
    assert model.linear.bias.tolist() == pytest.approx([0.5 - 0.4], abs=1e-6)
    assert model.norm.weight.tolist() == pytest.approx([0.8, 1.2], abs=1e-6)
    assert model.norm.bias.tolist() == [0.0, 0.0]


def test_the_second_step_carries_momentum_with_the_lr_inside_it(tiny):
    model, optimizer = tiny
    step(model, optimizer)
    for group in optimizer.param_groups:
        group["lr"] = 1.0  # the schedule moved: the LR scales only this step's term, not the momentum
    step(model, optimizer)
    # after step 1: w = 0.998 x [3, 4], so ||w|| = 4.99; v1 = [0.006, 0.008]
    trust = 0.001 * 4.99 / (1 + 0.01 * 4.99)
    v2 = [0.9 * 0.006 + 1.0 * trust * (0.6 + 0.01 * 2.994), 0.9 * 0.008 + 1.0 * trust * (0.8 + 0.01 * 3.992)]
    assert model.linear.weight.flatten().tolist() == pytest.approx([2.994 - v2[0], 3.992 - v2[1]], abs=1e-7)
    # bias: v2 = 0.9 x 0.4 + 1.0 x 0.2 = 0.56
    assert model.linear.bias.tolist() == pytest.approx([0.1 - 0.56], abs=1e-6)


def test_a_zero_weight_takes_the_plain_step(tiny):
    model, optimizer = tiny
    with torch.no_grad():
        model.linear.weight.zero_()
    step(model, optimizer)
    # ||w|| = 0: trust 1, decay of a zero weight is 0: w = -2 x g
    assert model.linear.weight.flatten().tolist() == pytest.approx([-1.2, -1.6], abs=1e-6)


def test_resnet50_adapts_its_weight_tensors_and_skips_batch_norm_and_biases():
    import torchvision

    model = torchvision.models.resnet50(num_classes=4)
    adapted, skipped = optim.lars_param_groups(model, 1e-4)
    names = {id(p): name for name, p in model.named_parameters()}
    skipped_names = {names[id(p)] for p in skipped["params"]}
    assert skipped_names == {n for n, p in model.named_parameters() if ".bn" in n or "downsample.1" in n
                             or n.startswith("bn1") or n == "fc.bias"}
    assert {names[id(p)] for p in adapted["params"]} == {n for n, _ in model.named_parameters()} - skipped_names
    assert (adapted["adapt"], adapted["weight_decay"], skipped["adapt"], skipped["weight_decay"]) == \
        (True, 1e-4, False, 0.0)


def test_training_with_lars_under_horovod(tmp_path):
    # Horovod's DistributedOptimizer rebuilds the optimizer from its param groups alone
    out = tmp_path / "out"
    result = training("train", "--data", "synthetic", "--num-classes", "4", *TINY, "--steps", "4", "--optimizer",
                      "lars", "--output-dir", out)
    assert "(global 4)" in result.stdout and "lars, peak LR 10" in result.stdout  # the run's first line
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["optimizer"], summary["lr_schedule"], summary["distribution"]) == ("lars", "poly", "horovod")
    assert summary["final_loss"] == pytest.approx(summary["final_loss"])  # finite, not NaN
