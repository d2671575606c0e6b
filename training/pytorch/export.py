"""Export the trained model to ONNX and check it against PyTorch with onnxruntime before naming it.

The file is written as model.onnx.tmp; only when onnxruntime loads it and its logits match PyTorch's does it
become model.onnx, so a model.onnx in an output folder is always a checked one.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import torch

TOLERANCE = 1e-3  # absolute and relative, on logits


class OnnxMismatch(RuntimeError):
    pass


def export_checked(model: torch.nn.Module, out: Path, image_size: int, device) -> Path:
    import onnxruntime

    model = model.eval().float()
    sample = torch.randn(2, 3, image_size, image_size, generator=torch.Generator().manual_seed(0)).to(device)
    tmp, final = out / "model.onnx.tmp", out / "model.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        # The TorchScript exporter (dynamo=False) handles ResNet50 without the extra onnxscript dependency.
        torch.onnx.export(model, (sample,), str(tmp), input_names=["images"], output_names=["logits"],
                          dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17,
                          dynamo=False)
    with torch.no_grad():
        expected = model(sample).float().cpu().numpy()
    session = onnxruntime.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
    got = session.run(["logits"], {"images": sample.cpu().numpy()})[0]
    if not np.isfinite(expected).all():
        tmp.unlink(missing_ok=True)
        raise OnnxMismatch("the trained model gives non-finite logits (training diverged); lower --base-lr")
    if not np.allclose(got, expected, atol=TOLERANCE, rtol=TOLERANCE):
        tmp.unlink(missing_ok=True)
        raise OnnxMismatch(f"ONNX logits differ from PyTorch by up to {np.abs(got - expected).max():.2e}")
    os.replace(tmp, final)
    return final
