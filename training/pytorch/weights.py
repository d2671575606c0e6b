"""Starting weights (--init-from FILE, --pretrained): a torchvision ResNet50 state_dict or one of our checkpoints
loaded into the run's model, its last layer (fc) left freshly initialised when the file's has other classes: the
fine-tuning start most people with their own data want.

A file that is not ResNet50's weights is refused in one line before training starts. Every rank reads the file
(Horovod and DDP then broadcast rank 0's state anyway); --resume, when it finds a checkpoint, replaces all of it.
"""
from __future__ import annotations

from pathlib import Path

import torch

from training.errors import UsageError

HEAD = ("fc.weight", "fc.bias")  # torchvision ResNet50's last layer


def read_state(path: Path) -> dict[str, torch.Tensor]:
    """The model weights in a file: a torchvision state_dict, one of our checkpoints (its "model"), or a
    {"state_dict": ...} as other trainers save; DDP's "module." prefixes dropped. Tensors only (weights_only)."""
    flag = f"--init-from {path}"
    if not path.is_file():
        raise UsageError(f"{flag}: no such file (give a torchvision ResNet50 state_dict or a checkpoint .pt)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch.load raises many types for a file that is not its own
        line = str(err).strip().splitlines()[0][:120] if str(err).strip() else type(err).__name__
        raise UsageError(f"{flag}: not a PyTorch weights file ({line})") from None
    if isinstance(state, dict):
        for key in ("model", "state_dict"):  # ours (training/pytorch/loop.py checkpoint_state), others'
            if isinstance(state.get(key), dict):
                state = state[key]
                break
    if not isinstance(state, dict) or not state or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UsageError(f"{flag}: holds no state_dict of tensors (give a torchvision ResNet50 state_dict or a "
                         "checkpoint .pt)")
    return {key.removeprefix("module."): value for key, value in state.items()}


def pretrained_state() -> dict[str, torch.Tensor]:
    """torchvision's ImageNet weights (IMAGENET1K_V2, 80.9% top-1), from TORCH_HOME's cache or
    download.pytorch.org."""
    from torchvision.models import ResNet50_Weights

    weights = ResNet50_Weights.IMAGENET1K_V2
    try:
        # check_hash: the download's SHA-256 must start with the file name's hash (resnet50-11ad3fa6.pth), or
        # torch.hub refuses it (torch/hub.py, load_state_dict_from_url: HASH_REGEX, download_url_to_file)
        return weights.get_state_dict(progress=False, weights_only=True, check_hash=True)
    except OSError as err:  # URLError included: no egress
        raise UsageError(f"--pretrained: cannot fetch {weights.url} ({getattr(err, 'reason', err)}); on a node without "
                         "internet egress, download it elsewhere and give --init-from FILE") from None
    except RuntimeError as err:  # torch.hub's "invalid hash value": the partial download is removed, nothing kept
        if "hash" not in str(err):
            raise
        raise UsageError(f"--pretrained: {weights.url} arrived with the wrong SHA-256 ({str(err).splitlines()[0]}); "
                         "run again, or download it elsewhere and give --init-from FILE") from None


def load_into(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str) -> str:
    """Load `state` into ResNet50 `model`; the file's fc is left out when its shape differs (other classes), so the
    model keeps its own freshly initialised fc. Returns what happened, in words; UsageError when the file is not
    this architecture's weights."""
    own = model.state_dict()
    resized = [key for key in HEAD if key in state and key in own and state[key].shape != own[key].shape]
    sizes = (len(state[HEAD[1]]), len(own[HEAD[1]])) if resized and HEAD[1] in state else None
    state = {key: value for key, value in state.items() if key not in resized}
    unexpected = sorted(set(state) - set(own))
    # num_batches_tracked: older torchvision files lack it, and batch norm then starts it at 0
    missing = sorted(k for k in set(own) - set(state) - set(resized) if not k.endswith("num_batches_tracked"))
    wrong = sorted(k for k in set(state) & set(own) if state[k].shape != own[k].shape)
    problem = (f"{wrong[0]} is {tuple(state[wrong[0]].shape)}, ResNet50's is {tuple(own[wrong[0]].shape)}" if wrong
               else f"no {missing[0]}" if missing else f"an unknown {unexpected[0]}" if unexpected else "")
    if problem:
        raise UsageError(f"{source}: not torchvision ResNet50 weights ({problem}; {len(missing)} missing, "
                         f"{len(unexpected)} unknown)")
    model.load_state_dict(state, strict=False)
    if resized:
        classes = f" ({sizes[0]} classes there, {sizes[1]} here)" if sizes else ""
        return f"started from {source}; its last layer (fc) freshly initialised{classes}"
    return f"started from {source}"


def start_from(model: torch.nn.Module, init_from: str, pretrained: bool) -> str | None:
    """--init-from / --pretrained into `model`; returns the line to print, or None when neither is given."""
    if init_from:
        return load_into(model, read_state(Path(init_from)), f"--init-from {init_from}")
    if pretrained:
        return load_into(model, pretrained_state(), "--pretrained (torchvision IMAGENET1K_V2)")
    return None
