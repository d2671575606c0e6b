"""Horovod (or DDP) ResNet50 training with PyTorch.

Launch (see README):
  1 process:   python -m training train --data synthetic --steps 100
  2 on a node: horovodrun -np 2 -H localhost:2 python -m training train --data /data/imagenet
  2 nodes x 8: horovodrun -np 16 -H node1:8,node2:8 python -m training train --data /data/imagenet
  DDP:         torchrun --nproc-per-node 2 -m training train --dist ddp --data synthetic --steps 100
"""
from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from training import checkpoint, distributed, metrics
from training.config import TrainConfig, as_dict
from training.data_torch import FolderData, SyntheticData
from training.schedule import lr_at, peak_lr

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _build_model(cfg: TrainConfig, device):
    import torchvision

    torch.manual_seed(cfg.seed)  # the same initial weights on every rank and every run
    model = torchvision.models.resnet50(num_classes=cfg.num_classes).to(device)
    # Horovod 0.28 allreduces only NCHW-contiguous tensors, so under Horovod the weights (and so their
    # gradients) stay NCHW and only the activations go channels-last; DDP takes channels-last weights.
    if cfg.channels_last and cfg.dist == "ddp":
        model = model.to(memory_format=torch.channels_last)
    return model


def _checkpoint_state(model, optimizer, scaler, step: int, cfg: TrainConfig) -> dict:
    module = getattr(model, "module", model)  # DDP wraps the model
    return {"step": step, "model": module.state_dict(), "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict() if scaler else None, "config": as_dict(cfg)}


def _load(path: Path) -> dict:
    state = torch.load(path, map_location="cpu", weights_only=False)
    if not {"step", "model", "optimizer"} <= set(state):
        raise ValueError("not a training checkpoint")
    return state


def _evaluate(model, loader, device, dist, channels_last: bool) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            if channels_last:
                images = images.contiguous(memory_format=torch.channels_last)
            correct += (model(images).argmax(1) == labels).sum().item()
            total += labels.numel()
    model.train()
    correct, total = dist.sum(correct), dist.sum(total)
    return correct / total if total else 0.0


@dataclass
class Trained:
    summary: dict
    model: torch.nn.Module  # this rank's copy, unwrapped
    rank: int


def run(cfg: TrainConfig) -> Trained:
    dist = distributed.init(cfg.dist)
    is_rank0 = dist.rank == 0  # only rank 0 writes files and prints progress
    out = Path(cfg.output_dir)
    ckpt_dir = out / "checkpoints"
    metrics.prepare_output_dir(out)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", dist.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    else:
        # Ranks on one host share its cores: more threads than cores makes every collective wait on a
        # descheduled thread (measured: 2 ranks x 2 threads on 2 cores ran 10x slower than 1 thread each).
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // dist.local_size))

    global_batch = cfg.batch_size * dist.size
    data = (SyntheticData(cfg, global_batch, device, dist.rank) if cfg.data == "synthetic"
            else FolderData(Path(cfg.data), cfg, dist.rank, dist.size, pin_memory=cuda))
    total_steps = cfg.steps or max(1, math.ceil(cfg.epochs * data.steps_per_epoch))
    stop_at = min(total_steps, cfg.stop_at_step or total_steps)
    warmup = cfg.warmup_steps if cfg.warmup_steps >= 0 else max(1, total_steps // 20)
    peak = peak_lr(cfg.base_lr, global_batch)

    model = _build_model(cfg, device)
    optimizer = torch.optim.SGD(model.parameters(), lr=peak, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    scaler = torch.amp.GradScaler(device.type) if cfg.precision == "fp16" else None
    step = 0
    model, optimizer = dist.wrap(model, optimizer, cfg.fp16_allreduce)
    # Rank 0 picks the checkpoint (it is the one that writes them); every rank reads that same file.
    resume_from = dist.broadcast_object(str(checkpoint.resume_path(cfg.resume, ckpt_dir, _load) or "") if is_rank0 else None)
    if resume_from:
        state = _load(Path(resume_from))
        getattr(model, "module", model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if scaler and state.get("scaler"):
            scaler.load_state_dict(state["scaler"])
        step = state["step"]
        if is_rank0:
            print(f"resumed from {resume_from} at step {step}", flush=True)
    dist.sync_initial_state(model, optimizer)
    train_model = torch.compile(model) if cfg.compile else model
    autocast = (torch.autocast(device.type, dtype=AUTOCAST_DTYPES[cfg.precision])
                if cfg.precision in AUTOCAST_DTYPES else contextlib.nullcontext())

    writer = log = None
    if is_rank0:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(out / "tensorboard"))
        log = metrics.MetricsLog(out / "metrics.jsonl", append=bool(resume_from))
        print(f"training ResNet50 ({cfg.framework}, {dist.name}, {dist.size} worker(s), {device.type}): "
              f"{total_steps} steps, global batch {global_batch}, peak LR {peak:.4g}, {cfg.precision}", flush=True)

    rates: list[float] = []
    loss_value = float("nan")
    start_step, started = step, time.perf_counter()
    window_start, window_step = started, step
    model.train()
    while step < stop_at:
        epoch, offset = divmod(step, data.steps_per_epoch)
        for images, labels in data.epoch_batches(epoch, offset):
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            if cfg.channels_last:
                images = images.contiguous(memory_format=torch.channels_last)
            lr = lr_at(step, peak=peak, total_steps=total_steps, warmup_steps=warmup, schedule=cfg.lr_schedule,
                       base_lr=cfg.base_lr)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.zero_grad()  # Horovod 0.28 takes no arguments; torch 2 sets grads to None
            with autocast:
                loss = F.cross_entropy(train_model(images), labels, label_smoothing=cfg.label_smoothing)
            (scaler.scale(loss) if scaler else loss).backward()
            dist.step(optimizer, scaler)
            step += 1

            if step % cfg.log_every == 0 or step == stop_at:
                loss_value = dist.mean(loss.item())  # Horovod/DDP: the loss averaged over all ranks
                now = time.perf_counter()
                rate = (step - window_step) * global_batch / (now - window_start)
                window_start, window_step = now, step
                rates.append(rate)
                if is_rank0:
                    log.write({"step": step, "epoch": round(step / data.steps_per_epoch, 4), "loss": loss_value,
                               "lr": lr, "img_per_sec": round(rate, 2)})
                    writer.add_scalar("train/loss", loss_value, step)
                    writer.add_scalar("train/lr", lr, step)
                    writer.add_scalar("train/img_per_sec", rate, step)
                    print(f"step {step}/{total_steps}  epoch {step / data.steps_per_epoch:.2f}  loss {loss_value:.4f}  "
                          f"lr {lr:.4g}  {rate:.1f} img/s", flush=True)
            if is_rank0 and (step % cfg.checkpoint_every == 0 or step == stop_at):
                checkpoint.save(ckpt_dir, step, _checkpoint_state(model, optimizer, scaler, step, cfg), torch.save,
                                cfg.keep_checkpoints)
            if step >= stop_at:
                break

    wall = time.perf_counter() - started
    top1 = _evaluate(model, data.val, device, dist, cfg.channels_last) if data.val is not None else None
    # The first window includes start-up (and compilation): leave it out when there are others.
    steady = rates[1:] if len(rates) > 1 else rates
    result = metrics.summary(world_size=dist.size, global_rates=steady,
                             images_seen=(step - start_step) * global_batch, wall_time_s=wall,
                             final_loss=loss_value, top1=top1, framework=cfg.framework,
                             extra={"steps": step, "resumed_from_step": start_step, "device": device.type,
                                    "precision": cfg.precision, "global_batch": global_batch})
    if is_rank0:
        writer.close()
        log.close()
        if cfg.export and step == total_steps:  # a preempted run (--stop-at-step) exports nothing
            from training.export_onnx import export_checked

            result["onnx"] = str(export_checked(getattr(model, "module", model), out, cfg.image_size, device))
        metrics.write_json_atomic(out / "summary.json", result)
    dist.shutdown()
    return Trained(result, getattr(model, "module", model), dist.rank)


def main(cfg: TrainConfig) -> int:
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")
    trained = run(cfg)
    result = trained.summary
    if trained.rank == 0:
        print(metrics.done_line(result, cfg.output_dir), flush=True)
    return 0
