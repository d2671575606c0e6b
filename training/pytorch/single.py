"""One PyTorch process with no launcher and no Horovod: the local quickstart's path (README), which needs neither
`make setup`'s Horovod build nor horovodrun. training/pytorch/distributed.py's init() picks it for --dist horovod
when Horovod is not installed and no launcher started this process; the interface is the one the loop uses for
Horovod and DDP, with nothing to exchange.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Mapping

import torch

# A launcher's world-size variables: mpirun's (horovodrun's default), Horovod's Gloo launcher's, torchrun's, PMI's.
WORLD_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "HOROVOD_SIZE", "WORLD_SIZE", "PMI_SIZE")


def launched_with_others(env: Mapping[str, str]) -> bool:
    """Whether a launcher started this process as one of several (then it must join their group, not go alone)."""
    return any(env.get(name, "1") != "1" for name in WORLD_SIZE_VARIABLES)


def horovod_installed() -> bool:
    # Found, not imported: importing horovod.torch initialises its C++ library.
    return importlib.util.find_spec("horovod") is not None


class Single:
    """One process on this machine's first GPU, or its CPU."""
    name = "one process"
    rank, size, local_rank, local_size = 0, 1, 0, 1

    def __init__(self):
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(0)
        self.device = torch.device("cuda", 0) if cuda else torch.device("cpu")

    def wrap(self, model, optimizer, fp16_allreduce: bool):
        return model, optimizer  # nothing to average gradients with

    def sync_initial_state(self, model, optimizer) -> None:
        pass

    def zero_grad(self, optimizer) -> None:
        optimizer.zero_grad()

    def step(self, optimizer, scaler) -> float:
        """The optimizer step; 0.0 seconds waiting for an exchange, since there is none."""
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()
        return 0.0

    def mean(self, value: float) -> float:
        return float(value)

    def sum(self, value: float) -> float:
        return float(value)

    def broadcast_object(self, obj):
        return obj

    def shutdown(self) -> None:
        pass
