"""Export the trained model to ONNX and check it against PyTorch with onnxruntime before naming it.

The file is written as model.onnx.tmp; only when onnxruntime loads it and its logits match PyTorch's does it
become model.onnx, so a model.onnx in an output folder is always a checked one. It takes images of any height and
width (ResNet50 pools globally before its last layer) and carries the run's model card (training/model_card.py:
classes, normalisation, size) as metadata.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import warnings
from pathlib import Path

import numpy as np
import torch

from training.model_card import ModelCard, stamp_onnx
from training.onnx_check import OnnxMismatch, disagreement





# The switches of fp32 convolutions and matrix products on a GPU, in the API the pinned torch (2.14) documents as
# current: `fp32_precision` per backend and operation, "ieee" (exact fp32) or "tf32"
# (https://docs.pytorch.org/docs/2.14/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices; in the installed
# torch: torch/backends/cudnn/__init__.py `conv = _FP32Precision("cuda", "conv")`, torch/backends/cuda/__init__.py
# `matmul.fp32_precision`, ATen/Context.h `Float32Precision`). Not the legacy `cudnn.allow_tf32` /
# `cuda.matmul.allow_tf32`, which PyTorch said would be deprecated after 2.9: once a process has set the new API
# (`torch.backends.fp32_precision = "tf32"`, or per operation), torch 2.14 refuses to read the legacy matmul flag
# ("you have used mix of the legacy and new APIs", a RuntimeError), so an export that used it failed.
# tests/training/pytorch/test_precision.py reads, from the installed torch, that these switches are what the
# convolution kernel is told.
PRECISION_SWITCHES = (("cudnn.conv", torch.backends.cudnn.conv), ("cuda.matmul", torch.backends.cuda.matmul))


@contextlib.contextmanager
def exact_fp32():
    """fp32 convolutions and matrix products computed as fp32. On A100/H100 PyTorch runs fp32 convolutions as TF32
    by default (a 10-bit mantissa; `torch.backends.cudnn.conv.fp32_precision` is "tf32" by default, see
    PRECISION_SWITCHES), which differs from onnxruntime's exact fp32 by far more than the check's tolerance; the
    reference logits are computed without it, so the check compares like with like. Each switch is set to "ieee"
    (which wins over a parent's "tf32", e.g. `torch.backends.fp32_precision`) and put back as it was."""
    before = [switch.fp32_precision for _, switch in PRECISION_SWITCHES]
    for _, switch in PRECISION_SWITCHES:
        switch.fp32_precision = "ieee"
    try:
        yield
    finally:
        for (_, switch), value in zip(PRECISION_SWITCHES, before):
            switch.fp32_precision = value


def export_checked(model: torch.nn.Module, out: Path, image_size: int, card: ModelCard | None = None) -> Path:
    """model.onnx from an fp32 copy of `model` (it trained under bf16/fp16 autocast with fp32 weights, or on a GPU:
    the copy is exported and checked where it is, in exact fp32), checked against onnxruntime on CPU; `card`
    stamped into its metadata (NCHW input, evaluation's centre crop)."""
    device = next(model.parameters()).device
    model = copy.deepcopy(model).eval().float()  # the training model is left as it was
    sample = torch.randn(2, 3, image_size, image_size, generator=torch.Generator().manual_seed(0)).to(device)
    tmp, final = out / "model.onnx.tmp", out / "model.onnx"
    try:
        _write_and_check(model, sample, tmp, card)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a model.onnx.tmp left behind would be mistaken for a model
        raise
    os.replace(tmp, final)
    return final


def _write_and_check(model: torch.nn.Module, sample: torch.Tensor, tmp: Path, card: ModelCard | None) -> None:
    import onnxruntime

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        # The TorchScript exporter (dynamo=False) handles ResNet50 without the extra onnxscript dependency.
        torch.onnx.export(model, (sample,), str(tmp), input_names=["images"], output_names=["logits"],
                          dynamic_axes={"images": {0: "batch", 2: "height", 3: "width"}, "logits": {0: "batch"}},
                          opset_version=17, dynamo=False)
    if card is not None:
        stamp_onnx(tmp, dataclasses.replace(card, input_layout="NCHW", resize="center-crop"))
    with torch.no_grad(), exact_fp32():
        expected = model(sample).float().cpu().numpy()
    session = onnxruntime.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
    got = session.run(["logits"], {"images": sample.cpu().numpy()})[0]
    if not np.isfinite(expected).all():
        raise OnnxMismatch("the trained model gives non-finite logits (training diverged); lower --base-lr")
    diff = disagreement(got, expected)
    if diff is not None:
        raise OnnxMismatch(f"ONNX logits differ from PyTorch by up to {diff:.2e}")
