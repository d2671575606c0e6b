"""ResNet50 with TensorFlow (custom loop) or Keras (`Model.fit`) under Horovod: what the runner
(training/runner.py) needs from TensorFlow. Same flags and outputs as the PyTorch path.

  --framework tensorflow  a training step in a tf.function with hvd.DistributedGradientTape; --xla compiles
                          the forward and backward pass (the allreduce stays outside XLA)
  --framework keras       Model.fit with Horovod's DistributedOptimizer and callbacks (initial broadcast,
                          metric averaging); the LR follows the runner's plan per step, as in PyTorch

Both: tf.keras.applications.ResNet50(weights=None), SGD with momentum, L2 weight decay as PyTorch's SGD
applies it, label smoothing, mixed precision for bf16/fp16, checkpoints of pickled weights, and a SavedModel
(plus model.onnx through tf2onnx, checked with onnxruntime).
Launch: horovodrun -np 2 -H localhost:2 python -m training train --framework keras --data synthetic ...
"""
from __future__ import annotations

import math
import os
import pickle
import time
from dataclasses import replace
from pathlib import Path

from training import efficiency, interconnect, runner
from training.metrics import usable_cores
from training.config import TrainConfig, as_dict, resolve_for_device
from training.cluster.launch import set_horovod_cycle, workers_on_this_host
from training.tensorflow.data import Data
from training.tensorflow.device import bind_gpu, has_bf16

POLICIES = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
BN_MOMENTUM = 0.9


def _import_tensorflow():
    """TensorFlow, imported with its oneDNN kernels on for every x86 CPU. TensorFlow turns them on by itself only
    on CPUs with neural-network features (AVX512_VNNI, AVX512_BF16, AMX and a few more: IsMklEnabled in
    tensorflow/core/util/port.cc), and reads TF_ENABLE_ONEDNN_OPTS once, at import
    (TensorFlow 2.9 release notes, https://github.com/tensorflow/tensorflow/releases/tag/v2.9.0: "oneDNN CPU
    performance optimizations ... can be turned off by setting TF_ENABLE_ONEDNN_OPTS=0"). On an AVX2-only CPU
    ResNet50's steps ran 2.3x faster with them (15.0 -> 34.9 img/s a rank, 2 ranks, 32 px); a GPU run's few
    host-side ops lose nothing. A value the user set wins."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    import tensorflow as tf

    return tf


def _setup_native(cfg: TrainConfig):
    """Import TF and create tf.distribute.MultiWorkerMirroredStrategy first, before any other TF op (TensorFlow
    requires it: https://www.tensorflow.org/api_docs/python/tf/distribute/MultiWorkerMirroredStrategy), from
    TF_CONFIG (none: one worker); this process drives every GPU of its node. Horovod is not imported.
    Returns (tf, strategy, cfg)."""
    tf = _import_tensorflow()

    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if not gpus:  # the cores shared fairly between the workers of one host, as Horovod's ranks share them
        workers_here = workers_on_this_host(os.environ.get("TF_CONFIG", ""))
        tf.config.threading.set_intra_op_parallelism_threads(max(1, usable_cores() // workers_here))
        tf.config.threading.set_inter_op_parallelism_threads(1)
    # NCCL between GPUs, ring all-reduce (gRPC) between CPUs (tf.distribute.experimental.CommunicationOptions).
    implementation = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=implementation.NCCL if gpus else implementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    cfg = resolve_for_device(cfg, bool(gpus), bf16=has_bf16(tf))
    if cfg.precision in POLICIES:
        tf.keras.mixed_precision.set_global_policy(POLICIES[cfg.precision])
    return tf, strategy, cfg


def _setup(cfg: TrainConfig):
    """Import TF and Horovod, with threads shared fairly between the ranks of one host (as in PyTorch) and the
    hardware-dependent defaults decided; returns (tf, hvd, cfg)."""
    tf = _import_tensorflow()
    import horovod.tensorflow as hvd  # collectives; Keras's optimizer wrapper and callbacks come later

    set_horovod_cycle(gpu=bool(tf.config.list_physical_devices("GPU")))
    hvd.init()
    gpu = bind_gpu(tf, hvd.local_rank(), hvd.local_size())  # Horovod: one GPU per rank, before any collective
    if not gpu:
        tf.config.threading.set_intra_op_parallelism_threads(max(1, usable_cores() // hvd.local_size()))
        tf.config.threading.set_inter_op_parallelism_threads(1)
    cfg = resolve_for_device(cfg, gpu, bf16=has_bf16(tf))
    if cfg.precision in POLICIES:
        tf.keras.mixed_precision.set_global_policy(POLICIES[cfg.precision])
    return tf, hvd, cfg


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
    # assign before each step (the runner's plan); a float set later would not reach the traced step.
    learning_rate = tf.Variable(cfg.base_lr, trainable=False, dtype=tf.float32, name="learning_rate")
    optimizer = tf.keras.optimizers.legacy.SGD(learning_rate=cfg.base_lr, momentum=cfg.momentum)
    if cfg.framework == "keras" and cfg.dist == "horovod":
        import horovod.tensorflow.keras as hvd_keras

        compression = hvd_keras.Compression.fp16 if cfg.fp16_allreduce else hvd_keras.Compression.none
        optimizer = _traced_without_autograph(tf, hvd_keras.DistributedOptimizer(optimizer, compression=compression))
    # Attached to the optimizer that runs: Horovod's Keras wrapper rebuilds the optimizer from its config,
    # which keeps neither a variable LR (it would train at a constant base LR) nor gradient transformers.
    optimizer.learning_rate = learning_rate
    optimizer.gradient_transformers = [_weight_decay(tf, cfg.weight_decay)] if cfg.weight_decay else []
    if cfg.precision == "fp16":  # loss scaling around the (distributed) optimizer
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
    # The slots (momentum), iterations and hyperparameters made now rather than by the first apply_gradients:
    # a tf.function that creates variables on its first call is traced twice, and a ResNet50 trace is most of a
    # short run's time (first step 32 s -> 14 s here; the same losses). A restored checkpoint fills these slots.
    getattr(optimizer, "inner_optimizer", optimizer)._create_all_weights(model.trainable_variables)
    return model, optimizer, learning_rate


def _traced_without_autograph(tf, optimizer):
    """Horovod's Keras optimizer all-reduces the gradients in a tf.function of its own with AutoGraph on
    (horovod/_keras/__init__.py sets `_allreduce_grads` from horovod/tensorflow/__init__.py
    `_make_allreduce_grads_fn`, which wraps it in `tf.function(f)` when made eagerly, horovod/tensorflow/util.py
    `_make_subgraph`). AutoGraph then runs its converted copy of Horovod's Python for each of ResNet50's 214
    gradients; that code branches on Python values only, so the graph is the same without it, and each rank starts
    training sooner (a 6-step Keras run on CPU: 25 -> 21 s of CPU). Every path we use reads the attribute when it
    runs (`_compute_gradients`, `get_gradients`); only backward_passes_per_step > 1, which we never pass, keeps the
    original. The attribute is Horovod 0.28.1's (its last release, the one images/build_horovod.sh builds): every
    Keras test builds this optimizer, so a Horovod without it fails there, and the learnable runs' test checks that
    no all-reduce function was converted."""
    optimizer._allreduce_grads = tf.function(optimizer._allreduce_grads.python_function, autograph=False)
    return optimizer


def _weight_decay(tf, weight_decay: float):
    """L2 decay as PyTorch's SGD(weight_decay=...) applies it: gradient + decay x weight for every parameter,
    after the allreduce. Kept out of the loss, so the logged loss is the cross-entropy on every path (a decay
    term in the loss grows with the weight norms and hides whether the model learns)."""
    def add_decay(grads_and_vars):
        return [(grad + tf.cast(weight_decay, grad.dtype) * tf.cast(var, grad.dtype), var)
                for grad, var in grads_and_vars]
    return add_decay


def _loss_fn(tf, cfg: TrainConfig):
    # Native: one loss per example; Keras fit and the custom loop divide by the global batch themselves (a
    # strategy refuses a Keras loss that averages over the replica's batch outside fit).
    reduction = tf.keras.losses.Reduction.NONE if cfg.dist == "native" else tf.keras.losses.Reduction.AUTO
    xent = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=cfg.label_smoothing,
                                                   reduction=reduction)

    def loss(labels, logits):
        return xent(labels, tf.cast(logits, tf.float32))
    return loss


def _step_times(cfg: TrainConfig) -> efficiency.StepTimes | None:
    """The custom loop's timings: data wait (next() on the tf.data stream) and the traced step, whose gradient
    all-reduce (Horovod's, or the strategy's) runs inside it, so exchange is not measured apart from compute. Keras's
    Model.fit draws its batches inside its own step: not timed (None)."""
    return None if cfg.framework == "keras" else efficiency.StepTimes(exchange=None)


class TfWriter:
    def __init__(self, tf, directory: Path):
        self.tf, self._writer = tf, tf.summary.create_file_writer(str(directory))

    def scalar(self, tag: str, value: float, step: int) -> None:
        with self._writer.as_default(step=step):
            self.tf.summary.scalar(tag, value)

    def close(self) -> None:
        self._writer.close()


class TfLoop:
    distribution = "horovod"
    checkpoint_suffix = ".tfckpt"

    def __init__(self, cfg: TrainConfig):
        tf, hvd, cfg = _setup(cfg)
        self.tf, self.hvd, self.cfg = tf, hvd, cfg
        self.rank, self.size = hvd.rank(), hvd.size()
        self.device = "gpu" if tf.config.list_physical_devices("GPU") else "cpu"
        self.data = Data(tf, cfg, self.rank, self.size)
        self.steps_per_epoch = self.data.steps_per_epoch
        self.model, self.optimizer, self.learning_rate = _build(tf, cfg)
        self.loss_fn = _loss_fn(tf, cfg)
        self.resumed = False
        self.step_times = _step_times(cfg)

    def load_checkpoint(self, path: Path) -> dict:
        with open(path, "rb") as f:
            state = pickle.load(f)  # our own files, written by rank 0 of our own runs
        if not isinstance(state, dict) or not {"step", "model", "optimizer"} <= set(state):
            raise ValueError("not a training checkpoint")
        return state

    def restore(self, state: dict) -> None:
        self.model.set_weights(state["model"])
        self.optimizer.set_weights(state["optimizer"])  # its slots exist from _build
        self.resumed = True  # every rank loaded the same file: no initial broadcast needed

    def checkpoint_state(self, step: int) -> dict:
        return {"step": step, "model": self.model.get_weights(), "optimizer": self.optimizer.get_weights(),
                "config": as_dict(self.cfg)}

    def save_checkpoint(self, state: dict, path: Path) -> None:
        with open(path, "wb") as f:
            pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)

    def broadcast_object(self, obj):
        return self.hvd.broadcast_object(obj, root_rank=0, name="broadcast_object")

    def averaged(self, value) -> float:
        return float(self.hvd.allreduce(self.tf.constant(value), op=self.hvd.Average))

    def allreduce_seconds(self, count: int, iters: int) -> float:
        return interconnect.tf_allreduce_seconds(self.tf, self.hvd, count, iters)

    def fit(self, start, stop_at, lr_for, after_step) -> int:
        stream = self.data.stream(start)
        if self.cfg.framework == "keras":
            return self._fit_keras(stream, start, stop_at, lr_for, after_step)
        return self._custom_loop(stream, start, stop_at, lr_for, after_step)

    def _custom_loop(self, stream, step, stop_at, lr_for, after_step) -> int:
        tf, hvd, cfg, model, optimizer = self.tf, self.hvd, self.cfg, self.model, self.optimizer
        forward = tf.function(lambda images: model(images, training=True), jit_compile=cfg.xla)
        scaled = cfg.precision == "fp16"
        compression = hvd.Compression.fp16 if cfg.fp16_allreduce else hvd.Compression.none
        loss_fn = self.loss_fn

        # No AutoGraph: the step branches on Python values only, and AutoGraph would run its converted copy of
        # Horovod's gradient all-reduce for each gradient (ResNet50 has 214), for the same graph: a 6-step run on CPU
        # 27.6 -> 20.2 s of CPU, most of it each rank's first step (see _traced_without_autograph for Keras's path).
        @tf.function(autograph=False)
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

        broadcast = not self.resumed
        fetching = time.perf_counter()
        for images, labels in stream:
            computing = time.perf_counter()
            self.learning_rate.assign(lr_for(step))
            loss = train_step(images, labels)
            self.step_times.add(computing - fetching, time.perf_counter() - computing, None)
            if broadcast:
                # After the first step: start every rank from rank 0's state, the optimizer's slots included.
                hvd.broadcast_variables(model.variables, root_rank=0)
                hvd.broadcast_variables(optimizer.variables(), root_rank=0)
                broadcast = False
            step += 1
            after_step(step, lambda: self.averaged(loss))
            if step >= stop_at:
                break
            fetching = time.perf_counter()
        return step

    def _fit_keras(self, stream, step, stop_at, lr_for, after_step) -> int:
        tf, loop = self.tf, self
        position = {"step": step}

        class Steps(tf.keras.callbacks.Callback):
            """The runner's per-step LR, its after-step hook, and the stop at stop_at."""

            def on_train_batch_begin(self, batch, logs=None):
                loop.learning_rate.assign(lr_for(position["step"]))
                # Keras logs the loss averaged since the epoch began; a reset makes it this step's, as elsewhere.
                self.model.reset_metrics()

            def on_train_batch_end(self, batch, logs=None):
                position["step"] += 1
                # MetricAverageCallback averages epoch-end logs; per-step losses are averaged here.
                after_step(position["step"], lambda: loop.averaged(logs["loss"]))
                if position["step"] >= stop_at:
                    self.model.stop_training = True

        # No compiled metrics: nothing reads them (top-1 is evaluate's), and Keras builds them inside the first
        # step's trace, which then runs twice (variables made on a tf.function's first call).
        self.model.compile(optimizer=self.optimizer, loss=self.loss_fn)
        callbacks = self._keras_callbacks() + [Steps()]
        # Keras counts epochs; we count steps. The stream starts at `step` exactly, the epochs are bookkeeping.
        per_epoch = min(stop_at - step, 10_000)
        self.model.fit(stream, steps_per_epoch=per_epoch, epochs=math.ceil((stop_at - step) / per_epoch),
                       callbacks=callbacks, verbose=0)
        return position["step"]

    def _keras_callbacks(self) -> list:
        """Horovod's: every rank starts from rank 0's variables, and epoch-end logs are averaged over ranks."""
        import horovod.tensorflow.keras as hvd_keras

        return [hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0), hvd_keras.callbacks.MetricAverageCallback()]

    def evaluate(self) -> float | None:
        validation = self.data.validation()
        if validation is None:
            return None
        tf, hvd = self.tf, self.hvd
        correct = total = 0
        for images, labels in validation:
            logits = self.model(images, training=False)
            correct += int(tf.reduce_sum(tf.cast(tf.argmax(logits, 1) == tf.argmax(labels, 1), tf.int32)))
            total += int(labels.shape[0])
        correct = float(hvd.allreduce(tf.constant(float(correct)), op=hvd.Sum))
        total = float(hvd.allreduce(tf.constant(float(total)), op=hvd.Sum))
        return correct / total if total else 0.0

    def tensorboard(self, directory: Path) -> TfWriter:
        return TfWriter(self.tf, directory)

    def export(self, out: Path, card) -> dict[str, str]:
        from training.tensorflow.export import export_checked

        return export_checked(self.tf, self.model, out, self.cfg.image_size, card)

    def peak_gpu_memory_mb(self) -> float | None:
        if self.device != "gpu":
            return None
        return self.tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20  # bytes, since TF 2.5

    def shutdown(self) -> None:
        pass  # Horovod shuts down at exit; Keras callbacks may still hold collectives until then


class NativeLoop(TfLoop):
    """--dist native: the same model, data, LR plan and checkpoints under MultiWorkerMirroredStrategy, one
    worker process per node (rank: its TF_CONFIG task index; size: replicas, i.e. GPUs, in all). Each worker
    reads its node's shard, batch_size per replica. Files are rank 0's: what it saves and exports is its own
    copy of the variables (as under Horovod, batch-norm statistics are each replica's own), read without a
    collective, so rank 0 alone may checkpoint whenever the runner says."""
    distribution = "native"

    def __init__(self, cfg: TrainConfig):
        tf, strategy, cfg = _setup_native(cfg)
        self.tf, self.strategy, self.cfg = tf, strategy, cfg
        resolver = strategy.cluster_resolver
        self.rank = (resolver.task_id or 0) if resolver and resolver.task_type else 0
        self.size = strategy.num_replicas_in_sync
        self.local = len(strategy.extended.worker_devices)  # replicas this worker drives
        self.device = "gpu" if tf.config.list_physical_devices("GPU") else "cpu"
        # The node's shard in batches of batch_size x local replicas, split into one batch per replica below.
        self.data = Data(tf, replace(cfg, batch_size=cfg.batch_size * self.local), self.rank, self.size // self.local)
        self.steps_per_epoch = self.data.steps_per_epoch
        with strategy.scope():
            self.model, self.optimizer, self.learning_rate = _build(tf, cfg)
        self.loss_fn = _loss_fn(tf, cfg)
        self.resumed = False
        self.step_times = _step_times(cfg)
        self._plain = None

    def _local(self, variables) -> list:
        # this worker's first copy of each variable: no cross-worker read (a synced-on-read one would all-reduce)
        return [self.strategy.experimental_local_results(v)[0].numpy() for v in variables]

    def checkpoint_state(self, step: int) -> dict:
        return {"step": step, "model": self._local(self.model.weights),
                "optimizer": self._local(self.optimizer.weights), "config": as_dict(self.cfg)}

    def _replicated(self, make):
        """A per-replica value: make(replica id) on each of this worker's replicas."""
        return self.strategy.experimental_distribute_values_from_function(
            lambda ctx: make(ctx.replica_id_in_sync_group))

    def _sum(self, per_replica) -> float:
        return float(self.strategy.reduce(self.tf.distribute.ReduceOp.SUM, per_replica, axis=None))

    def broadcast_object(self, obj):
        tf = self.tf
        data = pickle.dumps(obj) if self.rank == 0 else b""
        length = int(self._sum(self._replicated(lambda r: tf.constant(float(len(data) if r == 0 else 0)))))
        padded = list(data.ljust(length, b"\0"))
        got = self.strategy.reduce(tf.distribute.ReduceOp.SUM, self._replicated(
            lambda r: tf.constant(padded if r == 0 else [0] * length, dtype=tf.float32)), axis=None)
        return pickle.loads(bytes(int(b) for b in got.numpy()))

    def averaged(self, value) -> float:
        tf = self.tf
        return self._sum(self._replicated(lambda r: tf.constant(float(value) / self.size)))

    def _summed(self, value: float) -> float:  # every worker's value once, whatever its replica count
        return self._sum(self._replicated(lambda r: self.tf.constant(value / self.local)))

    def fit(self, start, stop_at, lr_for, after_step) -> int:
        tf, data, per_replica = self.tf, self.data, self.cfg.batch_size

        def dataset(context):
            stream = data.stream(start)
            return stream.unbatch().batch(per_replica, drop_remainder=True) if self.local > 1 else stream
        if self.cfg.framework == "keras":
            return self._fit_keras(tf.keras.utils.experimental.DatasetCreator(dataset), start, stop_at, lr_for,
                                   after_step)
        return self._custom_loop(self.strategy.distribute_datasets_from_function(dataset), start, stop_at, lr_for,
                                 after_step)

    def _custom_loop(self, stream, step, stop_at, lr_for, after_step) -> int:
        tf, strategy, cfg, model, optimizer = self.tf, self.strategy, self.cfg, self.model, self.optimizer
        forward = tf.function(lambda images: model(images, training=True), jit_compile=cfg.xla)
        scaled, loss_fn, global_batch = cfg.precision == "fp16", self.loss_fn, cfg.batch_size * self.size

        def replica_step(images, labels):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(labels, forward(images)), global_batch_size=global_batch)
                objective = optimizer.get_scaled_loss(loss) if scaled else loss
            grads = tape.gradient(objective, model.trainable_variables)
            if scaled:
                grads = optimizer.get_unscaled_gradients(grads)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))  # all-reduces the sum over replicas
            return loss

        @tf.function
        def train_step(batch):
            return strategy.run(replica_step, args=batch)

        fetching = time.perf_counter()
        for batch in stream:
            computing = time.perf_counter()
            self.learning_rate.assign(lr_for(step))
            losses = train_step(batch)
            self.step_times.add(computing - fetching, time.perf_counter() - computing, None)
            step += 1
            after_step(step, lambda: self._sum(losses))  # each replica's share of the global mean
            if step >= stop_at:
                break
            fetching = time.perf_counter()
        return step

    def _keras_callbacks(self) -> list:
        return []  # the strategy mirrors the variables and reduces the gradients itself

    def _plain_model(self):
        """The model outside the strategy, with this worker's weights: evaluating or saving the distributed one
        would read synced-on-read variables through a collective, which rank 0 alone (export) cannot do."""
        if self._plain is None:
            self._plain = self.tf.keras.models.clone_model(self.model)
            self._plain.set_weights(self._local(self.model.weights))
        return self._plain

    def evaluate(self) -> float | None:
        validation = self.data.validation()
        if validation is None:
            return None
        tf, model = self.tf, self._plain_model()
        correct = total = 0
        for images, labels in validation:
            logits = model(images, training=False)
            correct += int(tf.reduce_sum(tf.cast(tf.argmax(logits, 1) == tf.argmax(labels, 1), tf.int32)))
            total += int(labels.shape[0])
        correct, total = self._summed(float(correct)), self._summed(float(total))
        return correct / total if total else 0.0

    def export(self, out: Path, card) -> dict[str, str]:
        from training.tensorflow.export import export_checked

        return export_checked(self.tf, self._plain_model(), out, self.cfg.image_size, card)


def main(cfg: TrainConfig) -> int:
    runner.run(cfg, NativeLoop if cfg.dist == "native" else TfLoop)
    return 0
