"""Horovod ResNet50 training with TensorFlow (custom loop) or Keras (`Model.fit`), same flags and outputs as
the PyTorch path.

  --framework tensorflow  a training step in a tf.function with hvd.DistributedGradientTape; --xla compiles
                          the forward and backward pass (the allreduce stays outside XLA)
  --framework keras       Model.fit with Horovod's DistributedOptimizer and callbacks (initial broadcast,
                          metric averaging); the LR follows training/schedule.py per step, as in PyTorch

Both: tf.keras.applications.ResNet50(weights=None), SGD with momentum, L2 weight decay as PyTorch's SGD
applies it, label smoothing, mixed precision for bf16/fp16, rank-0 checkpoints with --resume auto,
metrics.jsonl, summary.json, TensorBoard events, and a SavedModel (plus model.onnx through tf2onnx, checked
with onnxruntime).
Launch: horovodrun -np 2 -H localhost:2 python -m training train --framework keras --data synthetic ...
"""
from __future__ import annotations

import math
import os
import pickle
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from training import checkpoint, metrics
from training.config import TrainConfig, as_dict
from training.dataset import IMAGENET_TRAIN_IMAGES, MEAN, STD, scan, verify_images
from training.errors import UsageError
from training.schedule import lr_at, peak_lr

SUFFIX = ".tfckpt"
POLICIES = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
BN_MOMENTUM = 0.9


def _setup(cfg: TrainConfig):
    """Import TF and Horovod, with threads shared fairly between the ranks of one host (as in PyTorch)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    import horovod.tensorflow as hvd  # collectives; Keras's optimizer wrapper and callbacks come in _fit

    hvd.init()
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.experimental.set_memory_growth(gpus[hvd.local_rank()], True)
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
    else:
        tf.config.threading.set_intra_op_parallelism_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))
        tf.config.threading.set_inter_op_parallelism_threads(1)
    if cfg.precision in POLICIES:
        tf.keras.mixed_precision.set_global_policy(POLICIES[cfg.precision])
    return tf, hvd


class Data:
    """Batches (images NHWC float, one-hot labels) as an endless tf.data stream from any step on."""

    def __init__(self, tf, cfg: TrainConfig, rank: int, size: int):
        self.tf, self.cfg, self.rank, self.size = tf, cfg, rank, size
        self.synthetic = cfg.data == "synthetic"
        self.val = None
        if self.synthetic:
            self.steps_per_epoch = max(1, IMAGENET_TRAIN_IMAGES // (cfg.batch_size * size))
            return
        root = Path(cfg.data)
        classes, samples = scan(root, "train")
        if len(classes) > cfg.num_classes:
            raise UsageError(f"--data {root}: {len(classes)} classes, more than --num-classes {cfg.num_classes}")
        verify_images(samples, cfg.max_bad_images, cfg.seed)
        self.files = [str(p) for p, _ in samples]
        self.labels = [label for _, label in samples]
        self.steps_per_epoch = len(samples) // (cfg.batch_size * size)
        if self.steps_per_epoch == 0:
            raise UsageError(f"--data {root}: {len(samples)} training images are fewer than one global batch "
                             f"({cfg.batch_size} x {size}); lower --batch-size")
        if (root / "val").is_dir():
            _, val = scan(root, "val")
            self.val = ([str(p) for p, _ in val], [label for _, label in val])

    def _decode(self, path, label, seed, train: bool):
        tf, size = self.tf, self.cfg.image_size
        image = tf.image.decode_jpeg(tf.io.read_file(path), channels=3)
        image = tf.image.convert_image_dtype(image, tf.float32)
        if train:
            # Resize a little larger, then a seeded random crop and flip: the same augmentation on a rerun.
            image = tf.image.resize(image, (int(size * 1.15), int(size * 1.15)))
            image = tf.image.stateless_random_crop(image, (size, size, 3), seed=seed)
            image = tf.image.stateless_random_flip_left_right(image, seed=seed)
        else:
            image = tf.image.resize(image, (size, size))
        image = (image - MEAN) / STD
        return image, tf.one_hot(label, self.cfg.num_classes)

    def stream(self, start_step: int):
        tf, cfg = self.tf, self.cfg
        if self.synthetic:
            gen = tf.random.Generator.from_seed(cfg.seed + self.rank)
            images = gen.normal((cfg.batch_size, cfg.image_size, cfg.image_size, 3))
            labels = tf.one_hot(gen.uniform((cfg.batch_size,), 0, cfg.num_classes, dtype=tf.int32), cfg.num_classes)
            return tf.data.Dataset.from_tensors((images, labels)).repeat()
        epoch, offset = divmod(start_step, self.steps_per_epoch)
        files, labels = tf.constant(self.files), tf.constant(self.labels)
        per_epoch = self.steps_per_epoch * cfg.batch_size

        def one_epoch(e):
            # Every rank shuffles the same way (seed, epoch), then takes its own shard: no overlap, no gaps.
            order = tf.random.experimental.stateless_shuffle(tf.range(len(self.files)), seed=[cfg.seed, e])
            mine = order[self.rank::self.size][:per_epoch]
            ds = tf.data.Dataset.from_tensor_slices((tf.gather(files, mine), tf.gather(labels, mine), mine))
            return ds.map(lambda p, y, i: self._decode(p, y, tf.stack([tf.cast(e, tf.int32) * 7919 + cfg.seed,
                                                                       tf.cast(i, tf.int32)]), True),
                          num_parallel_calls=max(1, cfg.workers) if cfg.workers else tf.data.AUTOTUNE)

        epochs = tf.data.Dataset.range(epoch, 1 << 30)
        stream = epochs.flat_map(one_epoch).batch(cfg.batch_size, drop_remainder=True)
        return stream.skip(offset).prefetch(tf.data.AUTOTUNE)

    def validation(self):
        if self.val is None:
            return None
        tf = self.tf
        files, labels = self.val
        ds = tf.data.Dataset.from_tensor_slices((files[self.rank::self.size], labels[self.rank::self.size]))
        return ds.map(lambda p, y: self._decode(p, y, None, False)).batch(self.cfg.batch_size)


def _build(tf, cfg: TrainConfig):
    tf.keras.utils.set_random_seed(cfg.seed)  # the same initial weights on every rank and every run
    model = tf.keras.applications.ResNet50(weights=None, classes=cfg.num_classes, classifier_activation=None,
                                           input_shape=(cfg.image_size, cfg.image_size, 3))
    # BatchNorm's running statistics follow the batches at PyTorch's rate (its momentum 0.1 is 0.9 here), as in
    # TensorFlow's own ResNet recipe: Keras's default 0.99 leaves them near their initial values for the first
    # few hundred steps, so evaluation and the exported model would see the wrong statistics.
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            layer.momentum = BN_MOMENTUM
    # Legacy SGD: the optimizer Horovod 0.28 wraps reliably under TF 2.15 (Keras 2). The LR is a variable we
    # assign each step (training/schedule.py); a float set later would not reach the traced step.
    learning_rate = tf.Variable(cfg.base_lr, trainable=False, dtype=tf.float32, name="learning_rate")
    optimizer = tf.keras.optimizers.legacy.SGD(learning_rate=cfg.base_lr, momentum=cfg.momentum)
    if cfg.framework == "keras":
        import horovod.tensorflow.keras as hvd_keras

        compression = hvd_keras.Compression.fp16 if cfg.fp16_allreduce else hvd_keras.Compression.none
        optimizer = hvd_keras.DistributedOptimizer(optimizer, compression=compression)
    # Attached to the optimizer that runs: Horovod's Keras wrapper rebuilds the optimizer from its config,
    # which keeps neither a variable LR (it would train at a constant base LR) nor gradient transformers.
    optimizer.learning_rate = learning_rate
    optimizer.gradient_transformers = [_weight_decay(tf, cfg.weight_decay)] if cfg.weight_decay else []
    if cfg.precision == "fp16":  # loss scaling around the (distributed) optimizer
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
    return model, optimizer, learning_rate


def _weight_decay(tf, weight_decay: float):
    """L2 decay as PyTorch's SGD(weight_decay=...) applies it: gradient + decay x weight for every parameter,
    after the allreduce. Kept out of the loss, so the logged loss is the cross-entropy on every path (a decay
    term in the loss grows with the weight norms and hides whether the model learns)."""
    def add_decay(grads_and_vars):
        return [(grad + tf.cast(weight_decay, grad.dtype) * tf.cast(var, grad.dtype), var)
                for grad, var in grads_and_vars]
    return add_decay


def _loss_fn(tf, cfg: TrainConfig):
    xent = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=cfg.label_smoothing)

    def loss(labels, logits):
        return xent(labels, tf.cast(logits, tf.float32))
    return loss


def _state(model, optimizer, step: int, cfg: TrainConfig) -> dict:
    return {"step": step, "model": model.get_weights(), "optimizer": optimizer.get_weights(), "config": as_dict(cfg)}


def _save(state: dict, path: Path) -> None:
    with open(path, "wb") as f:
        pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)


def _load(path: Path) -> dict:
    with open(path, "rb") as f:
        state = pickle.load(f)  # our own files, written by rank 0 of our own runs
    if not isinstance(state, dict) or not {"step", "model", "optimizer"} <= set(state):
        raise ValueError("not a training checkpoint")
    return state


def _restore(model, optimizer, state: dict) -> None:
    model.set_weights(state["model"])
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    inner._create_all_weights(model.trainable_variables)  # slots exist only after a step otherwise
    optimizer.set_weights(state["optimizer"])


class Reporter:
    """Rank 0's progress: metrics.jsonl, TensorBoard, a line per logged step; every rank's rates."""

    def __init__(self, tf, cfg: TrainConfig, out: Path, rank0: bool, append: bool, global_batch: int,
                 steps_per_epoch: int, total_steps: int, start_step: int):
        self.cfg, self.rank0, self.global_batch = cfg, rank0, global_batch
        self.steps_per_epoch, self.total_steps = steps_per_epoch, total_steps
        self.rates: list[float] = []
        self.loss = float("nan")
        self.window = (time.perf_counter(), start_step)
        if rank0:
            self.writer = tf.summary.create_file_writer(str(out / "tensorboard"))
            self.log = metrics.MetricsLog(out / "metrics.jsonl", append=append)
        self.tf = tf

    def step(self, step: int, loss: float, lr: float) -> None:
        now = time.perf_counter()
        rate = (step - self.window[1]) * self.global_batch / (now - self.window[0])
        self.window = (now, step)
        self.rates.append(rate)
        self.loss = loss
        if not self.rank0:
            return
        epoch = round(step / self.steps_per_epoch, 4)
        self.log.write({"step": step, "epoch": epoch, "loss": loss, "lr": lr, "img_per_sec": round(rate, 2)})
        with self.writer.as_default(step=step):
            self.tf.summary.scalar("train/loss", loss)
            self.tf.summary.scalar("train/lr", lr)
            self.tf.summary.scalar("train/img_per_sec", rate)
        print(f"step {step}/{self.total_steps}  epoch {epoch:.2f}  loss {loss:.4f}  lr {lr:.4g}  {rate:.1f} img/s",
              flush=True)

    def close(self) -> None:
        if self.rank0:
            self.writer.close()
            self.log.close()


def _export(tf, model, out: Path, image_size: int) -> dict:
    """SavedModel (tmp dir + rename), then ONNX through tf2onnx, checked with onnxruntime against TF."""
    import numpy as np

    exported = {}
    final, tmp = out / "saved_model", out / "saved_model.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    signature = tf.TensorSpec((None, image_size, image_size, 3), tf.float32, name="images")
    serve = tf.function(lambda images: tf.cast(model(images, training=False), tf.float32), input_signature=[signature])
    tf.saved_model.save(model, str(tmp), signatures={"serving_default": serve})
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    exported["saved_model"] = str(final)
    try:
        import onnxruntime
        import tf2onnx
    except ImportError as err:
        print(f"warning: no ONNX export ({err}); the SavedModel is the model", file=sys.stderr)
        return exported
    onnx_tmp, onnx_final = out / "model.onnx.tmp", out / "model.onnx"
    tf2onnx.convert.from_function(serve, input_signature=[signature], opset=17, output_path=str(onnx_tmp))
    sample = np.random.default_rng(0).standard_normal((2, image_size, image_size, 3)).astype(np.float32)
    session = onnxruntime.InferenceSession(str(onnx_tmp), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: sample})[0]
    diff = float(np.abs(got - serve(tf.constant(sample)).numpy()).max())
    if diff > 1e-2:
        onnx_tmp.unlink()
        print(f"warning: ONNX export differs from TensorFlow by {diff:.3g}; not written", file=sys.stderr)
        return exported
    os.replace(onnx_tmp, onnx_final)
    exported["onnx"] = str(onnx_final)
    return exported


@dataclass
class Trained:
    summary: dict
    model: object  # this rank's tf.keras.Model
    rank: int


def run(cfg: TrainConfig) -> Trained:
    out = Path(cfg.output_dir)
    metrics.prepare_output_dir(out)
    tf, hvd = _setup(cfg)
    rank0 = hvd.rank() == 0
    data = Data(tf, cfg, hvd.rank(), hvd.size())
    global_batch = cfg.batch_size * hvd.size()
    total_steps = cfg.steps or max(1, math.ceil(cfg.epochs * data.steps_per_epoch))
    stop_at = min(total_steps, cfg.stop_at_step or total_steps)
    warmup = cfg.warmup_steps if cfg.warmup_steps >= 0 else max(1, total_steps // 20)
    peak = peak_lr(cfg.base_lr, global_batch)
    schedule = dict(peak=peak, total_steps=total_steps, warmup_steps=warmup, schedule=cfg.lr_schedule,
                    base_lr=cfg.base_lr)

    model, optimizer, learning_rate = _build(tf, cfg)
    ckpt_dir = out / "checkpoints"
    resume_from = hvd.broadcast_object(str(checkpoint.resume_path(cfg.resume, ckpt_dir, _load) or "") if rank0 else None,
                                       root_rank=0, name="resume_from")
    step = 0
    compression = hvd.Compression.fp16 if cfg.fp16_allreduce else hvd.Compression.none
    if resume_from:
        state = _load(Path(resume_from))
        _restore(model, optimizer, state)
        step = state["step"]
        if rank0:
            print(f"resumed from {resume_from} at step {step}", flush=True)
    if rank0:
        print(f"training ResNet50 ({cfg.framework}, horovod, {hvd.size()} worker(s), "
              f"{'gpu' if tf.config.list_physical_devices('GPU') else 'cpu'}): {total_steps} steps, global batch "
              f"{global_batch}, peak LR {peak:.4g}, {cfg.precision}{', xla' if cfg.xla else ''}", flush=True)
    reporter = Reporter(tf, cfg, out, rank0, bool(resume_from), global_batch, data.steps_per_epoch, total_steps, step)
    start_step, started = step, time.perf_counter()
    loss_fn = _loss_fn(tf, cfg)

    def save_checkpoint(at: int) -> None:
        if rank0 and (at % cfg.checkpoint_every == 0 or at == stop_at):
            checkpoint.save(ckpt_dir, at, _state(model, optimizer, at, cfg), _save, cfg.keep_checkpoints, SUFFIX)

    if step < stop_at:
        if cfg.framework == "keras":
            step = _fit(tf, hvd, cfg, model, optimizer, learning_rate, loss_fn, data.stream(step), step, stop_at,
                        schedule, reporter, save_checkpoint)
        else:
            step = _custom_loop(tf, hvd, cfg, model, optimizer, learning_rate, loss_fn, data.stream(step), step,
                                stop_at, schedule, reporter, save_checkpoint, compression, first=not resume_from)
    wall = time.perf_counter() - started
    top1 = _evaluate(tf, hvd, model, data.validation())
    steady = reporter.rates[1:] if len(reporter.rates) > 1 else reporter.rates
    result = metrics.summary(world_size=hvd.size(), global_rates=steady,
                             images_seen=(step - start_step) * global_batch, wall_time_s=wall,
                             final_loss=reporter.loss, top1=top1, framework=cfg.framework,
                             extra={"steps": step, "resumed_from_step": start_step,
                                    "device": "gpu" if tf.config.list_physical_devices("GPU") else "cpu",
                                    "precision": cfg.precision, "global_batch": global_batch, "xla": cfg.xla})
    reporter.close()
    if rank0:
        if cfg.export and step == total_steps:
            result.update(_export(tf, model, out, cfg.image_size))
        metrics.write_json_atomic(out / "summary.json", result)
    return Trained(result, model, hvd.rank())


def _custom_loop(tf, hvd, cfg, model, optimizer, learning_rate, loss_fn, stream, step, stop_at, schedule, reporter,
                 save_checkpoint, compression, first: bool) -> int:
    forward = tf.function(lambda images: model(images, training=True), jit_compile=cfg.xla)
    scaled = cfg.precision == "fp16"

    @tf.function
    def train_step(images, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, forward(images))
            objective = optimizer.get_scaled_loss(loss) if scaled else loss
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(objective, model.trainable_variables)
        if scaled:
            grads = optimizer.get_unscaled_gradients(grads)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    broadcast = first
    for images, labels in stream:
        learning_rate.assign(lr_at(step, **schedule))
        loss = train_step(images, labels)
        if broadcast:
            # After the first step the optimizer's slots exist: start every rank from rank 0's state.
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(optimizer.variables(), root_rank=0)
            broadcast = False
        step += 1
        if step % cfg.log_every == 0 or step == stop_at:
            reporter.step(step, float(hvd.allreduce(loss, op=hvd.Average)), lr_at(step - 1, **schedule))
        save_checkpoint(step)
        if step >= stop_at:
            break
    return step


def _fit(tf, hvd, cfg, model, optimizer, learning_rate, loss_fn, stream, step, stop_at, schedule, reporter, save_checkpoint) -> int:
    position = {"step": step}

    class Schedule(tf.keras.callbacks.Callback):
        """Per-step LR (training/schedule.py), logging, checkpoints, and the stop at stop_at."""

        def on_train_batch_begin(self, batch, logs=None):
            learning_rate.assign(lr_at(position["step"], **schedule))
            # Keras logs the loss averaged since the epoch began; a reset makes it this step's, as elsewhere.
            self.model.reset_metrics()

        def on_train_batch_end(self, batch, logs=None):
            position["step"] += 1
            at = position["step"]
            if at % cfg.log_every == 0 or at == stop_at:
                # MetricAverageCallback averages epoch-end logs; per-step losses are averaged here.
                reporter.step(at, float(hvd.allreduce(tf.constant(logs["loss"]), op=hvd.Average)),
                              lr_at(at - 1, **schedule))
            save_checkpoint(at)
            if at >= stop_at:
                self.model.stop_training = True

    import horovod.tensorflow.keras as hvd_keras

    model.compile(optimizer=optimizer, loss=loss_fn, metrics=["accuracy"])
    callbacks = [hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0), hvd_keras.callbacks.MetricAverageCallback(),
                 Schedule()]
    # Keras counts epochs; we count steps. The stream starts at `step` exactly, the epochs are bookkeeping.
    per_epoch = min(stop_at - step, 10_000)
    epochs_needed = math.ceil((stop_at - step) / per_epoch)
    model.fit(stream, steps_per_epoch=per_epoch, epochs=epochs_needed, callbacks=callbacks, verbose=0)
    return position["step"]


def _evaluate(tf, hvd, model, validation) -> float | None:
    if validation is None:
        return None
    correct = total = 0
    for images, labels in validation:
        logits = model(images, training=False)
        correct += int(tf.reduce_sum(tf.cast(tf.argmax(logits, 1) == tf.argmax(labels, 1), tf.int32)))
        total += int(labels.shape[0])
    correct = float(hvd.allreduce(tf.constant(float(correct)), op=hvd.Sum))
    total = float(hvd.allreduce(tf.constant(float(total)), op=hvd.Sum))
    return correct / total if total else 0.0


def main(cfg: TrainConfig) -> int:
    trained = run(cfg)
    result = trained.summary
    if trained.rank == 0:
        print(metrics.done_line(result, cfg.output_dir), flush=True)
    return 0
