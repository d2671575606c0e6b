"""The rule every export's ONNX check applies (PyTorch's and TensorFlow's): onnxruntime's logits against the
framework's own, both in exact fp32 (training/pytorch/export.py, training/tensorflow/export.py).

The tolerance is relative to the largest logit of the sample, not to each logit: a model early in training (batch
statistics not settled yet) gives logits of 1e9 to 1e12 on the check's sample, where fp32 rounding through ResNet50's
fifty layers alone moves the small logits by more than 1e-3 of themselves (a 2-step TensorFlow run: 1.6e6 on logits
of 1.9e12, 1.4e-3 of the largest); what a prediction reads is the logits relative to the largest, so that is what
must agree."""
from __future__ import annotations

import numpy as np

ATOL, RTOL = 1e-3, 1e-3


class OnnxMismatch(RuntimeError):
    """onnxruntime's logits disagree with the framework's, or the model gives non-finite ones: no model.onnx."""


def disagreement(got: np.ndarray, expected: np.ndarray) -> float | None:
    """The largest difference when it exceeds ATOL + RTOL x the largest |expected| logit, else None (they agree).
    A NaN or an infinity on either side never agrees."""
    if not (np.isfinite(got).all() and np.isfinite(expected).all()):
        return float("inf")
    diff = float(np.abs(got - expected).max())
    return None if diff <= ATOL + RTOL * float(np.abs(expected).max()) else diff
