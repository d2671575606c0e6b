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


def test_onnx_carries_the_model_card_takes_other_sizes_and_predict_reads_it(tmp_path, dataset):
    """TensorFlow's model.onnx: the card as metadata (NHWC, evaluation's stretch), height and width dynamic (the
    small model pools globally, as ResNet50 does), and `predict` in this environment names a class."""
    from training.model_card import ModelCard
    from training.predict import predict

    card = ModelCard(num_classes=4, image_size=8, classes=("cat", "dog", "ship", "whale"), framework="keras",
                     run_id="r1")
    export_checked(tf, small_model(scale=0.05), tmp_path, image_size=8, card=card)
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    assert (meta["classes"], meta["input_layout"], meta["resize"], meta["framework"], meta["image_size"]) == (
        '["cat", "dog", "ship", "whale"]', "NHWC", "stretch", "keras", "8")
    name = session.get_inputs()[0].name
    assert session.run(None, {name: np.zeros((1, 20, 12, 3), np.float32)})[0].shape == (1, 4)
    photo = sorted((dataset / "train").rglob("*.JPEG"))[0]
    (prediction,) = predict(tmp_path / "model.onnx", [photo], k=2)
    assert len(prediction.top) == 2 and prediction.top[0][0] in card.classes
    assert prediction.line().startswith(f"{photo}: ") and sum(p for _, p in prediction.top) <= 1.0 + 1e-6
