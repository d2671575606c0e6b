"""ResNet50 with TensorFlow's custom loop (`--framework tensorflow`): a training step in a tf.function, under
Horovod with hvd.DistributedGradientTape or under MultiWorkerMirroredStrategy (--dist native); --xla compiles the
forward and backward pass (the all-reduce stays outside XLA). Same flags and outputs as the PyTorch path.

Only the step is here: setup, the model, data, checkpoints, evaluation and export are training/tensorflow/runtime.py's,
shared with Keras's Model.fit (training/tensorflow/keras_fit.py).
Launch: horovodrun -np 2 -H localhost:2 python -m training train --framework tensorflow --data synthetic ...
"""
from __future__ import annotations

import time

from training import efficiency, runner
from training.config import TrainConfig
from training.tensorflow.runtime import HorovodRuntime, NativeRuntime


class TfLoop(HorovodRuntime):
    def __init__(self, cfg: TrainConfig):
        super().__init__(cfg)
        # Data wait (next() on the tf.data stream) and the traced step, whose gradient all-reduce runs inside it,
        # so exchange is not measured apart from compute.
        self.step_times = efficiency.StepTimes(exchange=None)

    def fit(self, start, stop_at, lr_for, after_step) -> int:
        stream = self.data.stream(start)
        tf, hvd, cfg, model, optimizer = self.tf, self.hvd, self.cfg, self.model, self.optimizer
        forward = tf.function(lambda images: model(images, training=True), jit_compile=cfg.xla)
        scaled = cfg.precision == "fp16"
        compression = hvd.Compression.fp16 if cfg.fp16_allreduce else hvd.Compression.none
        loss_fn = self.loss_fn

        # No AutoGraph: the step branches on Python values only, and AutoGraph would run its converted copy of
        # Horovod's gradient all-reduce for each gradient (ResNet50 has 214), for the same graph: a 6-step run on CPU
        # 27.6 -> 20.2 s of CPU, most of it each rank's first step (see keras_fit._traced_without_autograph for
        # Keras's path).
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

        step, broadcast = start, not self.resumed
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


class NativeLoop(NativeRuntime):
    def __init__(self, cfg: TrainConfig):
        super().__init__(cfg)
        self.step_times = efficiency.StepTimes(exchange=None)  # the strategy's all-reduce is inside the step

    def fit(self, start, stop_at, lr_for, after_step) -> int:
        stream = self.strategy.distribute_datasets_from_function(self.replica_batches(start))
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

        step = start
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


def make_loop(cfg: TrainConfig) -> runner.Loop:
    return NativeLoop(cfg) if cfg.dist == "native" else TfLoop(cfg)


def main(cfg: TrainConfig) -> int:
    runner.run(cfg, make_loop)
    return 0
