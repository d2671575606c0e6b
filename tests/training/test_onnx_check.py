"""The ONNX check's rule (training/onnx_check.py), shared by both exports: relative to the largest logit, and never
agreeing with a NaN or an infinity."""
import numpy as np

from training.onnx_check import disagreement


def test_logits_agree_within_a_thousandth_of_the_largest():
    expected = np.array([[1.9e12, 3.0e6, -2.0]])  # a barely trained model: huge and small logits side by side
    assert disagreement(expected + np.array([[1.6e6, 1.6e6, 0.0]]), expected) is None  # 1e-6 of the largest
    assert disagreement(expected + np.array([[0.0, 0.0, 3e9]]), expected) == 3e9  # 1.6e-3 of it


def test_ordinary_logits_need_a_thousandth_absolute_too():
    expected = np.array([[0.5, -0.25]])
    assert disagreement(expected + 1e-3, expected) is None
    assert disagreement(expected + 3e-3, expected) is not None


def test_a_nan_or_infinity_never_agrees():
    finite = np.array([[1.0, 1.0]])
    for bad in (np.array([[np.nan, 1.0]]), np.array([[np.inf, 1.0]])):
        assert disagreement(bad, finite) is not None
        assert disagreement(finite, bad) is not None
