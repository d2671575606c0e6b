"""The runner's plan, pure: what --epochs, --steps, --warmup-steps and --stop-at-step mean in every framework."""
import pytest

from training import runner
from training.config import dali_installed, parse_args, resolve_for_device
from training.errors import UsageError


def cfg(*flags):
    return parse_args(["--output-dir", "unused", *flags])


def test_a_synthetic_epoch_is_imagenet_in_whole_global_batches_as_a_folder_epoch_is():
    # 1,281,167 / 256 = 5004.56: the partial batch is dropped, as drop_last does for a folder.
    assert runner.synthetic_steps_per_epoch(256) == 5004
    assert runner.plan(cfg("--epochs", "2", "--batch-size", "32"), 8, runner.synthetic_steps_per_epoch(256)).total_steps \
        == 2 * 5004


def test_fractional_epochs_round_up_to_whole_steps_and_steps_win_over_epochs():
    assert runner.plan(cfg("--epochs", "0.5"), 1, 15).total_steps == 8
    assert runner.plan(cfg("--epochs", "3", "--steps", "7"), 1, 15).total_steps == 7


def test_warmup_defaults_to_five_percent_and_the_lr_follows_the_schedule():
    plan = runner.plan(cfg("--steps", "100", "--batch-size", "64", "--base-lr", "0.1"), 4, 1000)
    assert plan.global_batch == 256 and plan.peak_lr == pytest.approx(0.1) and plan.warmup_steps == 5
    assert plan.lr(0) == pytest.approx(0.1) and plan.lr(5) == pytest.approx(0.1) and plan.lr(99) < 0.001


def test_stop_at_step_ends_early_on_the_full_runs_schedule():
    plan = runner.plan(cfg("--steps", "100", "--stop-at-step", "40"), 1, 1000)
    full = runner.plan(cfg("--steps", "100"), 1, 1000)
    assert plan.stop_at == 40 and plan.total_steps == 100
    assert [plan.lr(s) for s in range(40)] == [full.lr(s) for s in range(40)]


@pytest.mark.parametrize("framework,gpu,precision,channels_last", [
    ("pytorch", True, "bf16", True), ("pytorch", False, "fp32", False),
    ("tensorflow", True, "bf16", False), ("keras", False, "fp32", False)])
def test_the_defaults_fit_the_hardware(framework, gpu, precision, channels_last):
    resolved = resolve_for_device(cfg("--framework", framework), gpu)
    assert (resolved.precision, resolved.channels_last) == (precision, channels_last)


def test_without_dali_a_gpu_decodes_jpegs_with_nvjpeg():
    # This venv has no `nvidia` package at all: the probe must answer False, not raise.
    assert not dali_installed()
    assert resolve_for_device(cfg(), gpu=True).loader == "nvjpeg"
    assert resolve_for_device(cfg(), gpu=False).loader == "pil"
    assert resolve_for_device(cfg("--framework", "keras"), gpu=True).loader == "pil"  # unused: tf.data reads


def test_nvjpeg_is_refused_for_tensorflow_in_one_line():
    with pytest.raises(UsageError, match="^--loader nvjpeg applies to pytorch only"):
        cfg("--framework", "tensorflow", "--loader", "nvjpeg")


def test_explicit_speed_flags_win_over_the_hardware_defaults():
    resolved = resolve_for_device(cfg("--precision", "fp32", "--no-channels-last"), gpu=True)
    assert (resolved.precision, resolved.channels_last) == ("fp32", False)
    assert resolve_for_device(cfg("--precision", "bf16", "--channels-last"), gpu=False).channels_last is True


def test_help_says_what_the_defaults_are_on_each_device(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "auto: bf16 on a GPU, fp32 on CPU" in text and "on for pytorch on a GPU, off on CPU" in text
