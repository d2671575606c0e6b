"""The runner's plan, pure: what --epochs, --steps, --warmup-steps and --stop-at-step mean in every framework."""
import pytest

from training import runner
from training.config import dali_installed, parse_args, resolve_for_device, resolve_optimizer
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


@pytest.mark.parametrize("gpu,bf16,precision", [(True, True, "bf16"), (True, False, "fp16"), (False, False, "fp32")])
def test_auto_precision_is_bf16_only_on_gpus_that_have_it(gpu, bf16, precision):
    # A T4 or V100 (no bf16 units) trains in fp16 with loss scaling; a flag the user gave wins everywhere.
    assert resolve_for_device(cfg(), gpu, bf16=bf16).precision == precision
    assert resolve_for_device(cfg("--precision", "bf16"), gpu, bf16=bf16).precision == "bf16"


def test_the_in_run_interconnect_check_is_refused_where_it_cannot_measure():
    with pytest.raises(UsageError, match="--dist native's collectives are not measured"):
        cfg("--framework", "keras", "--dist", "native", "--interconnect-check")
    with pytest.raises(UsageError, match="--interconnect-floor-gbps must be >= 0"):
        cfg("--interconnect-floor-gbps", "-1")


def test_without_dali_a_gpu_decodes_jpegs_with_nvjpeg():
    # This venv has no `nvidia` package at all: the probe must answer False, not raise.
    assert not dali_installed()
    assert resolve_for_device(cfg(), gpu=True).loader == "nvjpeg"
    assert resolve_for_device(cfg(), gpu=False).loader == "pil"
    assert resolve_for_device(cfg("--framework", "keras"), gpu=True).loader == "pil"  # unused: tf.data reads


@pytest.mark.parametrize("flags,words", [
    (["--framework", "tensorflow", "--loader", "nvjpeg"], "--loader nvjpeg applies to pytorch only"),
    (["--framework", "keras", "--optimizer", "lars"], "--optimizer lars applies to pytorch only (keras trains with sgd)"),
    (["--optimizer", "sgd", "--lars-lr", "5"], "--lars-lr applies to --optimizer lars"),
])
def test_what_only_pytorch_has_is_refused_elsewhere_in_one_line(flags, words):
    with pytest.raises(UsageError) as refused:
        cfg(*flags)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_the_vision_stacks_global_batch_trains_with_lars_and_its_schedule():
    # 64 GPUs x 192 = 12,288 is past the 8,192 where SGD's linear scaling holds: LARS, MLPerf's peak 10 below 16k,
    # 12% warmup, then (1 - progress)^2 down to 1e-4
    plan = runner.plan(cfg("--steps", "100", "--batch-size", "192"), 64, 1000)
    assert plan.global_batch == 12288 and plan.schedule == "poly" and plan.warmup_steps == 12
    assert plan.peak_lr == 10.0
    assert plan.lr(0) == pytest.approx(0.1)  # warmup starts at --base-lr
    assert plan.lr(12) == pytest.approx(10.0)
    assert plan.lr(56) == pytest.approx((10 - 1e-4) * 0.5 ** 2 + 1e-4)  # half-way through the decay: 2.500075
    assert plan.lr(100) == pytest.approx(1e-4)
    assert resolve_optimizer(cfg("--batch-size", "192"), 12288).optimizer == "lars"
    assert runner.plan(cfg("--steps", "100", "--batch-size", "256"), 64, 1000).peak_lr == 25.0  # 16,384
    assert runner.plan(cfg("--steps", "100", "--batch-size", "256"), 128, 1000).peak_lr == 31.2  # 32,768
    assert runner.plan(cfg("--steps", "100", "--batch-size", "256", "--lars-lr", "8.5"), 64, 1000).peak_lr == 8.5


def test_up_to_8192_images_sgd_keeps_the_linear_rule():
    plan = runner.plan(cfg("--steps", "100", "--batch-size", "256"), 32, 1000)
    assert plan.global_batch == 8192 and plan.schedule == "cosine" and plan.warmup_steps == 5
    assert plan.peak_lr == pytest.approx(3.2)
    assert resolve_optimizer(cfg(), 8192).optimizer == "sgd"
    # TensorFlow and Keras have no LARS: SGD at any batch; an explicit schedule wins over auto
    assert resolve_optimizer(cfg("--framework", "keras"), 12288).optimizer == "sgd"
    assert resolve_optimizer(cfg("--optimizer", "lars", "--lr-schedule", "cosine"), 256).lr_schedule == "cosine"


def test_explicit_speed_flags_win_over_the_hardware_defaults():
    resolved = resolve_for_device(cfg("--precision", "fp32", "--no-channels-last"), gpu=True)
    assert (resolved.precision, resolved.channels_last) == ("fp32", False)
    assert resolve_for_device(cfg("--precision", "bf16", "--channels-last"), gpu=False).channels_last is True


def test_help_says_what_the_defaults_are_on_each_device(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "auto: bf16 on a GPU that has it" in text and "fp16 on older GPUs (V100, T4), fp32 on CPU" in text and "on for pytorch on a GPU, off on CPU" in text


def test_train_help_describes_training_not_the_package():
    import subprocess
    import sys

    from training.__main__ import TRAIN_HELP

    out = subprocess.run([sys.executable, "-m", "training", "train", "--help"], capture_output=True, text=True,
                         check=True).stdout
    assert TRAIN_HELP.splitlines()[0] in out and "Commands:" not in out


def test_a_checkpoint_is_written_at_least_every_checkpoint_minutes_of_training():
    """--checkpoint-minutes bounds what an eviction loses: with steps that take 7 minutes each and a checkpoint
    every 500 steps, a 30-minute bound writes one at step 5 (35 minutes in), then 30+ minutes after that."""
    c = cfg("--steps", "1000", "--checkpoint-every", "500", "--checkpoint-minutes", "30")
    cadence = runner.CheckpointCadence(c.checkpoint_every, c.checkpoint_minutes, 1000, last=0.0)
    written = []
    for step in range(1, 1001):
        now = step * 7 * 60.0
        if cadence.due(step, now):
            written.append(step)
            cadence.saved(now)
    assert written[:3] == [5, 10, 15] and 500 in written and written[-1] == 1000
    gaps = [b - a for a, b in zip([0, *written], written)]
    assert max(gaps) * 7 <= 35  # never more than one step past the 30-minute bound


def test_checkpoint_minutes_zero_checkpoints_by_steps_only_and_a_negative_one_is_refused():
    cadence = runner.CheckpointCadence(500, 0.0, 1200, last=0.0)
    assert [s for s in range(1, 1201) if cadence.due(s, s * 3600.0)] == [500, 1000, 1200]
    assert cfg().checkpoint_minutes == 30.0  # bounded by default
    with pytest.raises(UsageError, match="--checkpoint-minutes must be >= 0"):
        cfg("--checkpoint-minutes", "-1").validate()


def test_without_a_gpu_the_sizes_left_to_their_defaults_are_cpu_sized_and_given_ones_stay(tmp_path):
    from training.config import CPU_SIZED, TrainConfig, cpu_sized_text

    cpu = resolve_for_device(cfg(), gpu=False)
    assert {name: getattr(cpu, name) for name in CPU_SIZED} == CPU_SIZED
    assert resolve_for_device(cfg(), gpu=True).image_size == 224  # a GPU keeps the GPU-sized defaults
    (tmp_path / "c.yaml").write_text("image-size: 128\n")
    mine = resolve_for_device(cfg("--config", str(tmp_path / "c.yaml"), "--batch-size", "8", "--steps", "5"), False)
    assert (mine.image_size, mine.batch_size, mine.workers) == (128, 8, 1)
    assert cpu_sized_text(mine) == "no GPU, so CPU-sized defaults: --workers 1 (give the flag to change one)"
    assert resolve_for_device(TrainConfig(), gpu=False).image_size == 224  # built in code: nothing resized
