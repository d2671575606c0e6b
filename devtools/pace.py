"""ResNet50's pace on one GPU, lever by lever: which of PyTorch's speed levers the trainer should pull, measured in
one short run on a device machine (torch and torchvision only; never part of `make test`).

  PYTHONUNBUFFERED=1 python3 -m devtools pace [--budget 420] [--steps 30] [--jpegs 6000] [--out DIR]

Each row trains ResNet50 (torchvision's, as the trainer builds it: training/pytorch/loop.py) on one random batch
of 224 px images held on the GPU, with the trainer's own step (LR set per group, zero_grad, autocast, cross-entropy
with label smoothing, backward, the optimizer's step) and its optimizers (training/pytorch/optim.py), under DDP of
one process as the cluster's `--dist ddp` recipe runs, unless the row says otherwise. The rows: the fp32 eager
recipe, today's defaults (bf16, channels-last, torch.compile, DDP, batch 256), then each lever alone on top of that:
a fused SGD step, CUDA graphs (torch.compile's reduce-overhead mode), the per-GPU batch (384, 512 with the trainer's
linear LR rule), no DDP, LARS at 512; then the best combination of the levers that helped. After those, with the
best recipe, JPEG files of ImageNet's sizes through `--loader nvjpeg` (the trainer's NvjpegBatches: files read by
worker processes, decoded and augmented on the GPU on its own stream): the loader alone and the loader feeding the
model. img/s: the median of three timed windows of `--steps` steps each after the warm-up (compilation included in
the warm-up, printed as its own column), with the windows' spread; peak memory from the allocator.

A row past `--budget` seconds is printed as skipped, so the run ends inside a device call's limit.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from devtools.benchmark import jpeg_dataset
from training.errors import UsageError


@dataclass(frozen=True)
class Recipe:
    precision: str = "bf16"  # "fp32" or "bf16" (autocast)
    channels_last: bool = True
    compile: str = "default"  # "", or torch.compile's mode: "default", "reduce-overhead" (CUDA graphs), ...
    batch: int = 256
    optimizer: str = "sgd"  # "sgd" (the for-each step, torch's default on CUDA), "sgd-fused", "lars"
    ddp: bool = True

    def text(self) -> str:
        return (f"{self.precision}, {'channels-last' if self.channels_last else 'NCHW'}, "
                f"{'compile ' + self.compile if self.compile else 'eager'}, batch {self.batch}, {self.optimizer}, "
                f"{'DDP' if self.ddp else 'no DDP'}")


TODAY = Recipe()
LEVERS = [  # (row, recipe): each lever alone on top of today's defaults
    ("fp32, NCHW, eager (Horovod benchmark's recipe)", Recipe("fp32", False, "", 256, "sgd", True)),
    ("bf16 + channels-last, eager", replace(TODAY, compile="")),
    ("today's defaults (compile, for-each SGD)", TODAY),
    ("+ fused SGD step", replace(TODAY, optimizer="sgd-fused")),
    ("+ CUDA graphs (compile reduce-overhead)", replace(TODAY, compile="reduce-overhead")),
    ("+ batch 384", replace(TODAY, batch=384)),
    ("+ batch 512", replace(TODAY, batch=512)),
    ("- DDP (one process, no wrapper)", replace(TODAY, ddp=False)),
    ("+ LARS at batch 512", replace(TODAY, batch=512, optimizer="lars")),
]


@dataclass
class Row:
    name: str
    recipe: Recipe
    img_per_sec: float = 0.0
    spread: tuple[float, float] = (0.0, 0.0)
    warmup_s: float = 0.0
    peak_gib: float = 0.0
    error: str = ""


def _model_and_optimizer(recipe: Recipe, device):
    import torch
    import torchvision

    from training.config import TrainConfig
    from training.pytorch import optim

    torch.manual_seed(42)
    model = torchvision.models.resnet50(num_classes=1000).to(device)
    if recipe.channels_last:
        model = model.to(memory_format=torch.channels_last)
    cfg = TrainConfig(optimizer="lars" if recipe.optimizer == "lars" else "sgd", batch_size=recipe.batch)
    if recipe.optimizer == "lars":
        optimizer = optim.build(model, cfg)
    else:  # SGD as optim.build makes it, with the step named: for-each (torch's CUDA default) or fused
        fused = recipe.optimizer == "sgd-fused"
        optimizer = torch.optim.SGD(model.parameters(), lr=cfg.base_lr, momentum=cfg.momentum,
                                    weight_decay=cfg.weight_decay, fused=fused, foreach=not fused)
    return model, optimizer, cfg


def measure(name: str, recipe: Recipe, steps: int, source=None, device=None, image_size: int = 224) -> Row:
    """One row: `recipe` trained for a warm-up and three windows of `steps` steps; `source` (an iterator of
    (images, labels) on the device) instead of one synthetic batch. `device` defaults to the first GPU (the CPU
    and a small `image_size` are for the tests)."""
    import torch
    import torch.nn.functional as F

    device = device or torch.device("cuda", 0)
    gpu = device.type == "cuda"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    row = Row(name, recipe)
    if gpu:
        torch.cuda.set_device(device)  # CUDA initialised before the allocator's statistics are reset
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    if recipe.compile:
        torch._dynamo.reset()  # each row compiles afresh: a second batch size would otherwise recompile with dynamic shapes
    model, optimizer, cfg = _model_and_optimizer(recipe, device)
    if recipe.ddp:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[0] if gpu else None)
    forward = torch.compile(model, mode=recipe.compile) if recipe.compile else model
    generator = torch.Generator(device=device).manual_seed(0)
    images = torch.randn(recipe.batch, 3, image_size, image_size, device=device, generator=generator)
    labels = torch.randint(0, 1000, (recipe.batch,), device=device, generator=generator)
    lr = cfg.base_lr * recipe.batch / 256  # the trainer's linear rule (lars: its schedule's start, as here)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if recipe.precision == "bf16"
                else contextlib.nullcontext())

    def step() -> None:
        x, y = (images, labels) if source is None else next(source)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)  # as the trainer's fit() does
        if recipe.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad()
        with autocast:
            loss = F.cross_entropy(forward(x), y, label_smoothing=cfg.label_smoothing)
        loss.backward()
        optimizer.step()

    started = time.perf_counter()
    for _ in range(8 if recipe.compile else 5):
        step()
    sync()
    row.warmup_s = time.perf_counter() - started
    rates = []
    for _ in range(3):
        begin = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        rates.append(steps * recipe.batch / (time.perf_counter() - begin))
    row.img_per_sec, row.spread = statistics.median(rates), (min(rates), max(rates))
    row.peak_gib = torch.cuda.max_memory_allocated(device) / 2**30 if gpu else 0.0
    return row


def best_of(rows: list[Row], today: Row) -> Recipe:
    """Today's recipe with every lever that beat today's row by more than the windows' spread (2%), and the
    fastest batch among those measured."""
    best = today.recipe
    floor = today.img_per_sec * 1.02
    won = {r.recipe: r for r in rows if not r.error and r.img_per_sec > floor}
    for recipe in won:
        if recipe.optimizer == "sgd-fused":
            best = replace(best, optimizer="sgd-fused")
        if recipe.compile == "reduce-overhead":
            best = replace(best, compile="reduce-overhead")
    batches = [r for r in rows if not r.error and r.recipe.optimizer != "lars" and r.recipe.precision == "bf16"
               and r.recipe.compile == "default" and r.recipe.ddp and r.recipe.optimizer == "sgd"]
    if batches:
        best = replace(best, batch=max(batches, key=lambda r: r.img_per_sec).recipe.batch)
    return best


def nvjpeg_source(folder: Path, recipe: Recipe):
    """An endless iterator of training batches through the trainer's NvjpegBatches, epoch after epoch."""
    import torch

    from training.config import TrainConfig, resolve_for_device
    from training.pytorch.data import FolderData

    cfg = resolve_for_device(TrainConfig(data=str(folder), batch_size=recipe.batch, loader="nvjpeg",
                                         workers=min(16, os.cpu_count() or 1)), True, True)
    data = FolderData(folder, cfg, rank=0, size=1, device=torch.device("cuda", 0))

    def batches():
        epoch = 0
        while True:
            for images, labels in data.epoch_batches(epoch, 0):
                yield images, labels
            epoch += 1
    return batches()


def loader_alone(source, batch: int, steps: int) -> float:
    import torch

    for _ in range(5):
        next(source)
    begin = time.perf_counter()
    for _ in range(3 * steps):
        next(source)
    torch.cuda.synchronize()
    return 3 * steps * batch / (time.perf_counter() - begin)


def table(rows: list[Row], today: Row | None) -> list[str]:
    lines = [f"{'row':48} {'img/s':>7} {'windows':>13} {'vs today':>8} {'warm-up s':>9} {'peak GiB':>8}"]
    for row in rows:
        if row.error:
            lines.append(f"{row.name:48} {row.error}")
            continue
        ratio = f"{row.img_per_sec / today.img_per_sec:.2f}x" if today and today.img_per_sec else ""
        lines.append(f"{row.name:48} {row.img_per_sec:7.0f} {row.spread[0]:6.0f}-{row.spread[1]:<6.0f} {ratio:>8} "
                     f"{row.warmup_s:9.1f} {row.peak_gib:8.1f}")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools pace", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=420, help="seconds: rows that would start later are skipped")
    parser.add_argument("--steps", type=int, default=30, help="steps per timed window (three windows a row)")
    parser.add_argument("--jpegs", type=int, default=6000, help="JPEG files made for the nvjpeg rows (0: none)")
    parser.add_argument("--out", type=Path, help="write pace.json (the rows) here")
    args = parser.parse_args(argv)
    import torch
    import torchvision

    if not torch.cuda.is_available():
        raise UsageError("pace: no CUDA GPU here (torch.cuda.is_available() is False); run it on a GPU machine")
    torch.backends.cudnn.benchmark = True  # as the trainer sets it on a GPU
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    torch.distributed.init_process_group("nccl", rank=0, world_size=1)
    start = time.perf_counter()
    print(f"pace: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}; {args.steps} steps x 3 windows a row",
          flush=True)
    rows: list[Row] = []
    today = None

    def run(name: str, recipe: Recipe, source=None) -> Row:
        if time.perf_counter() - start > args.budget:
            row = Row(name, recipe, error="skipped: past --budget")
        else:
            try:
                row = measure(name, recipe, args.steps, source)
            except Exception as err:  # a lever that fails is a row of the table, not the end of it
                row = Row(name, recipe, error=f"failed: {type(err).__name__}: {str(err).splitlines()[0][:120]}")
        rows.append(row)
        print(table([row], today)[1], flush=True)
        return row

    print(table([], None)[0], flush=True)
    for name, recipe in LEVERS:
        row = run(name, recipe)
        if recipe == TODAY:
            today = row
    best = best_of(rows, today) if today and not today.error else TODAY
    if best != TODAY and best not in [r.recipe for r in rows]:
        run("best combination", best)
    best_row = max((r for r in rows if not r.error and r.recipe.precision == "bf16"), key=lambda r: r.img_per_sec,
                   default=None)
    print(f"pace: best recipe {best_row.recipe.text() if best_row else '-'}", flush=True)
    if args.jpegs and best_row and time.perf_counter() - start < args.budget + 60:  # the JPEG rows matter most
        with tempfile.TemporaryDirectory() as tmp:
            made = time.perf_counter()
            folder = jpeg_dataset(args.jpegs, Path(tmp) / "jpegs", min(16, os.cpu_count() or 1))
            print(f"pace: {args.jpegs} JPEG files at ImageNet sizes made in {time.perf_counter() - made:.0f} s",
                  flush=True)
            source = nvjpeg_source(folder, best_row.recipe)
            alone = loader_alone(source, best_row.recipe.batch, args.steps)
            print(f"{'nvjpeg loader alone (no model)':48} {alone:7.0f}", flush=True)
            rows.append(Row("nvjpeg loader alone (no model)", best_row.recipe, img_per_sec=alone, spread=(alone, alone)))
            jpeg = run("best recipe on JPEG files (nvjpeg)", best_row.recipe, source)
            if not jpeg.error:
                print(f"pace: JPEG / synthetic = {jpeg.img_per_sec / best_row.img_per_sec:.2f}", flush=True)
    print("\n".join(table(rows, today)), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "pace.json").write_text(json.dumps(
            {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
             "rows": [{**asdict(r), "recipe": asdict(r.recipe)} for r in rows]}, indent=1))
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
