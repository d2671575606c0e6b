"""The export's exact-fp32 switch (training/pytorch/export.py: exact_fp32) against the torch installed here, the one
the image pins (training/requirements-torch.txt): what its convolution kernel is told, read from torch itself.

The convolution op carries the TF32 permission as its last argument (`aten::_convolution(..., bool cudnn_enabled,
bool allow_tf32)`): at::convolution fills it from the context's precision setting, and the cuDNN kernel obeys it.
Tracing a convolution on CPU records that argument as torch computed it, so the test needs no GPU and reads no flag
of ours. It fails if the switch the export sets no longer changes what the kernel is allowed to do, and if the
export breaks once a process has chosen TF32 through the pinned torch's current API (the legacy flags did: torch
2.14 refuses to read them after that, "mix of the legacy and new APIs")."""
import warnings

import pytest
import torch

from training.pytorch.export import PRECISION_SWITCHES, exact_fp32, export_checked


def conv_kernel_allows_tf32() -> bool:
    """The allow_tf32 argument this torch hands the convolution kernel right now."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace's deprecation notice
        graph = torch.jit.trace(torch.nn.Conv2d(3, 4, 3), torch.randn(1, 3, 8, 8)).graph
    calls = [node for node in graph.nodes() if node.kind() == "aten::_convolution"]
    assert len(calls) == 1, graph  # the op whose signature ends with allow_tf32
    return bool(list(calls[0].inputs())[-1].toIValue())


@pytest.fixture
def tf32_everywhere():
    """The process as a speed-minded run leaves it: TF32 for every fp32 op, through the pinned torch's current API
    (https://docs.pytorch.org/docs/2.14/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices)."""
    before = torch.backends.fp32_precision, [switch.fp32_precision for _, switch in PRECISION_SWITCHES]
    torch.backends.fp32_precision = "tf32"
    yield
    torch.backends.fp32_precision = before[0]
    for (_, switch), value in zip(PRECISION_SWITCHES, before[1]):
        switch.fp32_precision = value


def test_the_switches_are_the_pinned_torchs_current_api():
    assert [name for name, _ in PRECISION_SWITCHES] == ["cudnn.conv", "cuda.matmul"]
    for _, switch in PRECISION_SWITCHES:
        assert switch.fp32_precision in ("ieee", "tf32", "none")


def test_exact_fp32_forbids_tf32_in_the_convolution_kernel(tf32_everywhere):
    # The premise, read from torch: the setting reaches the kernel (if this stops holding, the switch below governs
    # nothing and the export's check compares TF32 with fp32 on a GPU again).
    assert conv_kernel_allows_tf32()
    with exact_fp32():
        assert not conv_kernel_allows_tf32()
        assert torch.backends.cuda.matmul.fp32_precision == "ieee"  # cuBLAS reads this one at the call
    assert conv_kernel_allows_tf32()  # put back as it was
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"


def test_exact_fp32_by_default_too():
    assert conv_kernel_allows_tf32()  # PyTorch's default for convolutions: TF32
    before = [switch.fp32_precision for _, switch in PRECISION_SWITCHES]
    with exact_fp32():
        assert not conv_kernel_allows_tf32()
    assert conv_kernel_allows_tf32() and [switch.fp32_precision for _, switch in PRECISION_SWITCHES] == before


def test_an_export_after_tf32_was_chosen_with_the_current_api(tf32_everywhere, tmp_path):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(8, 4))
    assert export_checked(model, tmp_path, image_size=16).exists()
