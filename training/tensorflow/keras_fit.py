"""ResNet50 with Keras's Model.fit (`--framework keras`): under Horovod, Horovod's DistributedOptimizer and
callbacks (initial broadcast, metric averaging); under MultiWorkerMirroredStrategy (--dist native), the strategy's
own. The LR follows the runner's plan per step, as in PyTorch. Same flags and outputs as the other loops.

Only the fit is here: setup, the model, data, checkpoints, evaluation and export are training/tensorflow/runtime.py's,
shared with TensorFlow's custom loop (training/tensorflow/loop.py).
Launch: horovodrun -np 2 -H localhost:2 python -m training train --framework keras --data synthetic ...
"""
from __future__ import annotations

import math

from training import runner
from training.config import TrainConfig
from training.tensorflow.runtime import HorovodRuntime, NativeRuntime


def horovod_optimizer(tf, cfg: TrainConfig, optimizer):
    """Horovod: `optimizer` all-reducing the gradients fit computes (compressed to fp16 with --fp16-allreduce)."""
    import horovod.tensorflow.keras as hvd_keras

    compression = hvd_keras.Compression.fp16 if cfg.fp16_allreduce else hvd_keras.Compression.none
    return _traced_without_autograph(tf, hvd_keras.DistributedOptimizer(optimizer, compression=compression))


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


def fit(loop, data, step: int, stop_at: int, lr_for, after_step, callbacks: list) -> int:
    """Model.fit on `data` from `step` to `stop_at`, with `callbacks` (the distribution's) and the runner's per-step
    LR, after-step hook and stop; returns the last step done."""
    tf = loop.tf
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
    loop.model.compile(optimizer=loop.optimizer, loss=loop.loss_fn)
    # Keras counts epochs; we count steps. The stream starts at `step` exactly, the epochs are bookkeeping.
    per_epoch = min(stop_at - step, 10_000)
    loop.model.fit(data, steps_per_epoch=per_epoch, epochs=math.ceil((stop_at - step) / per_epoch),
                   callbacks=[*callbacks, Steps()], verbose=0)
    return position["step"]


class KerasLoop(HorovodRuntime):
    # Model.fit draws its batches inside its own step: not timed (the runner's efficiency view says so).
    step_times = None

    def distributed_optimizer(self, optimizer):
        return horovod_optimizer(self.tf, self.cfg, optimizer)

    def fit(self, start, stop_at, lr_for, after_step) -> int:
        import horovod.tensorflow.keras as hvd_keras

        stream = self.data.stream(start)
        # Horovod: every rank starts from rank 0's variables, and epoch-end logs are averaged over ranks.
        callbacks = [hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0),
                     hvd_keras.callbacks.MetricAverageCallback()]
        return fit(self, stream, start, stop_at, lr_for, after_step, callbacks)


class NativeKerasLoop(NativeRuntime):
    step_times = None  # as KerasLoop's

    def fit(self, start, stop_at, lr_for, after_step) -> int:
        data = self.tf.keras.utils.experimental.DatasetCreator(self.replica_batches(start))
        # No callbacks of its own: the strategy mirrors the variables and reduces the gradients itself.
        return fit(self, data, start, stop_at, lr_for, after_step, [])


def make_loop(cfg: TrainConfig) -> runner.Loop:
    return NativeKerasLoop(cfg) if cfg.dist == "native" else KerasLoop(cfg)


def main(cfg: TrainConfig) -> int:
    runner.run(cfg, make_loop)
    return 0
