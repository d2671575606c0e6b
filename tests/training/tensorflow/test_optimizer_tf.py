"""The optimizer that runs follows our LR variable and applies weight decay, on both TF paths.

In-process, one Horovod rank: Horovod's Keras wrapper rebuilds the optimizer from its config, which once
dropped both (Keras then trained at a constant base LR)."""
import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")
hvd = pytest.importorskip("horovod.tensorflow")

from training.config import parse_args  # noqa: E402
from training.tensorflow.keras_fit import horovod_optimizer  # noqa: E402
from training.tensorflow.model import build as build_model, loss_fn as _loss_fn  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def one_rank():
    hvd.init()


def build(framework, weight_decay):
    cfg = parse_args(["--framework", framework, "--data", "synthetic", "--image-size", "32", "--base-lr", "0.4",
                      "--weight-decay", str(weight_decay), "--output-dir", "unused"])
    # As each loop builds it under Horovod: Keras's fit all-reduces in Horovod's optimizer, the custom loop in its tape.
    distributed = (lambda optimizer: horovod_optimizer(tf, cfg, optimizer)) if framework == "keras" else None
    return build_model(tf, cfg, distributed)


@pytest.mark.parametrize("framework", ["tensorflow", "keras"])
def test_an_update_uses_the_assigned_lr_and_decays_every_parameter(framework):
    model, optimizer, learning_rate = build(framework, 0.5)
    learning_rate.assign(0.1)  # not the base LR (0.4) the optimizer was made with
    before = [w.numpy() for w in model.trainable_variables]
    optimizer.apply_gradients([(tf.zeros_like(w), w) for w in model.trainable_variables])
    # A zero gradient leaves only the decay: w - lr * wd * w, for kernels, biases and BatchNorm alike.
    for w, old in zip(model.trainable_variables, before):
        np.testing.assert_allclose(w.numpy(), old * (1 - 0.1 * 0.5), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("framework", ["tensorflow", "keras"])
def test_without_decay_a_zero_gradient_changes_nothing_and_the_loss_is_the_cross_entropy(framework):
    model, optimizer, _ = build(framework, 0)
    before = [w.numpy() for w in model.trainable_variables]
    optimizer.apply_gradients([(tf.zeros_like(w), w) for w in model.trainable_variables])
    assert all(np.array_equal(w.numpy(), old) for w, old in zip(model.trainable_variables, before))
    cfg = parse_args(["--framework", framework, "--label-smoothing", "0", "--output-dir", "unused"])
    logits = tf.constant([[2.0, 0.0, 0.0, 0.0]])
    expected = -np.log(np.exp(2) / (np.exp(2) + 3))
    assert float(_loss_fn(tf, cfg)(tf.constant([[1.0, 0, 0, 0]]), logits)) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("framework", ["tensorflow", "keras"])
def test_the_optimizers_variables_exist_from_the_build_so_a_step_is_traced_once(framework):
    # A tf.function that creates variables on its first call is traced twice, and a ResNet50 step's trace is
    # most of a short run: the slots, iterations and hyperparameters are made by build, not by the first step.
    model, optimizer, _ = build(framework, 0)
    made = len(optimizer.variables())

    @tf.function
    def step():
        optimizer.apply_gradients([(tf.zeros_like(w), w) for w in model.trainable_variables])

    step()
    assert step.experimental_get_tracing_count() == 1
    assert len(optimizer.variables()) == made >= len(model.trainable_variables)


def test_keras_fit_traces_its_training_step_once(tmp_path, monkeypatch):
    # Nothing Keras makes on its first step (compiled metrics, the optimizer's slots) may be a variable: the
    # step's trace would run twice.
    from training.tensorflow.keras_fit import KerasLoop

    for pool in ("set_intra_op_parallelism_threads", "set_inter_op_parallelism_threads"):
        monkeypatch.setattr(tf.config.threading, pool, lambda n: None)  # this process's TF has started its pools
    cfg = parse_args(["--framework", "keras", "--data", "synthetic", "--image-size", "32", "--batch-size", "2",
                      "--num-classes", "4", "--output-dir", str(tmp_path)])
    loop = KerasLoop(cfg)
    assert loop.fit(0, 2, lambda step: 0.01, lambda step, loss: None) == 2
    assert loop.model.train_function.experimental_get_tracing_count() == 1


def test_each_residual_block_starts_as_the_identity_as_in_the_pytorch_model():
    """The last BatchNorm of each of ResNet50's 16 residual blocks starts with gamma 0 (torchvision's
    zero_init_residual); every other BatchNorm with gamma 1."""
    model, _, _ = build("keras", 0)
    norms = [layer for layer in model.layers if isinstance(layer, tf.keras.layers.BatchNormalization)]
    last = [layer for layer in norms if layer.name.endswith("_3_bn") and "_block" in layer.name]
    assert len(last) == 16 and len(norms) == 53
    assert all(not np.any(layer.gamma.numpy()) for layer in last)
    assert all(np.all(layer.gamma.numpy() == 1) for layer in norms if layer not in last)
