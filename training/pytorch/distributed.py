"""The two ways PyTorch training runs distributed, behind one small interface.

horovod: launched by horovodrun/mpirun; Horovod's DistributedOptimizer averages gradients.
ddp: launched by torchrun, or by horovodrun/mpirun (`python -m training launch`, Batch's job) with their rank
     variables mapped (training.cluster.launch.torch_rank_env); DistributedDataParallel averages gradients.

Every process that joins a group is bound to its node's GPU `local_rank` before the group's first collective
(bind_gpu): NCCL refuses two ranks on one device ("Duplicate GPU detected", NVIDIA/nccl src/init.cc), and every
rank left on cuda:0 would do so on an 8-GPU node.
"""
from __future__ import annotations

import inspect
import json
import os
import time

import torch

from training.cluster.launch import set_horovod_cycle, torch_rank_env
from training.errors import UsageError
from training import watchdog
from training.watchdog import collective_timeout
from training.pytorch import single


def bind_gpu(local_rank: int, local_size: int) -> torch.device:
    """This process's device: GPU `local_rank` of its node, made current (torch.cuda.set_device), or the CPU.
    The one place a PyTorch rank is bound: train and interconnect-check both come through init(). Refuses more
    ranks on a node than it has GPUs (they would share one, which NCCL refuses)."""
    count = torch.cuda.device_count()  # 0 without CUDA
    if not count:
        return torch.device("cpu")
    if local_size > count or local_rank >= count:
        raise UsageError(f"{local_size} ranks on this node but {count} GPU(s): start one rank per GPU (the job's "
                         "--slots, or torchrun's --nproc-per-node)")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def has_bf16(device: torch.device) -> bool:
    """Whether `device` computes in bf16: compute capability 8.0+ (training.config.auto_precision). Not
    torch.cuda.is_bf16_supported(), whose default (including_emulation=True) answers True on a T4 or V100 too:
    they run bf16 emulated, slower than fp32 (torch/cuda/__init__.py, torch 2.14)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)


class Horovod:
    name = "horovod"

    def __init__(self):
        import horovod.torch as hvd

        set_horovod_cycle(gpu=torch.cuda.is_available())
        hvd.init()
        self.hvd = hvd
        self.rank, self.size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()
        self.local_size = hvd.local_size()
        # Horovod: pin this rank to its GPU before the first collective (Horovod's own examples do it here).
        self.device = bind_gpu(self.local_rank, self.local_size)

    def wrap(self, model, optimizer, fp16_allreduce: bool):
        hvd = self.hvd
        # Horovod: average gradients across ranks during backward; optionally send them as fp16.
        compression = hvd.Compression.fp16 if fp16_allreduce else hvd.Compression.none
        # (DistributedOptimizer builds a new optimizer: load a checkpoint's optimizer state after this.)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=compression)
        return model, optimizer

    def zero_grad(self, optimizer) -> None:
        optimizer.zero_grad()  # Horovod 0.28's takes no arguments; torch 2 sets grads to None

    def sync_initial_state(self, model, optimizer) -> None:
        # Horovod: every rank starts from rank 0's weights and optimizer state (fresh or resumed).
        self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        self.hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    def step(self, optimizer, scaler) -> float:
        """The optimizer step after the all-reduces backward started; returns the seconds blocked waiting for them
        (training/efficiency.py's exchange: what overlapping with backward did not hide, waits for the slowest rank
        and Horovod's negotiation cycles included)."""
        if self.device.type == "cuda":
            # backward's kernels finished first, so the wait below is the exchange's alone: the compute stream only.
            # Not torch.cuda.synchronize(), which waits for every stream of the device, Horovod's NCCL stream
            # included (cudaDeviceSynchronize: "blocks until the device has completed all preceding requested
            # tasks", https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html): the all-reduces
            # it had queued would count as compute, and an exchange-bound run would read compute-bound.
            torch.cuda.current_stream(self.device).synchronize()
        watchdog.mark("the gradient exchange")  # backward's kernels done here: a rank stuck before this lags
        start = time.perf_counter()
        # Horovod: finish the allreduce, (unscale,) then step without a second allreduce.
        optimizer.synchronize()
        waited = time.perf_counter() - start
        if scaler is None:
            with optimizer.skip_synchronize():
                optimizer.step()
            return waited
        scaler.unscale_(optimizer)
        with optimizer.skip_synchronize():
            scaler.step(optimizer)
        scaler.update()
        return waited

    def mean(self, value: float) -> float:
        return self.hvd.allreduce(torch.tensor(float(value)), op=self.hvd.Average, name="metric").item()

    def sum(self, value: float) -> float:
        return self.hvd.allreduce(torch.tensor(float(value)), op=self.hvd.Sum, name="metric_sum").item()

    def broadcast_object(self, obj):
        # An explicit name: the default is the type name, which differs when non-root ranks pass None.
        return self.hvd.broadcast_object(obj, root_rank=0, name="broadcast_object")

    def shutdown(self) -> None:
        self.hvd.shutdown()


def ddp_settings(accepted) -> dict:
    """DistributedDataParallel's settings beyond its defaults (pure; `accepted`: its constructor's parameter names,
    which moved between torch versions). From torch/nn/parallel/distributed.py's docstring (torch 2.14):
    - no buffer broadcast before every forward (`forward_sync_buffers=False`, before 2.13 `broadcast_buffers=False`):
      the buffers (batch-norm statistics) are synced at construction, then each rank keeps its own, as under Horovod
      (broadcast_parameters once at the start); a broadcast per step is ResNet50's 53 batch-norm layers' buffers;
    - `gradient_as_bucket_view=True`: "gradients will be views pointing to different offsets of allreduce
      communication buckets ... it avoids the overhead of copying between gradients and allreduce communication
      buckets"; the views last while the optimizer zeroes gradients in place (Ddp.zero_grad), not to None, since
      "the bucket view alias is destroyed every iteration" with set_to_none."""
    if os.environ.get("TRAINING_DDP_SETTINGS") == "torch":  # DDP's own defaults, for a before/after measurement
        return {}
    settings = {"gradient_as_bucket_view": True}
    settings["forward_sync_buffers" if "forward_sync_buffers" in accepted else "broadcast_buffers"] = False
    return settings


class StoreSigns:
    """The watchdog's signs of life through the process group's key-value store (the TCPStore that torch.distributed's
    rendezvous runs on rank 0's host), instead of files on a shared folder. Under Azure ML the outputs folder is a
    blob-fuse mount whose cache makes another node's rewrites of a small file stale (the watchdog would read a live
    rank as stopped); the store answers every rank from one place. A store that does not answer (rank 0's host
    frozen) blocks only the watchdog's sign-of-life thread, as a hung share would."""

    def __init__(self, store, world: int):
        self.store, self.world = store, world
        self.where = "the process group's store (rank 0's host)"

    @staticmethod
    def key(rank: int) -> str:
        return f"training-watchdog/alive/{rank}"

    def write(self, record: dict) -> None:
        self.store.set(self.key(record["rank"]), json.dumps(record))

    def read(self) -> dict[int, dict]:
        found = {}
        for rank in range(self.world):
            if self.store.check([self.key(rank)]):  # get() would wait for a key not yet written
                found[rank] = json.loads(self.store.get(self.key(rank)))
        return found

    def remove(self, rank: int) -> None:
        try:
            self.store.delete_key(self.key(rank))
        except (RuntimeError, OSError):
            pass  # the store's host has ended its run already


def store_signs(env, world: int):
    """StoreSigns over the default process group's store under Azure ML (AZUREML_RUN_ID set), else None (the
    share's files). The store is torch.distributed's default group's (`_get_default_store`, not public API: where
    it is missing, the files)."""
    if not env.get("AZUREML_RUN_ID"):
        return None
    from torch.distributed import distributed_c10d

    getter = getattr(distributed_c10d, "_get_default_store", None)
    return StoreSigns(getter(), world) if getter else None


class Ddp:
    name = "ddp"

    def __init__(self, compiler: str = "eager"):
        import torch.distributed as dist

        os.environ.update(torch_rank_env(os.environ))  # torchrun's, or mpirun's/horovodrun's mapped
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.local_size = int(os.environ["LOCAL_WORLD_SIZE"])
        self.device = bind_gpu(self.local_rank, self.local_size)  # before NCCL's communicator is made
        if self.device.type == "cuda":  # a timed-out collective leaves its trace on node-local disk (watchdog.py)
            os.environ.update(watchdog.flight_recorder_env(os.environ))
            watchdog.local_dir().mkdir(parents=True, exist_ok=True)
        # A collective that waits past the watchdog's start-up floor fails (and with TORCH_NCCL_ASYNC_ERROR_HANDLING=1,
        # set by launch, ends the process) rather than waiting PyTorch's 10 min (NCCL) or 30 min (Gloo): watchdog.py
        # The first step's collectives wait for every rank's compile: the timeout follows the compiler as the
        # watchdog's start-up bound does (watchdog.start_up_s).
        dist.init_process_group(backend="nccl" if self.device.type == "cuda" else "gloo",
                                timeout=collective_timeout(os.environ, compiler))
        self.dist = dist
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        signs = store_signs(os.environ, self.size)  # Azure ML: the watchdog's signs of life through the store
        if signs:
            watchdog.prefer_signs(signs)

    def wrap(self, model, optimizer, fp16_allreduce: bool):
        from torch.nn.parallel import DistributedDataParallel

        # DDP broadcasts rank 0's parameters and buffers at construction and averages gradients during backward.
        ddp_model = DistributedDataParallel(model, device_ids=[self.local_rank] if self.device.type == "cuda" else None,
                                            **ddp_settings(inspect.signature(DistributedDataParallel).parameters))
        if fp16_allreduce:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            ddp_model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return ddp_model, optimizer

    def sync_initial_state(self, model, optimizer) -> None:
        pass  # DDP broadcast rank 0's parameters when it wrapped the model; every rank loaded the same checkpoint

    def zero_grad(self, optimizer) -> None:
        optimizer.zero_grad(set_to_none=False)  # in place: the gradients stay views of DDP's buckets (ddp_settings)

    def step(self, optimizer, scaler) -> None:
        """None: DDP's all-reduce finishes inside backward (its reducer waits for it), so the exchange is not
        measured apart from compute."""
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()

    def _reduce(self, value: float, op) -> float:
        tensor = torch.tensor(float(value), device=self.device)
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


def init(backend: str, compiler: str = "eager"):
    if backend == "horovod" and not single.horovod_installed() and not single.launched_with_others(os.environ):
        return single.Single()  # one process needs no Horovod (the local quickstart's light environment)
    return Horovod() if backend == "horovod" else Ddp(compiler)
