"""The TensorFlow/Keras export (training/tensorflow/export.py): SavedModel, then ONNX through tf2onnx, kept only
when onnxruntime agrees with TensorFlow. In-process, on a small Keras model: the check, not ResNet50, is tested
here (the 2-rank runs of test_train_tf.py export ResNet50 itself)."""
import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")
onnxruntime = pytest.importorskip("onnxruntime")

from training.tensorflow.export import export_checked  # noqa: E402


def small_model(scale: float):
    """Conv, batch norm (inference statistics), pooling, logits; `scale` multiplies the logits' weights."""
    tf.keras.utils.set_random_seed(0)
    inputs = tf.keras.Input((8, 8, 3))
    x = tf.keras.layers.Conv2D(8, 3)(inputs)
    x = tf.keras.layers.BatchNormalization()(x)
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    logits = tf.keras.layers.Dense(4, kernel_initializer=tf.keras.initializers.RandomNormal(stddev=scale))(x)
    return tf.keras.Model(inputs, logits)


def test_logits_of_any_scale_are_exported_when_onnxruntime_agrees(tmp_path):
    """A model early in training gives logits of 1e9 (a 2-step Keras run gave 6e9 on the check's sample, and was
    refused for a difference of 2944, 5e-7 of them): the check is relative as well as absolute."""
    model = small_model(scale=1e9)
    sample = np.random.default_rng(0).standard_normal((2, 8, 8, 3)).astype(np.float32)
    assert np.abs(model(sample, training=False).numpy()).max() > 1e8
    exported = export_checked(tf, model, tmp_path, image_size=8)
    assert exported == {"saved_model": str(tmp_path / "saved_model"), "onnx": str(tmp_path / "model.onnx")}
    session = onnxruntime.InferenceSession(exported["onnx"], providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: sample})[0]
    np.testing.assert_allclose(got, model(sample, training=False).numpy(), rtol=1e-3)
    assert not (tmp_path / "model.onnx.tmp").exists()


def test_logits_of_an_ordinary_scale_are_exported_too(tmp_path):
    exported = export_checked(tf, small_model(scale=0.05), tmp_path, image_size=8)
    assert (tmp_path / "model.onnx").is_file() and "onnx" in exported
