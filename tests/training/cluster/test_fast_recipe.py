"""PyTorch's default on GPUs is the measured fast recipe (training/cluster/launch.py fast_recipe_flags)."""
from training import efficiency
from training.cluster.launch import dist_of, fast_recipe_flags
from training.config import parse_args, resolve_for_device, resolve_optimizer


def test_a_pytorch_gpu_job_that_chooses_no_distribution_runs_ddp_compiled():
    flags = ["--data", "synthetic", "--batch-size", "256"]
    fast = fast_recipe_flags(flags, gpu=True)
    assert fast == [*flags, "--dist", "ddp", "--compile"] and dist_of(fast) == "ddp"
    # its recipe is the one the size's figure was measured with: an expected figure, not "unknown"
    cfg = resolve_for_device(parse_args([*fast, "--output-dir", "unused"]), gpu=True)
    recipe = efficiency.Recipe.of(resolve_optimizer(cfg, 256 * 16))
    assert recipe in efficiency.MEASURED_RECIPES
    assert efficiency.expectation(5363, device="gpu", image_size=224, recipe=recipe).img_per_sec == 5363


def test_what_a_job_chose_is_kept_and_cpu_and_tensorflow_runs_are_left_alone():
    assert fast_recipe_flags(["--dist", "horovod"], gpu=True) == ["--dist", "horovod"]
    assert fast_recipe_flags(["--dist=ddp"], gpu=True) == ["--dist=ddp"]
    assert fast_recipe_flags(["--no-compile"], gpu=True) == ["--no-compile", "--dist", "ddp"]
    assert fast_recipe_flags(["--steps", "3"], gpu=False) == ["--steps", "3"]
    assert fast_recipe_flags(["--framework", "keras"], gpu=True) == ["--framework", "keras"]
