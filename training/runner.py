"""One training run, the same for every framework: the step plan, resume, reporting, checkpoints, summary.

A framework (training/pytorch, training/tensorflow) plugs in only what differs: its model, data, training
step, checkpoint format and export, as a `Loop`. Everything a user can observe about a run (how many steps
`--epochs` means, the LR at each step, when progress is logged and checkpoints written, what resume picks,
the fields of summary.json) is decided here, once, so the same flags mean the same thing in every framework.
Pure apart from file writes: no framework is imported here.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from training import (best, checkpoint, efficiency, frameworks, interconnect, launched, metrics, model_card, progress,
                      tracking)
from training.config import TrainConfig, cpu_sized_text, resolve_optimizer
from training.data import datasets, folder
from training.errors import RunStopped
from training import validation, watchdog
from training.schedule import default_warmup, lars_peak_lr, lr_at, peak_lr

IMAGENET_TRAIN_IMAGES = 1_281_167  # what one synthetic epoch counts


@dataclass(frozen=True)
class Plan:
    """How long the run is and which LR each step takes."""
    global_batch: int
    steps_per_epoch: int
    total_steps: int
    stop_at: int  # total_steps, or --stop-at-step when a preemption is rehearsed
    warmup_steps: int
    peak_lr: float
    schedule: str
    base_lr: float

    def lr(self, step: int) -> float:
        """LR of optimizer step `step` (0-based)."""
        return lr_at(step, peak=self.peak_lr, total_steps=self.total_steps, warmup_steps=self.warmup_steps,
                     schedule=self.schedule, base_lr=self.base_lr)


def synthetic_steps_per_epoch(global_batch: int) -> int:
    """A synthetic "epoch" is ImageNet's training set in whole global batches, as a folder epoch is (the last,
    partial batch dropped): --epochs means the same number of steps on synthetic and real data."""
    return max(1, IMAGENET_TRAIN_IMAGES // global_batch)


def plan(cfg: TrainConfig, world_size: int, steps_per_epoch: int) -> Plan:
    global_batch = cfg.batch_size * world_size
    cfg = resolve_optimizer(cfg, global_batch)
    total = cfg.steps or max(1, math.ceil(cfg.epochs * steps_per_epoch))
    lars = cfg.optimizer == "lars"
    return Plan(global_batch=global_batch, steps_per_epoch=steps_per_epoch, total_steps=total,
                stop_at=min(total, cfg.stop_at_step or total),
                warmup_steps=cfg.warmup_steps if cfg.warmup_steps >= 0 else default_warmup(cfg.optimizer, total),
                peak_lr=lars_peak_lr(cfg.lars_lr, global_batch) if lars else peak_lr(cfg.base_lr, global_batch),
                schedule=cfg.lr_schedule, base_lr=cfg.base_lr)


class ScalarWriter(Protocol):
    """TensorBoard scalars, written with the framework's own writer."""
    def scalar(self, tag: str, value: float, step: int) -> None: ...
    def close(self) -> None: ...


class Loop(Protocol):
    """What a framework plugs into the runner. Building it initialises the distribution and the device."""
    cfg: TrainConfig  # the run's config with precision and channels-last decided for the device
    distribution: str  # horovod | ddp
    rank: int
    size: int
    device: str  # cpu | gpu
    steps_per_epoch: int
    checkpoint_suffix: str
    # This rank's time in each part of its steps (training/efficiency.py), added to by fit(); None: not timed.
    step_times: efficiency.StepTimes | None

    def load_checkpoint(self, path: Path) -> dict:
        """A checkpoint's state (with "step"); raises on a file that is not one of ours."""
    def restore(self, state: dict) -> None: ...
    def checkpoint_state(self, step: int) -> dict: ...
    def save_checkpoint(self, state: dict, path: Path) -> None: ...
    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
    def fit(self, start: int, stop_at: int, lr_for: Callable[[int], float],
            after_step: Callable[[int, Callable[[], float]], None]) -> int:
        """Train from step `start` to `stop_at`, setting lr_for(step) before each step and calling
        after_step(steps done, loss averaged over ranks) after it; returns the last step done."""
    def evaluate(self) -> tuple[float, float] | None:
        """(Mean cross-entropy, top-1) on the validation split over all ranks, or None without one. Every rank
        calls it at the same step (a collective); it leaves the model training."""
    def tensorboard(self, directory: Path) -> ScalarWriter: ...
    def export(self, out: Path, card: model_card.ModelCard) -> dict[str, str]:
        """Rank 0 only: the model files written (name -> path), the ONNX file stamped with `card`."""
    def peak_gpu_memory_mb(self) -> float | None:
        """The most GPU memory this rank's framework held at once, or None on CPU."""
    def allreduce_seconds(self, count: int, iters: int) -> float:
        """Mean seconds of an all-reduce of `count` float32s over the run's group, the same on every rank (the
        interconnect check's timer: training/interconnect.py)."""
    def shutdown(self) -> None: ...


@dataclass
class Reporter:
    """Rank 0's progress (metrics.jsonl, TensorBoard, one line per logged step) and every rank's rates."""
    plan: Plan
    rank0: bool
    log: metrics.MetricsLog | None
    writer: ScalarWriter | None
    window: tuple[float, int]
    rates: list[float]
    loss: float = float("nan")
    tracker: tracking.Tracker | None = None  # MLflow, rank 0, when on (training/tracking.py)
    # The efficiency view (training/efficiency.py): the loop's step timings, copies taken at the window's start and
    # after the first window (start-up left out, as steady_rates does), and what this run should reach per GPU.
    times: efficiency.StepTimes | None = None
    expected: efficiency.Expectation = efficiency.Expectation(None, "not given")
    world_size: int = 1
    window_times: efficiency.StepTimes | None = None
    steady_times: efficiency.StepTimes | None = None
    heartbeat: progress.Heartbeat | None = None  # rank 0's lines (training/progress.py)
    validation: tuple[float, float] | None = None  # the latest (val loss, top-1)

    def say(self, text: str) -> None:
        if self.heartbeat:
            self.heartbeat.line(text)
        else:
            print(text, flush=True)

    def record_validation(self, step: int, loss: float, top1: float) -> None:
        """Rank 0's validation at `step`: metrics.jsonl, TensorBoard, MLflow and a line."""
        self.validation = (loss, top1)
        if not self.rank0:
            return
        epoch = step / self.plan.steps_per_epoch
        self.log.write({"step": step, "epoch": round(epoch, 4), "val_loss": loss, "val_top1": top1,
                        "time": round(time.time(), 3)})
        self.writer.scalar("val/loss", loss, step)
        self.writer.scalar("val/top1", top1, step)
        if self.tracker:
            self.tracker.log_step(step, {"val_loss": loss, "val_top1": top1})
        if self.heartbeat:
            self.heartbeat.progress.last_validation = f"val top-1 {top1:.3f}"
        epochs = self.plan.stop_at / self.plan.steps_per_epoch
        self.say(f"epoch {epoch:.4g}/{epochs:.4g}  step {step}/{self.plan.total_steps}  val loss {loss:.4f}  "
                 f"val top-1 {top1:.3f}")

    def record(self, step: int, loss: float, lr: float) -> None:
        now = time.perf_counter()
        rate = (step - self.window[1]) * self.plan.global_batch / (now - self.window[0])
        self.window = (now, step)
        self.rates.append(rate)
        bound = efficiency.classify(self.times.since(self.window_times) if self.times else None)
        if self.times:
            self.window_times = self.times.copy()
            self.steady_times = self.steady_times or self.window_times
        self.loss = loss
        if not self.rank0:
            return
        epoch = step / self.plan.steps_per_epoch
        self.log.write({"step": step, "epoch": round(epoch, 4), "loss": loss, "lr": lr, "img_per_sec": round(rate, 2),
                        "img_per_sec_per_worker": round(rate / self.world_size, 2), "bound": bound.label,
                        "time": round(time.time(), 3)})  # when it was logged (Unix seconds)
        for tag, value in (("train/loss", loss), ("train/lr", lr), ("train/img_per_sec", rate)):
            self.writer.scalar(tag, value, step)
        if self.tracker:
            self.tracker.log_step(step, {"loss": loss, "lr": lr, "img_per_sec": rate})
        eta = ""
        if self.heartbeat:
            left = self.heartbeat.progress.eta(self.heartbeat.clock())
            eta = "" if left is None else f"  ETA {progress.duration(left)}"
        self.say(f"step {step}/{self.plan.total_steps}  epoch {epoch:.2f}  loss {loss:.4f}  lr {lr:.4g}  {rate:.1f} img/s"
                 f"{eta}  {efficiency.progress_text(rate / self.world_size, self.expected, bound)}")

    def steady_rates(self) -> list[float]:
        # The first window includes start-up (tracing, compilation): leave it out when there are others.
        return self.rates[1:] if len(self.rates) > 1 else self.rates

    def run_bound(self, start: efficiency.StepTimes | None) -> efficiency.Bound:
        """What bounded the steps the steady rates cover (all of them when there was one window)."""
        if not self.times:
            return efficiency.classify(None)
        return efficiency.classify(self.times.since(self.steady_times if len(self.rates) > 1 else start))

    def close(self) -> None:
        if self.heartbeat:
            self.heartbeat.stop()
        if self.rank0:
            self.writer.close()
            self.log.close()


@dataclass
class CheckpointCadence:
    """When rank 0 writes a checkpoint: every `every` steps, at the run's last step, and once `minutes` of
    training have passed since the last one (0: steps only). The time bound is what an eviction can cost: Batch
    requeues an evicted node's task and Azure ML reruns the job, and either resumes from the newest checkpoint
    (--resume auto), so at most `minutes` of training are lost however long a step or `every` steps take."""
    every: int
    minutes: float
    stop_at: int
    last: float  # the clock (seconds) at the last checkpoint, or at the start of this run

    def due(self, step: int, now: float) -> bool:
        return (step % self.every == 0 or step == self.stop_at
                or bool(self.minutes) and now - self.last >= self.minutes * 60)

    def saved(self, now: float) -> None:
        self.last = now


def run(cfg: TrainConfig, make_loop: Callable[[TrainConfig], Loop]) -> dict[str, Any]:
    """Train as `cfg` says with the framework `make_loop` builds; returns the summary (every rank)."""
    out = Path(cfg.output_dir)
    started_setup = time.monotonic()
    cfg, classes = with_classes(cfg)  # before any file is written or model built: a folder that disagrees stops here
    tracking.require_client(bool(tracking.tracking_uri(cfg.mlflow, cfg.output_dir)))  # --mlflow without MLflow: now
    metrics.prepare_output_dir(out)
    # Rank 0's lines start now, before the framework sets up (distribution, model, the folder's scan): a line
    # within seconds, and the heartbeat's through a long start-up (training/progress.py).
    heartbeat = None
    if launched.as_rank0(os.environ):
        print(first_line(cfg, classes), flush=True)
        heartbeat = progress.Heartbeat(progress.Progress(total=0, global_batch=0, start_step=0, started=started_setup),
                                       cfg.progress_seconds, tty=launched.on_terminal(sys.stdout, os.environ)).start()
    try:
        loop = make_loop(cfg)
    except BaseException:
        if heartbeat:
            heartbeat.stop()
        raise
    if heartbeat and loop.rank != 0:  # a launcher this process could not read: the loop's rank decides
        heartbeat.stop()
        heartbeat = None
    # with the hardware-dependent defaults decided (config.resolve_for_device), and the batch-dependent ones
    cfg = resolve_optimizer(loop.cfg, loop.cfg.batch_size * loop.size)
    rank0 = loop.rank == 0  # only rank 0 writes files and prints progress
    the_plan = plan(cfg, loop.size, loop.steps_per_epoch)
    ckpt_dir = out / "checkpoints"
    if cfg.interconnect_check:  # in these processes, bound and grouped as training is: one MPI program per rank
        stop = interconnect.measure(loop.allreduce_seconds, rank=loop.rank, size=loop.size, gpu=loop.device == "gpu",
                                    floor_gbps=cfg.interconnect_floor_gbps or None,
                                    allow_slow=cfg.allow_slow_interconnect, output=out / "interconnect.json")
        if stop:
            loop.shutdown()
            raise RunStopped(stop)

    # Rank 0 picks the checkpoint (it is the one that writes them); every rank reads that same file.
    picked = checkpoint.resume_path(cfg.resume, ckpt_dir, loop.load_checkpoint) if rank0 else None
    resume_from = loop.broadcast_object(str(picked or "") if rank0 else None)
    step = 0
    if resume_from:
        state = loop.load_checkpoint(Path(resume_from))
        loop.restore(state)
        step = state["step"]
        if rank0:
            rank0_line(heartbeat, f"resumed from {resume_from} at step {step}")
    if rank0:
        epochs = the_plan.total_steps / the_plan.steps_per_epoch
        line = (f"training ResNet50 ({cfg.framework}, {loop.distribution}, {loop.size} worker(s), {loop.device}): "
                f"{the_plan.total_steps} steps ({epochs:.3g} epochs of {the_plan.steps_per_epoch}), image "
                f"{cfg.image_size} px, batch {cfg.batch_size} per worker (global {the_plan.global_batch}), "
                f"{cfg.workers} loader process(es), {cfg.optimizer}, peak LR {the_plan.peak_lr:.4g}, "
                f"{speed_settings(cfg)}")
        sized = cpu_sized_text(cfg) if loop.device == "cpu" else ""
        rank0_line(heartbeat, line + (f"; {sized}" if sized else ""))  # on a terminal: below the bar, not onto it
    if heartbeat:  # the run's size is known now
        heartbeat.progress = progress.Progress(total=the_plan.stop_at, global_batch=the_plan.global_batch,
                                               start_step=step, started=started_setup,
                                               steps_per_epoch=the_plan.steps_per_epoch)

    uri = tracking.tracking_uri(cfg.mlflow, cfg.output_dir) if rank0 else None
    tracker = tracking.Tracker(uri, {**dataclasses.asdict(cfg), "world_size": loop.size,
                                     "global_batch": the_plan.global_batch, "peak_lr": the_plan.peak_lr,
                                     "total_steps": the_plan.total_steps, "device": loop.device}) if uri else None
    started = time.perf_counter()
    times = getattr(loop, "step_times", None)
    start_times = times.copy() if times else None
    expected = efficiency.expectation(cfg.expected_img_per_sec, device=loop.device, image_size=cfg.image_size,
                                      recipe=efficiency.Recipe.of(cfg))
    reporter = Reporter(the_plan, rank0, metrics.MetricsLog(out / "metrics.jsonl", append=bool(resume_from)) if rank0
                        else None, loop.tensorboard(out / "tensorboard") if rank0 else None, (started, step), [],
                        tracker=tracker, times=times, expected=expected, world_size=loop.size,
                        window_times=start_times, heartbeat=heartbeat)
    start_step = step
    # Rank 0 alone decides and writes (checkpoint_state and save are rank 0's own: no collective to agree on).
    cadence = CheckpointCadence(cfg.checkpoint_every, cfg.checkpoint_minutes, the_plan.stop_at, time.monotonic())

    # every --val-every epochs (0: at the end only); left to its default, stretched by time (training/validation.py)
    vals = validation.ValidationCadence.starting(cfg.val_every, the_plan.steps_per_epoch, the_plan.total_steps,
                                                 cfg.given is not None and "val_every" not in cfg.given, step)
    spent = validation.TimeToTrain(validation.clock())  # the time-to-train split: training, validation, checkpoints
    keeper = best.Keeper(out, loop.checkpoint_suffix, bool(resume_from)) if rank0 else None  # training/best.py
    validated_at = [-1]

    def validate(done: int) -> None:
        validated_at.append(done)
        if heartbeat:
            heartbeat.progress.phase = f"validating after step {done}"
        began, clock = time.perf_counter(), validation.clock()
        train_s = spent.training_since_last(clock)  # the interval behind this validation
        found = loop.evaluate()  # every rank, at the same step: a collective
        # The img/s window leaves the validation's time out, as the loops' step timings do.
        reporter.window = (reporter.window[0] + time.perf_counter() - began, reporter.window[1])
        val_s = validation.clock() - clock
        spent.validation_s, spent.validations = spent.validation_s + val_s, spent.validations + 1
        if vals.due(done):
            next_validation(done, val_s, train_s)
        if heartbeat:
            heartbeat.progress.phase = "training"
        if found is not None:
            reporter.record_validation(done, *found)
            if keeper:  # rank 0's own state, no collective: the best validation's model is kept for the export
                with spent.writing(validation.clock, counted=False):
                    keeper.offer(done, *found, lambda: loop.checkpoint_state(done), loop.save_checkpoint)

    def next_validation(done: int, val_s: float, train_s: float) -> None:
        interval = vals.proposed(done, val_s, train_s)
        if vals.adaptive:  # rank 0's clock decides; every rank takes its interval (they validate together)
            with watchdog.collective("the next validation's step"):
                interval = loop.broadcast_object(interval)
        if rank0 and interval != vals.interval:
            rank0_line(heartbeat, vals.stretched_line(interval, val_s))
        vals.validated(done, interval)
        spent.mark(validation.clock())

    def after_step(done: int, averaged_loss: Callable[[], float]) -> None:
        if heartbeat:
            heartbeat.progress.advance(done, heartbeat.clock())
        if done % cfg.log_every == 0 or done == the_plan.stop_at:
            reporter.record(done, averaged_loss(), the_plan.lr(done - 1))  # every rank joins the average
        if vals.due(done):  # the last step's is below
            validate(done)
        if rank0 and cadence.due(done, time.monotonic()):
            with spent.writing(validation.clock):
                checkpoint.save(ckpt_dir, done, loop.checkpoint_state(done), loop.save_checkpoint,
                                cfg.keep_checkpoints, loop.checkpoint_suffix)
            cadence.saved(time.monotonic())

    # a run whose steps stop ends (training/watchdog.py); the first step's bound follows the compiler
    dog = watchdog.start(loop.rank, loop.size, out, compiler=watchdog.compiler_of(cfg))
    if step < the_plan.stop_at:
        step = loop.fit(step, the_plan.stop_at, the_plan.lr, dog.wrap(after_step) if dog else after_step)
    if dog:
        dog.busy("validation and the summary")
    wall = time.perf_counter() - started
    if validated_at[-1] != step:
        validate(step)  # the end's, unless this step's ran (a --stop-at-step at an epoch's end)
    val_loss, top1 = reporter.validation or (None, None)
    result = metrics.summary(world_size=loop.size, global_rates=reporter.steady_rates(),
                             images_seen=(step - start_step) * the_plan.global_batch, wall_time_s=wall,
                             final_loss=reporter.loss, top1=top1, framework=cfg.framework,
                             extra={"steps": step, "total_steps": the_plan.total_steps, "resumed_from_step": start_step,
                                    "distribution": loop.distribution, "device": loop.device,
                                    "global_batch": the_plan.global_batch, "optimizer": cfg.optimizer,
                                    "lr_schedule": cfg.lr_schedule, "precision": cfg.precision,
                                    "channels_last": cfg.channels_last, "compile": cfg.compile, "xla": cfg.xla,
                                    "val_loss": val_loss, "image_size": cfg.image_size,
                                    "batch_size": cfg.batch_size,
                                    "data_path": data_path(cfg), **peak_memory(loop), **interconnect_figure(out),
                                    **spent.fields(validation.clock())})
    bound = reporter.run_bound(start_times)
    result.update(efficiency.summary_fields(result["img_per_sec_per_worker"], expected, bound))
    reporter.close()
    if rank0:
        card = model_card.ModelCard(num_classes=cfg.num_classes, image_size=cfg.image_size, classes=classes,
                                    framework=cfg.framework, run_id=model_card.run_id(),
                                    dataset=datasets.card_text(None if cfg.data == "synthetic" else cfg.data))
        result.update({"classes": list(classes) if classes else None, "run_id": card.run_id, "dataset": card.dataset})
        if classes:  # beside the model and the checkpoints, whether or not this run exports
            model_card.write_classes(out, classes)
        # The same fields in every run (frameworks compare their summaries): the last validation, the best's step,
        # and the exported model's step (None: nothing exported).
        result.update(last_val_top1=top1, last_val_loss=val_loss, exported_step=None,
                      best_val_step=keeper.best.step if keeper.best else None)
        if cfg.export and step == the_plan.total_steps:  # a preempted run (--stop-at-step) exports nothing
            kept = keeper.restore_for_export(step, loop.load_checkpoint, lambda state: loop.restore(state))
            result["exported_step"] = kept.step if kept else step
            if kept:  # the summary's top1 and val_loss describe the exported model
                result.update(top1=kept.val_top1, val_loss=kept.val_loss)
                print(best.kept_line(kept, reporter.validation, the_plan.steps_per_epoch), flush=True)
            result.update(export(loop, out, card))
        metrics.write_json_atomic(out / "summary.json", result)
        from training import report

        report.write_for_run(out)
        if tracker:
            tracker.finish(result, [out / "summary.json", out / "report.png"])
        print(metrics.done_line(result, cfg.output_dir), flush=True)
        print(validation.line(result), flush=True)
        print(f"efficiency: {efficiency.progress_text(result['img_per_sec_per_worker'], expected, bound)}; "
              f"expected: {expected.basis}", flush=True)
        chance = best.chance_line(keeper.best.val_top1 if keeper.best else result.get("top1"), cfg.num_classes,
                                  best.val_images(cfg.data),
                                  fine_tuned=bool(cfg.init_from or cfg.pretrained))
        if chance:
            print(chance, flush=True)
    if dog:
        dog.stop()
    loop.shutdown()
    return result


def export(loop: Loop, out: Path, card: model_card.ModelCard) -> dict[str, str]:
    """Rank 0's model files, with `export_error` saying why one is missing. The training is done and checkpointed
    by now: a failed export must not hide summary.json, and must not fail the run, since a retried task (Batch) or
    job resumes at the last step and would fail at the same export every time while holding every node. The error
    line goes to stderr (with the traceback of an exception) and into summary.json."""
    import sys
    import traceback

    try:
        files = loop.export(out, card)
    except Exception as err:  # noqa: BLE001 - any exporter's failure; the checkpoint holds the weights
        traceback.print_exc()
        files = {"export_error": f"{type(err).__name__}: {err}".splitlines()[0]}
    if "export_error" in files:
        print(f"error: the model export failed ({files['export_error']}); the checkpoints in "
              f"{out / 'checkpoints'} hold the trained weights", file=sys.stderr, flush=True)
    return files


def rank0_line(heartbeat: progress.Heartbeat | None, text: str) -> None:
    """A line of rank 0's while the heartbeat may be drawing its bar: through it (the bar cleared first), else printed."""
    if heartbeat:
        heartbeat.line(text)
    else:
        print(text, flush=True)


def first_line(cfg: TrainConfig, classes: tuple[str, ...] | None) -> str:
    """Rank 0's first line, before the framework sets up: what runs, on what data, where it writes."""
    data = "synthetic data" if cfg.data == "synthetic" else f"{cfg.data} ({len(classes or ())} classes)"
    return (f"python -m training train: ResNet50 with {cfg.framework} on {data}, outputs in {cfg.output_dir}; "
            "setting up (the device, steps and sizes follow)")


def with_classes(cfg: TrainConfig) -> tuple[TrainConfig, tuple[str, ...] | None]:
    """`cfg` with --num-classes decided, and the class names in label order: a folder's class folders
    (training/data/folder.py, the order both frameworks label by; a given --num-classes must match), or for
    synthetic data no names and ImageNet's 1000 unless given."""
    if cfg.data == "synthetic":
        return dataclasses.replace(cfg, num_classes=cfg.num_classes or model_card.SYNTHETIC_CLASSES), None
    classes = folder.class_names(Path(cfg.data))
    return dataclasses.replace(cfg, num_classes=folder.num_classes(cfg.num_classes, classes, cfg.data)), tuple(classes)


def speed_settings(cfg: TrainConfig) -> str:
    """The speed flags in effect, for the first progress line."""
    return ", ".join([cfg.precision, *(name for name, on in (("channels-last", cfg.channels_last),
                                                             ("compile", cfg.compile), ("xla", cfg.xla)) if on),
                      f"data: {data_path(cfg)}"])


def data_path(cfg: TrainConfig) -> str:
    """What feeds the model: synthetic tensors, or the loader that decodes the folder's JPEG files."""
    if cfg.data == "synthetic":
        return "synthetic"
    return frameworks.get(cfg.framework).folder_reader or cfg.loader


def interconnect_figure(out: Path) -> dict[str, Any]:
    """The figure `python -m training interconnect-check --output OUT/interconnect.json` measured before this run
    (multi-node jobs run it first), or nothing."""
    path = out / "interconnect.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def peak_memory(loop: Loop) -> dict[str, Any]:
    """This rank's peak memory for the summary: the framework's GPU figure, or the process's peak RSS on CPU."""
    gpu = loop.peak_gpu_memory_mb()
    if gpu is not None:
        return {"peak_memory_mb": round(gpu, 1), "peak_memory_of": "gpu"}
    return {"peak_memory_mb": round(metrics.peak_rss_mb(), 1), "peak_memory_of": "host process (RSS)"}
