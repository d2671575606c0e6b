"""Training from a sharded dataset (training/data/shards.py) with real JPEGs: the PIL and nvjpeg loaders reading
samples from their shards (training/data/shard_samples.py), every sample at most once an epoch across ranks and
loader workers, an exact resume, a 2-rank Horovod run with validation from val shards; DALI's webdataset reader
(training/pytorch/dali_shards.py) on its CPU backend reading each rank's slice, and the arguments it passes on a GPU."""
import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from training.config import TrainConfig, resolve_for_device
from training.data import shards
from training.data.shard_samples import ShardSamples
from training.pytorch import dali_shards
from training.pytorch.data import FolderData, FolderDataset

from tests.training.pytorch.conftest import TINY, horovod


@pytest.fixture(scope="session")
def sharded(dataset, tmp_path_factory):
    """The 4-class set (64 train, 16 val JPEGs of 40 px) as 13 train and 4 val shards of ~20 KB."""
    root = tmp_path_factory.mktemp("sharded")
    shards.write_shards(dataset, root, shard_bytes=20_000)
    return root


@pytest.fixture(scope="session")
def sharded_photos(photos, tmp_path_factory):
    root = tmp_path_factory.mktemp("sharded-photos")
    shards.write_shards(photos, root, shard_bytes=400_000)
    return root


def folder(root: Path, loader: str, rank: int = 0, size: int = 1, workers: int = 1, device: str = "cpu",
           **overrides) -> FolderData:
    settings = {"image_size": 32, "batch_size": 4, "num_classes": 4, **overrides}
    cfg = resolve_for_device(TrainConfig(data=str(root), workers=workers, loader=loader, **settings), gpu=False)
    return FolderData(root, cfg, rank, size, torch.device(device))


def epoch(data: FolderData, number: int, start_batch: int = 0):
    batches = list(data.epoch_batches(number, start_batch))
    return (torch.cat([images.cpu() for images, _ in batches]),
            [label for _, labels in batches for label in labels.tolist()])


def in_file_order(root: Path, split: str) -> list[tuple[bytes, int]]:
    dataset = shards.read_sharded(root)
    return [(image, label) for s in dataset.shards[split] for _, image, label in shards.iter_shard(root / s.name)]


def test_sample_i_is_read_from_where_the_index_puts_it(sharded):
    samples = ShardSamples(sharded, "train")
    expected = in_file_order(sharded, "train")
    assert len(samples) == len(expected) == 64 and len(shards.read_sharded(sharded).shards["train"]) > 4
    assert [samples.read(i) for i in range(len(samples))] == expected
    member, label = samples[5]
    assert member.read() == expected[5][0] and label == expected[5][1] and "train-0000" in repr(member)


@pytest.mark.parametrize("world,workers", [(2, 2), (3, 2)])
def test_ranks_and_workers_read_every_sample_at_most_once_an_epoch(sharded, monkeypatch, world, workers):
    # Each loaded "image" is the digest of the bytes the loader read from the shard, so the test sees which
    # samples the DataLoader's worker processes actually read for each rank.
    monkeypatch.setattr(FolderDataset, "_transformed", lambda self, path, epoch, index: torch.tensor(
        list(hashlib.md5(path.read()).digest()), dtype=torch.uint8))
    everything = Counter(hashlib.md5(image).digest() for image, _ in in_file_order(sharded, "train"))
    assert len(everything) == 64  # distinct images
    for number in (0, 1):
        read = Counter()
        for rank in range(world):
            data = folder(sharded, "pil", rank, world, workers=workers)
            digests, _ = epoch(data, number)
            read.update(bytes(d.tolist()) for d in digests)
            assert len(digests) == data.steps_per_epoch * 4 == 64 // world // 4 * 4  # the manifest's count
        assert max(read.values()) == 1 and set(read) <= set(everything)
        assert sum(read.values()) == world * (64 // world // 4) * 4  # all of them when the batches divide it
        if world == 2:
            assert set(read) == set(everything)


def test_a_resumed_shard_loader_sees_what_an_uninterrupted_one_sees(sharded_photos):
    uninterrupted = folder(sharded_photos, "pil", rank=1, size=2)
    second, second_labels = epoch(uninterrupted, 1)
    resumed, resumed_labels = epoch(folder(sharded_photos, "pil", rank=1, size=2), 1, start_batch=2)
    assert resumed_labels == second_labels[8:] and torch.equal(resumed, second[8:])


def test_nvjpeg_reads_the_shards_as_pil_does(sharded_photos):
    pil_images, pil_labels = epoch(folder(sharded_photos, "pil", rank=1, size=2, image_size=64), 1)
    images, labels = epoch(folder(sharded_photos, "nvjpeg", rank=1, size=2, image_size=64), 1)
    assert labels == pil_labels and len(labels) == 20
    difference = (images - pil_images).abs()  # libjpeg-turbo both; only torch's resize against PIL's (test_nvjpeg)
    assert difference.mean() < 0.25 / 255 / 0.229 and difference.max() < 2 / 255 / 0.229


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: nvJPEG runs on a GPU only")
def test_on_a_gpu_nvjpeg_reads_the_shards_as_pil_does(sharded_photos):
    pil_images, pil_labels = epoch(folder(sharded_photos, "pil", rank=1, size=2, image_size=64), 1)
    images, labels = epoch(folder(sharded_photos, "nvjpeg", rank=1, size=2, image_size=64, device="cuda"), 1)
    assert labels == pil_labels
    difference = (images - pil_images).abs()  # nvJPEG's rounding: test_nvjpeg's GPU bound
    assert difference.mean() < 0.02 and difference.max() < 0.5


def test_two_horovod_ranks_train_from_shards_and_validate_on_val_shards(sharded, tmp_path):
    out = tmp_path / "run"
    result = horovod("train", "--data", sharded, *TINY, "--steps", "4", "--output-dir", out)
    assert "data: pil" in result.stdout and "(4 classes)" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["images_seen"] == 4 * 4 * 2
    assert summary["top1"] is not None  # evaluated on the val shards


def test_dali_reads_each_ranks_slice_and_moves_on_a_slice_an_epoch(sharded):
    """DALI's CPU backend with the reader arguments a GPU run passes: rank r's epoch e is the contiguous slice
    (r + e) mod W of the samples in manifest order (the labels of the slice, in DALI's shuffled order)."""
    labels = [label for _, label in in_file_order(sharded, "train")]
    world = 2
    for rank in range(world):
        data = folder(sharded, "dali", rank, world)
        assert data.steps_per_epoch == 8 and data.train.pipeline_batches == 8
        for number in (0, 1):
            images, got = epoch(data, number)
            s = (rank + number) % world
            assert Counter(got) == Counter(labels[32 * s:32 * (s + 1)]), (rank, number)
            assert images.shape == (32, 3, 32, 32) and images.dtype == torch.float32  # fp32 on CPU


@pytest.fixture(scope="module")
def one_per_class(tmp_path_factory):
    """64 classes of one JPEG each, sharded: a label names its sample."""
    from PIL import Image

    files, root = tmp_path_factory.mktemp("one-per-class"), tmp_path_factory.mktemp("one-per-class-shards")
    for k in range(64):
        (files / "train" / f"c{k:02d}").mkdir(parents=True)
        Image.new("RGB", (24, 24), (4 * k, 255 - 4 * k, 128)).save(files / "train" / f"c{k:02d}" / "0.jpg")
    shards.write_shards(files, root, shard_bytes=8_000)
    return root


def test_dali_keeps_each_epoch_on_its_slice_across_dropped_batches_and_a_resume(one_per_class):
    """3 ranks, batch 4: slices of 21, 21, 22 samples, 6 pipeline batches an epoch (the last padded), the loop's 5.
    Each epoch's images are distinct and from the slice DALI reads in that epoch, also after the dropped batch
    (drained) and after a resume mid-epoch (a pipeline started on that epoch's slice, rebuilt for the next)."""
    order = [label for _, label in in_file_order(one_per_class, "train")]
    bounds = [64 * s // 3 for s in range(4)]  # DALI's start_index
    slice_of = [set(order[bounds[s]:bounds[s + 1]]) for s in range(3)]
    settings = {"num_classes": 64, "image_size": 16}
    running = folder(one_per_class, "dali", rank=1, size=3, **settings)
    assert running.steps_per_epoch == 5 and running.train.pipeline_batches == 6
    for number in range(3):
        _, got = epoch(running, number)
        assert len(set(got)) == 20 and set(got) <= slice_of[(1 + number) % 3], number
    resumed = folder(one_per_class, "dali", rank=1, size=3, **settings)
    _, rest = epoch(resumed, 1, start_batch=3)
    assert len(set(rest)) == 8 and set(rest) <= slice_of[2]
    _, following = epoch(resumed, 2)  # 4 batches were left in the pipeline's epoch: a new pipeline on slice 0
    assert len(set(following)) == 20 and set(following) <= slice_of[0]


def test_dali_on_a_gpu_is_configured_as_nvidia_runs_mlperf_on_h100(sharded):
    from nvidia.dali import types

    dataset = shards.read_sharded(sharded)
    reader = dali_shards.reader_kwargs(sharded, dataset, "train", rank=5, world=64, epoch=3, seed=7)
    assert reader["shard_id"] == 8 and reader["num_shards"] == 64 and reader["pad_last_batch"] is True
    assert reader["random_shuffle"] is True and reader["stick_to_shard"] is False and reader["initial_fill"] == 1024
    assert reader["ext"] == ["jpg;jpeg;png", "cls"] and reader["missing_component_behavior"] == "error"
    assert [Path(p).name for p in reader["index_paths"]] == [Path(s.index).name for s in dataset.shards["train"]]
    assert all(Path(p).is_file() for p in reader["paths"] + reader["index_paths"])
    decoder = dali_shards.decoder_kwargs(gpu=True)
    assert decoder["device"] == "mixed" and decoder["hw_decoder_load"] == 0.99
    assert decoder["device_memory_padding"] == decoder["host_memory_padding"] == 256 * 2**20
    assert "hw_decoder_load" not in dali_shards.decoder_kwargs(gpu=False)  # the CPU backend refuses it
    normalize = dali_shards.normalize_kwargs("bf16", channels_last=True)
    assert normalize["dtype"] == types.FLOAT16 and normalize["output_layout"] == "HWC"
    assert normalize["pad_output"] is False  # torchvision's conv1 takes 3 channels
    assert dali_shards.normalize_kwargs("fp32", channels_last=False)["dtype"] == types.FLOAT
    pipeline = dali_shards.pipeline_kwargs(192, torch.device("cuda", 3), seed=1, cores=96, gpus=8)
    assert pipeline["num_threads"] == 6 and pipeline["prefetch_queue_depth"] == 5 and pipeline["device_id"] == 3
    assert dali_shards.dali_threads(48, 8) == 4 and dali_shards.dali_threads(2, 1) == 1
    # ImageNet on 64 GPUs at 192: slices of 20,018-20,019, 105 pipeline batches, the loop's 104 (one dropped)
    assert dali_shards.batches_per_pipeline_epoch(1_281_167, 64, 192) == 105
    assert 1_281_167 // 64 // 192 == 104


def test_ascii_cls_members_become_class_indices():
    padded = torch.tensor([[55, 0, 0], [49, 50, 51], [57, 57, 0]], dtype=torch.uint8)  # "7", "123", "99"
    assert dali_shards.ascii_labels(padded).tolist() == [7, 123, 99]
