"""ResNet50 with PyTorch under Horovod (or DDP): what the runner (training/runner.py) needs from PyTorch.

Launch (see docs/training.md):
  1 process:   python -m training train --data synthetic --steps 100
  2 on a node: horovodrun -np 2 -H localhost:2 python -m training train --data /data/imagenet
  2 nodes x 8: horovodrun -np 16 -H node1:8,node2:8 python -m training train --data /data/imagenet
  DDP:         torchrun --nproc-per-node 2 -m training train --dist ddp --data synthetic --steps 100
"""
from __future__ import annotations

import contextlib
import os
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from training import efficiency, interconnect, runner, watchdog
from training.metrics import usable_cores
from training.config import TrainConfig, as_dict, resolve_for_device, resolve_optimizer
from training.pytorch import distributed, optim, weights
from training.pytorch.data import FolderData, SyntheticData

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def compile_env(env, cores: int, local_size: int) -> dict[str, str]:
    """What torch.compile's workers need on an 8-GPU node, for what the user has not set (pure). Inductor sizes its
    compile workers from the machine's cores (torch/_inductor/config.py `compile_threads`, TORCHINDUCTOR_COMPILE_THREADS),
    so 8 ranks compiling at once would start 8 x 96 workers on 96 cores: each rank gets cores / ranks. Its caches
    (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR; /tmp by default, the container's) go to the node's shared folder,
    node-local disk that every task on the node can use (AZ_BATCH_NODE_SHARED_DIR:
    https://learn.microsoft.com/azure/batch/batch-compute-node-environment-variables), so a retry on the node
    reuses the compiled kernels instead of compiling again."""
    wanted = {"TORCHINDUCTOR_COMPILE_THREADS": str(max(1, cores // max(1, local_size)))}
    node = env.get("AZ_BATCH_NODE_SHARED_DIR")
    if node:
        wanted["TORCHINDUCTOR_CACHE_DIR"] = str(Path(node) / "torchinductor")
        wanted["TRITON_CACHE_DIR"] = str(Path(node) / "triton")
    return {name: value for name, value in wanted.items() if not env.get(name)}


def _build_model(cfg: TrainConfig, device):
    import torchvision

    torch.manual_seed(cfg.seed)  # the same initial weights on every rank and every run
    # Each residual block's last BatchNorm starts at zero (torchvision's zero_init_residual, after Goyal et al.,
    # https://arxiv.org/abs/1706.02677 section 5.1): every block starts as the identity, which keeps a from-scratch
    # run on a small folder from blowing up (measured: a 90-image, 3-class folder ended at chance with val loss 26 -> 652
    # without it, and reached 0.58 top-1 with val loss 1.07-1.16 with it; one run each on 24 val images).
    model = torchvision.models.resnet50(num_classes=cfg.num_classes, zero_init_residual=True).to(device)
    # Horovod 0.28 allreduces only NCHW-contiguous tensors, so under Horovod the weights (and so their
    # gradients) stay NCHW and only the activations go channels-last; DDP takes channels-last weights.
    if cfg.channels_last and cfg.dist == "ddp":
        model = model.to(memory_format=torch.channels_last)
    return model


class TorchWriter:
    def __init__(self, directory: Path):
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(str(directory))

    def scalar(self, tag: str, value: float, step: int) -> None:
        self._writer.add_scalar(tag, value, step)

    def close(self) -> None:
        self._writer.close()


class TorchLoop:
    checkpoint_suffix = ".pt"

    def __init__(self, cfg: TrainConfig):
        # binds this rank to its node's GPU local_rank (or the CPU); DDP's collective timeout follows the compiler
        self.dist = distributed.init(cfg.dist, watchdog.compiler_of(cfg))
        self.torch_device = self.dist.device
        cuda = self.torch_device.type == "cuda"
        self.cfg = cfg = resolve_for_device(cfg, cuda, bf16=distributed.has_bf16(self.torch_device))
        self.distribution, self.rank, self.size = self.dist.name, self.dist.rank, self.dist.size
        self.device = "gpu" if cuda else "cpu"
        if cuda:
            torch.backends.cudnn.benchmark = True
        else:
            # Ranks on one host share its cores: more threads than cores makes every collective wait on a
            # descheduled thread (measured: 2 ranks x 2 threads on 2 cores ran 10x slower than 1 thread each).
            torch.set_num_threads(max(1, usable_cores() // self.dist.local_size))
        if cfg.compile:  # the caches' folders are read at the first compile; the thread count was read at import
            os.environ.update(compile_env(os.environ, usable_cores(), self.dist.local_size))
            import torch._inductor.config as inductor_config

            inductor_config.compile_threads = int(os.environ["TORCHINDUCTOR_COMPILE_THREADS"])
        global_batch = cfg.batch_size * self.size
        self.cfg = cfg = resolve_optimizer(cfg, global_batch)  # sgd or lars, by the global batch
        self.data = (SyntheticData(cfg, global_batch, self.torch_device, self.rank) if cfg.data == "synthetic"
                     else FolderData(Path(cfg.data), cfg, self.rank, self.size, self.torch_device,
                                     broadcast=self.dist.broadcast_object))
        self.steps_per_epoch = self.data.steps_per_epoch
        model = _build_model(cfg, self.torch_device)
        started = weights.start_from(model, cfg.init_from, cfg.pretrained)  # --init-from / --pretrained, if given
        if started and self.rank == 0:
            print(started, flush=True)
        optimizer = optim.build(model, cfg)
        self.scaler = torch.amp.GradScaler(self.torch_device.type) if cfg.precision == "fp16" else None
        self.model, self.optimizer = self.dist.wrap(model, optimizer, cfg.fp16_allreduce)
        self.step_times = efficiency.StepTimes()  # fit() adds each step's data wait, compute and exchange wait
        # and, on a GPU, the GPU's idle time between steps (CUDA events, read once they have completed)
        self.gpu_idle = efficiency.GpuIdle(lambda: torch.cuda.Event(enable_timing=True)) if cuda else None

    @property
    def module(self) -> torch.nn.Module:
        return getattr(self.model, "module", self.model)  # DDP wraps the model

    def load_checkpoint(self, path: Path) -> dict:
        state = torch.load(path, map_location="cpu", weights_only=False)
        if not isinstance(state, dict) or not {"step", "model", "optimizer"} <= set(state):
            raise ValueError("not a training checkpoint")
        return state

    def restore(self, state: dict) -> None:
        self.module.load_state_dict(state["model"])
        optim.load_state(self.optimizer, state["optimizer"])  # after Horovod's wrap, which builds a new optimizer
        if self.scaler and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])

    def checkpoint_state(self, step: int) -> dict:
        return {"step": step, "model": self.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler else None, "config": as_dict(self.cfg)}

    def save_checkpoint(self, state: dict, path: Path) -> None:
        torch.save(state, path)

    def broadcast_object(self, obj):
        return self.dist.broadcast_object(obj)

    def fit(self, start, stop_at, lr_for, after_step) -> int:
        cfg, device = self.cfg, self.torch_device
        self.dist.sync_initial_state(self.model, self.optimizer)  # fresh or resumed: rank 0's state everywhere
        train_model = torch.compile(self.model, mode=cfg.compile_mode) if cfg.compile else self.model
        autocast = (torch.autocast(device.type, dtype=AUTOCAST_DTYPES[cfg.precision])
                    if cfg.precision in AUTOCAST_DTYPES else contextlib.nullcontext())
        step = start
        self.model.train()
        fetching = time.perf_counter()  # data wait: from here to the batch on its way to the device
        while step < stop_at:
            epoch, offset = divmod(step, self.steps_per_epoch)
            for images, labels in self.data.epoch_batches(epoch, offset):
                if self.gpu_idle:
                    self.gpu_idle.began()  # before the step's first work (the input's copy) is queued
                images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
                computing = time.perf_counter()
                if cfg.channels_last:
                    images = images.contiguous(memory_format=torch.channels_last)
                for group in self.optimizer.param_groups:
                    group["lr"] = lr_for(step)
                self.dist.zero_grad(self.optimizer)  # None under Horovod, in place under DDP (its bucket views)
                with autocast:
                    loss = F.cross_entropy(train_model(images), labels, label_smoothing=cfg.label_smoothing)
                watchdog.mark("backward")  # progress for the signs of life: a rank stuck before here lags
                (self.scaler.scale(loss) if self.scaler else loss).backward()
                exchange = self.dist.step(self.optimizer, self.scaler)  # seconds blocked on the all-reduce, or None
                done = time.perf_counter()
                self.step_times.add(computing - fetching, done - computing - (exchange or 0.0), exchange)
                step += 1
                after_step(step, lambda: self.dist.mean(loss.item()))  # Horovod/DDP: averaged over all ranks
                if step >= stop_at:
                    break
                if self.gpu_idle:  # after logging and checkpoints too: the GPU's idle counts from here
                    self.gpu_idle.ended()
                    self.step_times.add_gpu_idle(self.gpu_idle.collect())
                fetching = time.perf_counter()  # after logging and checkpoints, which are none of the three parts
        return step

    def evaluate(self) -> tuple[float, float] | None:
        """(Mean cross-entropy without label smoothing, top-1) over every rank's share of val/."""
        if self.data.val is None:
            return None
        model, device = self.model, self.torch_device
        model.eval()
        correct = total = 0
        loss_sum = 0.0
        with torch.no_grad():
            for images, labels in self.data.val:
                images, labels = images.to(device), labels.to(device)
                if self.cfg.channels_last:
                    images = images.contiguous(memory_format=torch.channels_last)
                logits = model(images).float()
                loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
                correct += (logits.argmax(1) == labels).sum().item()
                total += labels.numel()
        model.train()
        with watchdog.collective("validation's sums"):  # the step bound, not the busy one: a peer may be frozen
            correct, total, loss_sum = self.dist.sum(correct), self.dist.sum(total), self.dist.sum(loss_sum)
        return (loss_sum / total, correct / total) if total else None

    def tensorboard(self, directory: Path) -> TorchWriter:
        return TorchWriter(directory)

    def export(self, out: Path, card) -> dict[str, str]:
        from training.pytorch.export import export_checked

        return {"onnx": str(export_checked(self.module, out, self.cfg.image_size, card))}

    def peak_gpu_memory_mb(self) -> float | None:
        return torch.cuda.max_memory_allocated(self.torch_device) / 2**20 if self.device == "gpu" else None

    def allreduce_seconds(self, count: int, iters: int) -> float:
        return interconnect.torch_allreduce_seconds(torch, self.dist, self.torch_device, count, iters)

    def shutdown(self) -> None:
        self.dist.shutdown()


def main(cfg: TrainConfig) -> int:
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")
    runner.run(cfg, TorchLoop)
    return 0
