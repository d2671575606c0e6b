"""The model, optimizer and loss every TensorFlow loop trains (training.tensorflow.loop's custom step and
training.tensorflow.keras_fit's Model.fit): tf.keras.applications.ResNet50(weights=None, each residual block
starting as the identity), SGD with momentum, L2
weight decay as PyTorch's SGD applies it, label smoothing. Built after the precision policy is set
(training/tensorflow/runtime.py), so bf16/fp16 apply to the layers."""
from __future__ import annotations

import re
from collections.abc import Callable

from training.config import TrainConfig

BN_MOMENTUM = 0.9
# Each residual block's last BatchNorm (keras.applications' ResNet50 names it convS_blockN_3_bn) starts with gamma 0,
# so every block starts as the identity: the PyTorch model's zero_init_residual (training/pytorch/loop.py, Goyal et
# al., https://arxiv.org/abs/1706.02677 section 5.1), which took a 90-image 3-class folder from chance (val loss
# 26 -> 652) to 0.58 top-1 there. Both frameworks now start from the same kind of model.
RESIDUAL_LAST_BN = re.compile(r"conv\d_block\d+_3_bn")


def build(tf, cfg: TrainConfig, distributed: Callable | None = None):
    """(model, optimizer, learning-rate variable). `distributed` wraps the optimizer before its LR variable, decay
    and loss scaling are attached: the loop that all-reduces inside its optimizer (Keras under Horovod) passes
    Horovod's wrapper here; a loop that all-reduces elsewhere (a gradient tape, a strategy) passes none."""
    tf.keras.utils.set_random_seed(cfg.seed)  # the same initial weights on every rank and every run
    model = tf.keras.applications.ResNet50(weights=None, classes=cfg.num_classes, classifier_activation=None,
                                           input_shape=(cfg.image_size, cfg.image_size, 3))
    # BatchNorm's running statistics follow the batches at PyTorch's rate (its momentum 0.1 is 0.9 here), as in
    # TensorFlow's own ResNet recipe: Keras's default 0.99 leaves them near their initial values for the first
    # few hundred steps, so evaluation and the exported model would see the wrong statistics.
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            layer.momentum = BN_MOMENTUM
            if RESIDUAL_LAST_BN.fullmatch(layer.name):
                layer.gamma.assign(tf.zeros_like(layer.gamma))
    # Legacy SGD: the optimizer Horovod 0.28 wraps reliably under TF 2.15 (Keras 2). The LR is a variable we
    # assign before each step (the runner's plan); a float set later would not reach the traced step.
    learning_rate = tf.Variable(cfg.base_lr, trainable=False, dtype=tf.float32, name="learning_rate")
    optimizer = tf.keras.optimizers.legacy.SGD(learning_rate=cfg.base_lr, momentum=cfg.momentum)
    if distributed is not None:
        optimizer = distributed(optimizer)
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


def _weight_decay(tf, weight_decay: float):
    """L2 decay as PyTorch's SGD(weight_decay=...) applies it: gradient + decay x weight for every parameter,
    after the allreduce. Kept out of the loss, so the logged loss is the cross-entropy on every path (a decay
    term in the loss grows with the weight norms and hides whether the model learns)."""
    def add_decay(grads_and_vars):
        return [(grad + tf.cast(weight_decay, grad.dtype) * tf.cast(var, grad.dtype), var)
                for grad, var in grads_and_vars]
    return add_decay


def loss_fn(tf, cfg: TrainConfig):
    # Native: one loss per example; Keras fit and the custom loop divide by the global batch themselves (a
    # strategy refuses a Keras loss that averages over the replica's batch outside fit).
    reduction = tf.keras.losses.Reduction.NONE if cfg.dist == "native" else tf.keras.losses.Reduction.AUTO
    xent = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=cfg.label_smoothing,
                                                   reduction=reduction)

    def loss(labels, logits):
        return xent(labels, tf.cast(logits, tf.float32))
    return loss
