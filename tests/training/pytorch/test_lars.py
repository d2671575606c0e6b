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


class PerTensorLars(torch.optim.Optimizer):
    """The LARS this project shipped before the multi-tensor one (a Python loop over tensors, ~17 ops for each
    adapted one): the reference the for-each step must match."""

    def __init__(self, params, lr=0.1, momentum=0.9, weight_decay=0.0, trust_coefficient=0.001, adapt=True):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                                      trust_coefficient=trust_coefficient, adapt=adapt))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, momentum, decay = group["lr"], group["momentum"], group["weight_decay"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = param.grad
                if group["adapt"]:
                    w_norm, g_norm = torch.linalg.vector_norm(param), torch.linalg.vector_norm(grad)
                    trust = torch.where((w_norm > 0) & (g_norm > 0),
                                        group["trust_coefficient"] * w_norm / (g_norm + decay * w_norm),
                                        torch.ones_like(w_norm))
                    update = grad.add(param, alpha=decay).mul_(trust * lr)
                else:
                    update = grad.add(param, alpha=decay).mul_(lr) if decay else grad.mul(lr)
                state = self.state[param]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(param)
                param.sub_(state["momentum_buffer"].mul_(momentum).add_(update))


def _convnet(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 8, 3, bias=False), torch.nn.BatchNorm2d(8), torch.nn.Flatten(),
                               torch.nn.Linear(8 * 4 * 4, 5))


def test_the_multi_tensor_step_matches_the_per_tensor_one_over_steps_with_a_moving_lr():
    ours, ref = _convnet(0), _convnet(0)
    new = optim.Lars(optim.lars_param_groups(ours, DECAY), momentum=MOMENTUM)
    old = PerTensorLars(optim.lars_param_groups(ref, DECAY), momentum=MOMENTUM)
    torch.manual_seed(1)
    for step_number in range(6):
        images, labels = torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,))
        for model, optimizer in ((ours, new), (ref, old)):
            for group in optimizer.param_groups:
                group["lr"] = 5.0 / (1 + step_number)  # the schedule moves every step
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(images), labels).backward()
            optimizer.step()
    for (name, a), b in zip(ours.named_parameters(), ref.parameters()):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), name
    assert not torch.equal(ours[0].weight, _convnet(0)[0].weight)  # it moved


def test_a_resnet50_step_is_a_few_for_each_kernels_not_a_loop_over_its_161_tensors():
    import torchvision
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.ops += 1
            return func(*args, **(kwargs or {}))

    model = torchvision.models.resnet50(num_classes=4)
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.01)
    optimizer = optim.Lars(optim.lars_param_groups(model, 1e-4))
    optimizer.step()  # the first makes the momentum buffers
    with Count():
        optimizer.step()
    # the per-tensor loop: ~17 x 54 + ~4 x 107 = ~1,350 ops; the for-each step ~30 (a few per group)
    print(f"LARS step: {Count.ops} dispatched ops for {len(list(model.parameters()))} tensors")
    assert Count.ops < 60, Count.ops


def test_the_lr_reaches_a_compiled_update_as_a_tensor_so_a_schedule_change_does_not_recompile():
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    model = _convnet(0)
    optimizer = optim.Lars(optim.lars_param_groups(model, DECAY), momentum=MOMENTUM)
    torch._dynamo.reset()
    optimizer._update = torch.compile(optim.lars_update, backend=counter)
    for step_number in range(4):
        for group in optimizer.param_groups:
            group["lr"] = 0.1 * (step_number + 1)  # a float in the group, as the runner and Horovod keep it
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        optimizer.step()
    assert counter.frame_count == 2  # one graph per group (adapted, skipped), none again for a new LR
