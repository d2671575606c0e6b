"""TensorFlow/Keras model export: a SavedModel, then ONNX through tf2onnx checked with onnxruntime against TF
before it takes its final name (as the PyTorch export is). Both take images of any height and width (ResNet50
pools globally before its last layer), and model.onnx carries the run's model card (training/model_card.py) as
metadata."""
from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path

from training.model_card import ModelCard, stamp_onnx
from training.onnx_check import disagreement


def as_float32(tf, model):
    """`model` computing in float32: itself when it does, else a copy of its layers with the float32 policy and its
    weights. A model trained under mixed precision (bf16 on a GPU, fp16) keeps float32 weights but computes in
    bf16/fp16 (https://www.tensorflow.org/guide/mixed_precision), and tf2onnx refuses the bf16 constants of such a
    graph ("Numpy data type not understood yet: dtype(bfloat16)"); the exported model is the float32 one, which
    runs on any device and which onnxruntime checks exactly."""
    if all(layer.compute_dtype in (None, "float32") for layer in model.layers):
        return model

    def float32_layer(layer):
        return layer.__class__.from_config({**layer.get_config(), "dtype": "float32"})

    copy = tf.keras.models.clone_model(model, clone_function=float32_layer)
    copy.set_weights(model.get_weights())
    return copy


def export_checked(tf, model, out: Path, image_size: int, card: ModelCard | None = None) -> dict:
    """SavedModel (tmp dir + rename), then ONNX through tf2onnx, checked with onnxruntime against TF: both of the
    model in float32 (as_float32); `card` stamped into the ONNX file's metadata (NHWC input, evaluation's stretch
    to the square)."""
    model = as_float32(tf, model)
    exported = {}
    final, tmp = out / "saved_model", out / "saved_model.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    signature = tf.TensorSpec((None, None, None, 3), tf.float32, name="images")  # any batch, height and width
    serve = tf.function(lambda images: tf.cast(model(images, training=False), tf.float32), input_signature=[signature])
    tf.saved_model.save(model, str(tmp), signatures={"serving_default": serve})
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    exported["saved_model"] = str(final)
    try:  # the ONNX tools are optional in an environment: without them the SavedModel is the model
        import onnxruntime  # noqa: F401 - used by _write_and_check
        import tf2onnx  # noqa: F401
    except ImportError as err:
        print(f"warning: no ONNX export ({err}); the SavedModel is the model", file=sys.stderr)
        return exported
    onnx_tmp, onnx_final = out / "model.onnx.tmp", out / "model.onnx"
    try:
        refused = _write_and_check(tf, serve, signature, onnx_tmp, image_size, card)
    except BaseException:
        onnx_tmp.unlink(missing_ok=True)  # a model.onnx.tmp left behind would be mistaken for a model
        raise
    if refused:  # the SavedModel stands; the summary says why there is no model.onnx (the runner prints it)
        onnx_tmp.unlink(missing_ok=True)
        return {**exported, "export_error": refused}
    os.replace(onnx_tmp, onnx_final)
    exported["onnx"] = str(onnx_final)
    return exported


def _write_and_check(tf, serve, signature, onnx_tmp: Path, image_size: int, card: ModelCard | None) -> str | None:
    """Write ONNX to `onnx_tmp` and check it against TensorFlow; why it is refused, or None."""
    import numpy as np
    import onnxruntime
    import tf2onnx

    tf2onnx.convert.from_function(serve, input_signature=[signature], opset=17, output_path=str(onnx_tmp))
    if card is not None:
        stamp_onnx(onnx_tmp, dataclasses.replace(card, input_layout="NHWC", resize="stretch"))
    sample = np.random.default_rng(0).standard_normal((2, image_size, image_size, 3)).astype(np.float32)
    session = onnxruntime.InferenceSession(str(onnx_tmp), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: sample})[0]
    # The reference in exact fp32: TensorFlow runs fp32 convolutions and matrix products as TF32 on A100/H100 by
    # default (https://www.tensorflow.org/api_docs/python/tf/config/experimental/enable_tensor_float_32_execution),
    # which differs from onnxruntime's fp32 by far more than the tolerance.
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        expected = serve(tf.constant(sample)).numpy()
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
    if not np.isfinite(expected).all():  # as PyTorch's export says it
        return "OnnxMismatch: the trained model gives non-finite logits (training diverged); lower --base-lr"
    diff = disagreement(got, expected)  # the rule PyTorch's export applies too
    return None if diff is None else f"OnnxMismatch: ONNX logits differ from TensorFlow by up to {diff:.2e}"
