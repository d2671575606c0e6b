"""What every TensorFlow loop shares, all but its training step: TensorFlow imported and set up under Horovod or
MultiWorkerMirroredStrategy (threads, the GPU bound, the precision policy), the model built (training.tensorflow.model),
the data (training.tensorflow.data), the collectives the runner asks for, checkpoints of pickled weights, evaluation,
TensorBoard and the export (training.tensorflow.export).

A loop module subclasses HorovodRuntime (--dist horovod) and NativeRuntime (--dist native) with its `fit`: the custom
step (training/tensorflow/loop.py) or Keras's Model.fit (training/tensorflow/keras_fit.py), each named by its row of
the frameworks table (training/frameworks.py).
"""
from __future__ import annotations

import os
import pickle
from dataclasses import replace
from pathlib import Path

from training import efficiency, interconnect
from training.cluster.launch import set_horovod_cycle, workers_on_this_host
from training.config import TrainConfig, as_dict, resolve_for_device
from training.metrics import usable_cores
from training.tensorflow.data import Data
from training.tensorflow.device import bind_gpu, has_bf16
from training.tensorflow.model import build, loss_fn

POLICIES = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def import_tensorflow():
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


def setup_native(cfg: TrainConfig):
    """Import TF and create tf.distribute.MultiWorkerMirroredStrategy first, before any other TF op (TensorFlow
    requires it: https://www.tensorflow.org/api_docs/python/tf/distribute/MultiWorkerMirroredStrategy), from
    TF_CONFIG (none: one worker); this process drives every GPU of its node. Horovod is not imported.
    Returns (tf, strategy, cfg)."""
    tf = import_tensorflow()

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


def setup_horovod(cfg: TrainConfig):
    """Import TF and Horovod, with threads shared fairly between the ranks of one host (as in PyTorch) and the
    hardware-dependent defaults decided; returns (tf, hvd, cfg)."""
    tf = import_tensorflow()
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


class TfWriter:
    def __init__(self, tf, directory: Path):
        self.tf, self._writer = tf, tf.summary.create_file_writer(str(directory))

    def scalar(self, tag: str, value: float, step: int) -> None:
        with self._writer.as_default(step=step):
            self.tf.summary.scalar(tag, value)

    def close(self) -> None:
        self._writer.close()


class HorovodRuntime:
    """A runner.Loop under Horovod, one process per rank, all but `fit` (the loop module's)."""
    distribution = "horovod"
    checkpoint_suffix = ".tfckpt"
    # This rank's step timings (training/efficiency.py): a loop that times its steps sets its own.
    step_times: efficiency.StepTimes | None = None

    def __init__(self, cfg: TrainConfig):
        tf, hvd, cfg = setup_horovod(cfg)
        self.tf, self.hvd, self.cfg = tf, hvd, cfg
        self.rank, self.size = hvd.rank(), hvd.size()
        self.device = "gpu" if tf.config.list_physical_devices("GPU") else "cpu"
        self.data = Data(tf, cfg, self.rank, self.size, broadcast=self.broadcast_object)
        self.steps_per_epoch = self.data.steps_per_epoch
        self.model, self.optimizer, self.learning_rate = build(tf, cfg, self.distributed_optimizer)
        self.loss_fn = loss_fn(tf, cfg)
        self.resumed = False

    def distributed_optimizer(self, optimizer):
        """Horovod: the optimizer as this loop runs it. Unchanged here: a loop whose step all-reduces the gradients
        itself (the custom loop's DistributedGradientTape) needs no wrapper."""
        return optimizer

    def fit(self, start, stop_at, lr_for, after_step) -> int:
        raise NotImplementedError  # the loop module's: its training step

    def load_checkpoint(self, path: Path) -> dict:
        with open(path, "rb") as f:
            state = pickle.load(f)  # our own files, written by rank 0 of our own runs
        if not isinstance(state, dict) or not {"step", "model", "optimizer"} <= set(state):
            raise ValueError("not a training checkpoint")
        return state

    def restore(self, state: dict) -> None:
        self.model.set_weights(state["model"])
        self.optimizer.set_weights(state["optimizer"])  # its slots exist from build
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

    def evaluate(self) -> tuple[float, float] | None:
        """(Mean cross-entropy without label smoothing, top-1) over every rank's share of val/."""
        validation = self.data.validation()
        if validation is None:
            return None
        tf, hvd = self.tf, self.hvd
        counts = validation_counts(tf, self.model, validation)
        loss_sum, correct, total = (float(hvd.allreduce(tf.constant(value), op=hvd.Sum)) for value in counts)
        return (loss_sum / total, correct / total) if total else None

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


def validation_counts(tf, model, validation) -> tuple[float, float, float]:
    """(Summed cross-entropy, correct, images) of `model` on this worker's share of val/ (one-hot labels)."""
    loss_sum = correct = total = 0.0
    for images, labels in validation:
        logits = tf.cast(model(images, training=False), tf.float32)
        loss_sum += float(tf.reduce_sum(tf.keras.losses.categorical_crossentropy(labels, logits, from_logits=True)))
        correct += int(tf.reduce_sum(tf.cast(tf.argmax(logits, 1) == tf.argmax(labels, 1), tf.int32)))
        total += int(labels.shape[0])
    return loss_sum, correct, total


class NativeRuntime(HorovodRuntime):
    """--dist native: the same model, data, LR plan and checkpoints under MultiWorkerMirroredStrategy, one
    worker process per node (rank: its TF_CONFIG task index; size: replicas, i.e. GPUs, in all). Each worker
    reads its node's shard, batch_size per replica. Files are rank 0's: what it saves and exports is its own
    copy of the variables (as under Horovod, batch-norm statistics are each replica's own), read without a
    collective, so rank 0 alone may checkpoint whenever the runner says."""
    distribution = "native"

    def __init__(self, cfg: TrainConfig):
        tf, strategy, cfg = setup_native(cfg)
        self.tf, self.strategy, self.cfg = tf, strategy, cfg
        resolver = strategy.cluster_resolver
        self.rank = (resolver.task_id or 0) if resolver and resolver.task_type else 0
        self.size = strategy.num_replicas_in_sync
        self.local = len(strategy.extended.worker_devices)  # replicas this worker drives
        self.device = "gpu" if tf.config.list_physical_devices("GPU") else "cpu"
        # The node's shard in batches of batch_size x local replicas, split into one batch per replica below.
        self.data = Data(tf, replace(cfg, batch_size=cfg.batch_size * self.local), self.rank, self.size // self.local)
        self.steps_per_epoch = self.data.steps_per_epoch
        with strategy.scope():  # the strategy mirrors the variables and reduces the gradients: no wrapper
            self.model, self.optimizer, self.learning_rate = build(tf, cfg)
        self.loss_fn = loss_fn(tf, cfg)
        self.resumed = False
        self._plain = None

    def replica_batches(self, start: int):
        """The dataset function a strategy distributes (a tf.distribute.InputContext -> this worker's stream from
        step `start`): with several replicas here, the node's batches split into one batch per replica."""
        data, per_replica = self.data, self.cfg.batch_size

        def dataset(context):
            stream = data.stream(start)
            return stream.unbatch().batch(per_replica, drop_remainder=True) if self.local > 1 else stream
        return dataset

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

    def _plain_model(self):
        """The model outside the strategy, with this worker's weights: evaluating or saving the distributed one
        would read synced-on-read variables through a collective, which rank 0 alone (export) cannot do."""
        if self._plain is None:
            self._plain = self.tf.keras.models.clone_model(self.model)
            self._plain.set_weights(self._local(self.model.weights))
        return self._plain

    def evaluate(self) -> tuple[float, float] | None:
        validation = self.data.validation()
        if validation is None:
            return None
        self._plain = None  # evaluated every epoch: a copy of the weights as they are now, not the last epoch's
        counts = validation_counts(self.tf, self._plain_model(), validation)
        loss_sum, correct, total = (self._summed(value) for value in counts)
        return (loss_sum / total, correct / total) if total else None

    def export(self, out: Path, card) -> dict[str, str]:
        from training.tensorflow.export import export_checked

        return export_checked(self.tf, self._plain_model(), out, self.cfg.image_size, card)
