"""The two ways PyTorch training runs distributed, behind one small interface.

horovod: launched by horovodrun/mpirun; Horovod's DistributedOptimizer averages gradients.
ddp: launched by torchrun; DistributedDataParallel averages gradients.
"""
from __future__ import annotations

import os

import torch

from training.cluster.launch import set_horovod_cycle


class Horovod:
    name = "horovod"

    def __init__(self):
        import horovod.torch as hvd

        set_horovod_cycle(gpu=torch.cuda.is_available())
        hvd.init()
        self.hvd = hvd
        self.rank, self.size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()
        self.local_size = hvd.local_size()

    def wrap(self, model, optimizer, fp16_allreduce: bool):
        hvd = self.hvd
        # Horovod: average gradients across ranks during backward; optionally send them as fp16.
        compression = hvd.Compression.fp16 if fp16_allreduce else hvd.Compression.none
        # (DistributedOptimizer builds a new optimizer: load a checkpoint's optimizer state after this.)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=compression)
        return model, optimizer

    def sync_initial_state(self, model, optimizer) -> None:
        # Horovod: every rank starts from rank 0's weights and optimizer state (fresh or resumed).
        self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        self.hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    def step(self, optimizer, scaler) -> None:
        if scaler is None:
            optimizer.step()
            return
        # Horovod with loss scaling: finish the allreduce, unscale, then step without a second allreduce.
        optimizer.synchronize()
        scaler.unscale_(optimizer)
        with optimizer.skip_synchronize():
            scaler.step(optimizer)
        scaler.update()

    def mean(self, value: float) -> float:
        return self.hvd.allreduce(torch.tensor(float(value)), op=self.hvd.Average, name="metric").item()

    def sum(self, value: float) -> float:
        return self.hvd.allreduce(torch.tensor(float(value)), op=self.hvd.Sum, name="metric_sum").item()

    def broadcast_object(self, obj):
        # An explicit name: the default is the type name, which differs when non-root ranks pass None.
        return self.hvd.broadcast_object(obj, root_rank=0, name="broadcast_object")

    def shutdown(self) -> None:
        self.hvd.shutdown()


class Ddp:
    name = "ddp"

    def __init__(self):
        import torch.distributed as dist

        if "RANK" not in os.environ:
            os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        self.dist = dist
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.local_size = int(os.environ.get("LOCAL_WORLD_SIZE", 1))

    def wrap(self, model, optimizer, fp16_allreduce: bool):
        from torch.nn.parallel import DistributedDataParallel

        # DDP broadcasts rank 0's parameters at construction and averages gradients during backward.
        ddp_model = DistributedDataParallel(model, device_ids=[self.local_rank] if torch.cuda.is_available() else None)
        if fp16_allreduce:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            ddp_model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return ddp_model, optimizer

    def sync_initial_state(self, model, optimizer) -> None:
        pass  # DDP broadcast rank 0's parameters when it wrapped the model; every rank loaded the same checkpoint

    def step(self, optimizer, scaler) -> None:
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()

    def _reduce(self, value: float, op) -> float:
        tensor = torch.tensor(float(value), device="cuda" if torch.cuda.is_available() else "cpu")
        self.dist.all_reduce(tensor, op=op)
        return tensor.item()

    def mean(self, value: float) -> float:
        return self._reduce(value, self.dist.ReduceOp.SUM) / self.size

    def sum(self, value: float) -> float:
        return self._reduce(value, self.dist.ReduceOp.SUM)

    def broadcast_object(self, obj):
        holder = [obj]
        self.dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def shutdown(self) -> None:
        self.dist.destroy_process_group()


def init(backend: str):
    return Horovod() if backend == "horovod" else Ddp()
