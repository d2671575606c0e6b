"""`--loader dali` against `--loader pil` on CPU (DALI's CPU backend): the same images in the same order, the same
crop windows and flips, the same normalisation; resumable mid-epoch; and a training run through it."""
import json
import platform
from pathlib import Path

import pytest
import torch

from training.config import TrainConfig, resolve_for_device
from training.errors import UsageError
from training.pytorch import dali
from training.pytorch.data import FolderData

from tests.training.pytorch.conftest import TINY, TORCH, training


def folder(root: Path, loader: str, rank: int = 1, size: int = 2) -> FolderData:
    cfg = resolve_for_device(TrainConfig(data=str(root), image_size=64, batch_size=4, workers=1, num_classes=4,
                                         loader=loader), gpu=False)
    return FolderData(root, cfg, rank, size, torch.device("cpu"))


def epoch(data: FolderData, number: int, start_batch: int = 0) -> tuple[torch.Tensor, list[int]]:
    batches = list(data.epoch_batches(number, start_batch))
    return torch.cat([images for images, _ in batches]), [label for _, labels in batches for label in labels.tolist()]


def test_dali_feeds_a_rank_what_pil_feeds_it(photos):
    pil_images, pil_labels = epoch(folder(photos, "pil"), 1)
    dali_images, dali_labels = epoch(folder(photos, "dali"), 1)
    assert dali_labels == pil_labels and len(pil_labels) == 20  # 40 images, 2 ranks, whole batches of 4
    assert dali_images.shape == pil_images.shape == (20, 3, 64, 64) and dali_images.dtype == torch.float32
    # Same window, flip and normalisation: only the two JPEG decoders' and resizers' rounding differ (measured:
    # mean |difference| 0.004, i.e. a third of one 8-bit level after normalisation).
    difference = (dali_images - pil_images).abs()
    assert difference.mean() < 0.02 and difference.max() < 0.5
    assert torch.allclose(dali_images.mean((0, 2, 3)), pil_images.mean((0, 2, 3)), atol=0.01)
    assert torch.allclose(dali_images.std((0, 2, 3)), pil_images.std((0, 2, 3)), atol=0.01)
    # a mirrored window would differ by far more than rounding: each image matches itself, not its mirror
    mirrored = (dali_images.flip(-1) - pil_images).abs().mean((1, 2, 3))
    assert (difference.mean((1, 2, 3)) < mirrored).all()


def test_a_resumed_dali_loader_sees_what_an_uninterrupted_one_sees(photos):
    uninterrupted = folder(photos, "dali")
    first, _ = epoch(uninterrupted, 0)
    pipeline = uninterrupted.train._iterator
    second, second_labels = epoch(uninterrupted, 1)
    assert uninterrupted.train._iterator is pipeline  # one pipeline runs on into the next epoch
    resumed_images, resumed_labels = epoch(folder(photos, "dali"), 1, start_batch=2)
    assert resumed_labels == second_labels[8:]
    assert torch.equal(resumed_images, second[8:])
    assert not torch.equal(first, second)  # a new epoch: a new order and new windows


def test_ranks_read_disjoint_shards(photos):
    shards = [dali.SampleSource(folder(photos, "pil").train.dataset.samples, TrainConfig(batch_size=4), rank, 2, 0, 0)
              for rank in (0, 1)]
    picked = [{shard.position(k)[1] for k in range(shard.per_epoch)} for shard in shards]
    assert len(picked[0]) == len(picked[1]) == 20 and not picked[0] & picked[1]


def test_the_loader_defaults_to_dali_on_a_gpu_and_pil_on_cpu():
    assert resolve_for_device(TrainConfig(), gpu=True).loader == "dali"
    assert resolve_for_device(TrainConfig(), gpu=False).loader == "pil"
    assert resolve_for_device(TrainConfig(loader="dali"), gpu=False).loader == "dali"


def test_without_dali_installed_the_loader_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(dali, "dali_installed", lambda: False)
    with pytest.raises(UsageError, match="--loader dali: NVIDIA DALI is not installed.*or use --loader pil"):
        dali.require_installed()


def test_training_through_dali_on_cpu(photos, tmp_path):
    out = tmp_path / "out"
    result = training("train", "--data", photos, "--num-classes", "4", "--loader", "dali", "--steps", "4",
                      *TINY, "--output-dir", out)
    assert "data: dali" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["data_path"] == "dali"
    assert summary["peak_memory_of"] == "host process (RSS)" and summary["peak_memory_mb"] > 100


def test_the_benchmark_prints_every_run_and_data_path_with_ratios(tmp_path):
    # The PIL loader's rows only (--loaders pil): the table is built alike for every loader, and dali and nvjpeg are
    # trained through by their own tests (test_training_through_dali_on_cpu, _nvjpeg_on_cpu); two loaders fewer
    # are four runs fewer (~60-80 s of CPU).
    result = TORCH.devtools("benchmark", "--image-size", "32", "--steps", "4", "--batch-size", "4", "--workers", "1",
                            "--no-compile", "--loaders", "pil", timeout=600)
    # one process of Horovod without a launcher, as the cluster's job trains
    table = result.stdout.split("ResNet50 training, pytorch (horovod), 32x32, 1 worker, CPU")[1].splitlines()
    rows = {line.split("  ")[1].strip(): line for line in table[2:] if line.startswith("  ") and "  " in line[2:]}
    assert set(rows) >= {"recipe: synthetic, fp32, eager, batch 32", "ours: synthetic, fp32, batch 4",
                         "ours: JPEG files, pil (1 workers)", "pil data path alone (no model)"}, table
    assert not [row for row in rows if "dali" in row or "nvjpeg" in row], table  # only the loaders asked for
    assert "1.00x" in rows["recipe: synthetic, fp32, eager, batch 32"]
    assert "GiB RSS" in rows["ours: JPEG files, pil (1 workers)"]
    assert "ours / recipe (synthetic):" in result.stdout
    import torchvision

    # the versions it ran with, under the table
    assert (f"ran with: python {platform.python_version()}, torch {torch.__version__}, torchvision "
            f"{torchvision.__version__}, CUDA {torch.version.cuda}, no GPU, horovod 0.28.1, DALI ") in table[1], table


def test_the_benchmarks_loaders_are_those_the_machine_runs():
    from devtools.benchmark import chosen_loaders, jpeg_loaders

    assert chosen_loaders(None, "pytorch") == jpeg_loaders("pytorch") and chosen_loaders(None, "keras") == ()
    assert chosen_loaders("pil,nvjpeg", "pytorch") == ("nvjpeg", "pil")  # in the table's order
    with pytest.raises(UsageError, match=r"--loaders turbo: give some of .*nvjpeg,pil \(the loaders this machine"):
        chosen_loaders("turbo", "pytorch")
    with pytest.raises(UsageError, match="--loaders applies to pytorch only; tensorflow reads JPEG files with tf.data"):
        chosen_loaders("pil", "tensorflow")


def test_the_benchmark_runs_with_whatever_distribution_the_machine_has():
    from devtools.benchmark import distribution

    assert distribution("auto", "pytorch", horovod=True) == "horovod"  # as the cluster's job trains
    assert distribution("auto", "pytorch", horovod=False) == "ddp"  # a device machine: DDP of one process
    assert distribution("ddp", "pytorch", horovod=True) == "ddp"
    assert distribution("auto", "keras", horovod=True) == "horovod"
    for requested, framework, words in (("ddp", "tensorflow", "--dist ddp applies to pytorch only; tensorflow "
                                                              "runs Horovod"),
                                        ("horovod", "pytorch", "--dist horovod: Horovod is not installed here"),
                                        ("auto", "keras", "--framework keras: its training loop needs Horovod")):
        with pytest.raises(UsageError, match=words):
            distribution(requested, framework, horovod=False)


def test_the_benchmark_refuses_ddp_for_tensorflow_in_one_line():
    from devtools.benchmark import main

    with pytest.raises(UsageError, match="--dist ddp applies to pytorch only; tensorflow runs Horovod"):
        main(["--framework", "tensorflow", "--dist", "ddp"])


def test_synth_data_makes_photos_at_imagenet_sizes(photos):
    from PIL import Image

    from devtools.synth_data import IMAGENET_HEIGHTS, IMAGENET_WIDTHS

    files = sorted(photos.rglob("*.JPEG"))
    sizes = [Image.open(path).size for path in files]
    assert len(files) == 40 and len(set(sizes)) > 10
    assert all(IMAGENET_WIDTHS[0] <= w <= IMAGENET_WIDTHS[1] and IMAGENET_HEIGHTS[0] <= h <= IMAGENET_HEIGHTS[1]
               for w, h in sizes)
    assert 80_000 < sum(path.stat().st_size for path in files) / len(files) < 140_000  # ImageNet's ~110 KB


def test_the_benchmark_counts_only_the_windows_after_what_the_loader_read_ahead():
    from devtools.benchmark import Run, UtilisationSampler, counted_windows, jpeg_span, read_ahead

    log = "\n".join(json.dumps({"step": step, "img_per_sec": rate, "time": 1000.0 + step}) for step, rate in
                    ((6, 100.0), (12, 9000.0), (18, 8000.0), (24, 2000.0), (30, 2100.0)))
    # windows start at steps 0, 6, 12, 18, 24: from 18 on, the rate is the loader's own, from second 1018 to 1030
    assert counted_windows(log, 18) == ([(6, 2000.0), (6, 2100.0)], (1018.0, 1030.0))
    windows, span = counted_windows(log, 6)  # synthetic data: the first window only
    assert windows == [(6, 9000.0), (6, 8000.0), (6, 2000.0), (6, 2100.0)] and span == (1006.0, 1030.0)
    # images over time, not the mean of the rates: 12 steps in 6/9000 + 6/1000 of the time a step takes
    assert Run("r", "r", [], windows=[(6, 9000.0), (6, 1000.0)]).rate == pytest.approx(1800.0)
    from training.pytorch.nvjpeg import PREFETCH_DEPTH

    assert read_ahead(16) == 2 * 16 + PREFETCH_DEPTH + 1  # DataLoader's 2 a worker, nvjpeg's queue and hand
    # 16 workers, 40 steps logged every 6: 3 x 35 batches drained (rounded up to whole windows), then 70 counted
    assert jpeg_span(6, 40, 16, compiled=True) == (114, 184)
    assert jpeg_span(6, 400, 16, compiled=True) == (114, 114 + 394)  # as many steps counted as on synthetic data
    # eager: the start-up fills the read-ahead once, the first window's time; then as many steps as on synthetic
    assert jpeg_span(6, 40, 16, compiled=False) == (42, 76)
    with pytest.raises(SystemExit, match="no logged window starts at or after step 30"):
        counted_windows(log, 30)
    # GPU utilisation over the counted steps only, not compilation's idle GPU before them
    sampler = UtilisationSampler(enabled=False)
    sampler.samples = [(1001.0, 0.0), (1010.0, 5.0), (1018.5, 90.0), (1025.0, 94.0), (1031.0, 10.0)]
    assert sampler.mean((1018.0, 1030.0)) == 92.0 and sampler.mean((2000.0, 2001.0)) is None


def test_the_dali_epoch_is_the_loops_epoch_when_sizes_do_not_divide():
    """103 samples over 3 ranks at batch 4: each rank's shard is 34 samples, the loop's epoch 8 batches (32). The
    source counts one running sample number across epochs, so an epoch of 34 would shift every later epoch by 2
    samples per epoch against a run resumed there. Each rank, run on from epoch 0 and resumed in epoch 2 at
    batch 3, reads what the loop's sampler puts at each step (the PIL loader's order)."""
    from training.pytorch.sampling import batches_per_epoch, training_sampler

    samples, cfg, size = [(f"{i}.JPEG", 0) for i in range(103)], TrainConfig(batch_size=4), 3
    steps = batches_per_epoch(len(samples), size, cfg.batch_size)
    assert steps == 8
    for rank in range(size):
        sampler = training_sampler(len(samples), cfg, rank, size)
        loop_order = []  # epoch by epoch, the loop's steps x batch samples
        for epoch_number in range(3):
            sampler.set_epoch(epoch_number)
            loop_order += list(sampler)[:steps * cfg.batch_size]
        uninterrupted = dali.SampleSource(samples, cfg, rank, size, 0, 0)
        assert [uninterrupted.position(k)[1] for k in range(len(loop_order))] == loop_order
        resumed = dali.SampleSource(samples, cfg, rank, size, 2, 3)
        skipped = (2 * steps + 3) * cfg.batch_size
        tail = [resumed.position(k) for k in range(len(loop_order) - skipped)]
        assert [index for _, index in tail] == loop_order[skipped:] and {epoch for epoch, _ in tail} == {2}



def test_the_benchmark_compiles_under_ddp_only():
    from devtools.benchmark import distribution

    assert distribution("auto", "pytorch", horovod=True, compiling=True) == "ddp"
    with pytest.raises(UsageError, match="--dist horovod runs eager"):
        distribution("horovod", "pytorch", horovod=True, compiling=True)
