"""The optimizer of a run (`--optimizer sgd|lars`, decided by config.resolve_optimizer).

LARS (You, Gitman, Ginsburg 2017, arXiv 1708.03888) as MLPerf's ResNet reference applies it
(mlcommons/training image_classification/tensorflow2/lars_optimizer.py, LARSOptimizer, with the skip list
['batch_normalization', 'bias'] and epsilon 0), per weight tensor w with gradient g:
    trust = eta x ||w|| / (||g|| + weight_decay x ||w||)     (1 where ||w|| or ||g|| is 0)
    v     = momentum x v + lr x trust x (g + weight_decay x w)
    w     = w - v
Biases and batch-norm parameters are left out of both the trust ratio and the weight decay: v = momentum x v +
lr x g. The LR sits inside the momentum buffer, as in the reference (PyTorch's SGD applies it outside).
"""
from __future__ import annotations

import torch

TRUST_COEFFICIENT = 0.001  # eta: the reference's "eeta" default, also You et al.'s


class Lars(torch.optim.Optimizer):
    """LARS with momentum, multi-tensor: a step is a few for-each kernels over all of a group's tensors (norms,
    trust ratios, updates, momentum) instead of ~17 ops for each of ResNet50's 54 weight tensors and ~4 for each of
    its 107 others (~1,350 launches a step). MLPerf's NVIDIA submissions fuse LARS the same way.

    Param groups with `adapt` False (biases, batch-norm) skip the trust ratio; their weight decay is 0 (see
    lars_param_groups). Every argument has a default: Horovod's DistributedOptimizer rebuilds the optimizer from
    its param groups alone. A group's "lr" stays a Python float (what Horovod's broadcast_optimizer_state, the
    runner and checkpoints read and write); the step copies it into a 0-d tensor on the parameters' device
    (`fill_`, no host sync) and the arithmetic reads only that tensor, so `compiled` (torch.compile of the update)
    compiles once, whatever the schedule does to the LR."""

    def __init__(self, params, lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 0.0,
                 trust_coefficient: float = TRUST_COEFFICIENT, adapt: bool = True, compiled: bool = False):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                                      trust_coefficient=trust_coefficient, adapt=adapt))
        self._lr: dict[tuple, torch.Tensor] = {}  # (device, dtype) -> the LR as a 0-d tensor there
        # torch.compile of the update alone (not the Python around it): one graph per group's shape of lists
        self._update = torch.compile(lars_update, fullgraph=False) if compiled else lars_update

    def lr_tensor(self, lr: float, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """The LR as a 0-d tensor on `device`, refilled in place (the same tensor every step: no recompile)."""
        key = (device, dtype)
        if key not in self._lr:
            self._lr[key] = torch.zeros((), device=device, dtype=dtype)
        return self._lr[key].fill_(lr)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            by_device: dict[tuple, tuple[list, list, list]] = {}
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(param)
                params, grads, bufs = by_device.setdefault((param.device, param.dtype), ([], [], []))
                params.append(param)
                grads.append(param.grad)
                bufs.append(state["momentum_buffer"])
            for (device, dtype), (params, grads, bufs) in by_device.items():
                self._update(params, grads, bufs, self.lr_tensor(group["lr"], device, dtype),
                             momentum=group["momentum"], decay=group["weight_decay"],
                             eta=group["trust_coefficient"], adapt=group["adapt"])
        return loss


def lars_update(params: list[torch.Tensor], grads: list[torch.Tensor], bufs: list[torch.Tensor], lr: torch.Tensor,
                *, momentum: float, decay: float, eta: float, adapt: bool) -> None:
    """One LARS step over lists of tensors on one device, in place (params and momentum buffers). `lr` is a 0-d
    tensor; nothing here reads a tensor's value on the host (no sync)."""
    if adapt:
        # All the norms at once, stacked: one trust ratio per tensor, computed as vectors.
        w_norm = torch.stack(torch._foreach_norm(params))
        g_norm = torch.stack(torch._foreach_norm(grads))
        trust = torch.where((w_norm > 0) & (g_norm > 0), eta * w_norm / (g_norm + decay * w_norm),
                            torch.ones_like(w_norm))
        scale = list((trust * lr).unbind(0))  # each tensor's own 0-d trust ratio x LR
    else:
        scale = lr
    if decay:
        updates = torch._foreach_add(grads, params, alpha=decay)
        torch._foreach_mul_(updates, scale)
    else:
        updates = torch._foreach_mul(grads, scale)
    torch._foreach_mul_(bufs, momentum)
    torch._foreach_add_(bufs, updates)  # v = momentum x v + lr x trust x (g + decay x w)
    torch._foreach_sub_(params, bufs)  # w = w - v


def lars_param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight tensors (convolutions, the classifier) adapted and decayed; 1-D parameters (in ResNet50 exactly
    the batch-norm scales and shifts and the classifier's bias, the reference's skip list) neither."""
    weights = [p for p in model.parameters() if p.ndim > 1]
    skipped = [p for p in model.parameters() if p.ndim <= 1]
    return [{"params": weights, "adapt": True, "weight_decay": weight_decay},
            {"params": skipped, "adapt": False, "weight_decay": 0.0}]


def build(model: torch.nn.Module, cfg) -> torch.optim.Optimizer:
    """`cfg.optimizer` (resolved: sgd or lars) over the model's parameters. The LR is set before every step
    (the runner's plan); the one given here is only the constructor's placeholder."""
    if cfg.optimizer == "lars":
        # On a GPU with --compile the update is compiled too (its for-each kernels fused); the LR tensor keeps
        # it to one compile.
        compiled = bool(getattr(cfg, "compile", False)) and next(model.parameters()).device.type == "cuda"
        return Lars(lars_param_groups(model, cfg.weight_decay), lr=cfg.base_lr, momentum=cfg.momentum,
                    compiled=compiled)
    # On a GPU the fused step: one kernel for every parameter's update rather than foreach's few per group
    # ("fused (bool, optional): whether the fused implementation is used", CUDA among its devices:
    # https://docs.pytorch.org/docs/stable/generated/torch.optim.SGD.html); the same arithmetic.
    return torch.optim.SGD(model.parameters(), lr=cfg.base_lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                           fused=fused_step(next(model.parameters()).device))


def fused_step(device: torch.device) -> bool | None:
    """SGD's `fused` for parameters on `device`: True on a GPU, None (torch's default: for-each) elsewhere."""
    return True if device.type == "cuda" else None


# How this process steps (fused, for-each): its own choice, not a checkpoint's. load_state_dict takes every
# param-group setting from the saved state, so a checkpoint from before the fused default, or from a CPU run, would
# otherwise turn the fused step off on a GPU (torch/optim/optimizer.py, Optimizer.load_state_dict: "update_group"
# keeps only the current group's params).
STEP_SETTINGS = ("fused", "foreach")


def load_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """`optimizer.load_state_dict(state)`, keeping this process's step settings (STEP_SETTINGS)."""
    kept = [{key: group[key] for key in STEP_SETTINGS if key in group} for group in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, settings in zip(optimizer.param_groups, kept):
        group.update(settings)
