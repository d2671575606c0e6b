"""`--loader nvjpeg` against `--loader pil`: the same images in the same order, the same crop windows and flips,
the same normalisation; resumable mid-epoch; files nvJPEG cannot take; a training run through it. On CPU
torchvision decodes with libjpeg-turbo (the decoder PIL uses), on a GPU with nvJPEG (skipped without CUDA)."""
import json

import numpy as np
import pytest
import torch
from PIL import Image

from training.config import TrainConfig, resolve_for_device
from training.pytorch import nvjpeg
from training.pytorch.data import FolderData

from tests.training.pytorch.conftest import TINY, training

LEVEL = 1 / 255 / 0.229  # one 8-bit level after normalisation, at the largest of ImageNet's channel gains


def folder(root, loader, rank=1, size=2, device="cpu", **overrides):
    cfg = resolve_for_device(TrainConfig(data=str(root), image_size=64, batch_size=4, workers=1, num_classes=0,
                                         loader=loader, **overrides), gpu=False)
    return FolderData(root, cfg, rank, size, torch.device(device))


def epoch(data, number, start_batch=0):
    batches = list(data.epoch_batches(number, start_batch))
    return torch.cat([images.cpu() for images, _ in batches]), [label for _, labels in batches
                                                                 for label in labels.tolist()]


def assert_like_pil(images, pil_images, mean_bound, max_bound):
    difference = (images - pil_images).abs()
    assert difference.mean() < mean_bound and difference.max() < max_bound, (difference.mean(), difference.max())
    # a mirrored or shifted window would differ by far more than rounding: each image matches itself, not its mirror
    mirrored = (images.flip(-1) - pil_images).abs().mean((1, 2, 3))
    assert (difference.mean((1, 2, 3)) < mirrored).all()


def test_nvjpeg_feeds_a_rank_what_pil_feeds_it(photos):
    pil_images, pil_labels = epoch(folder(photos, "pil"), 1)
    images, labels = epoch(folder(photos, "nvjpeg"), 1)
    assert labels == pil_labels and len(labels) == 20  # 40 images, 2 ranks, whole batches of 4
    assert images.shape == pil_images.shape == (20, 3, 64, 64) and images.dtype == torch.float32
    # The same decoder (libjpeg-turbo) on CPU, the same window, flip and normalisation: only the resize differs,
    # torch's antialiased bilinear against PIL's (measured: mean |difference| 0.0017, max 0.0175, one 8-bit level).
    assert_like_pil(images, pil_images, mean_bound=0.25 * LEVEL, max_bound=2 * LEVEL)


def test_a_resumed_nvjpeg_loader_sees_what_an_uninterrupted_one_sees(photos):
    uninterrupted = folder(photos, "nvjpeg")
    first, _ = epoch(uninterrupted, 0)
    second, second_labels = epoch(uninterrupted, 1)
    resumed_images, resumed_labels = epoch(folder(photos, "nvjpeg"), 1, start_batch=2)
    assert resumed_labels == second_labels[8:]
    assert torch.equal(resumed_images, second[8:])
    assert not torch.equal(first, second)  # a new epoch: a new order and new windows


def test_channels_last_batches_are_the_same_numbers_in_nhwc_memory(photos):
    plain, _ = epoch(folder(photos, "nvjpeg"), 0)
    batches = list(folder(photos, "nvjpeg", channels_last=True).epoch_batches(0, 0))
    assert all(images.is_contiguous(memory_format=torch.channels_last) for images, _ in batches)
    assert torch.equal(torch.cat([images for images, _ in batches]), plain)


@pytest.fixture
def awkward(tmp_path):
    """8 photos of which nvJPEG can take only some: a PNG and a CMYK JPEG named .JPEG (ImageNet has both), a
    grayscale JPEG, and a JPEG cut short (its header reads, its data does not)."""
    rng = np.random.default_rng(0)
    for cls in range(2):
        (tmp_path / "train" / f"c{cls}").mkdir(parents=True)
        for i in range(4):
            pixels = rng.integers(0, 255, (int(rng.integers(150, 260)), int(rng.integers(150, 260)), 3), np.uint8)
            Image.fromarray(pixels).save(tmp_path / "train" / f"c{cls}" / f"{i}.JPEG", quality=90)
    Image.open(tmp_path / "train/c0/0.JPEG").convert("RGB").save(tmp_path / "train/c0/0.JPEG", format="PNG")
    Image.open(tmp_path / "train/c0/1.JPEG").convert("CMYK").save(tmp_path / "train/c0/1.JPEG", format="JPEG")
    Image.open(tmp_path / "train/c1/0.JPEG").convert("L").save(tmp_path / "train/c1/0.JPEG", format="JPEG")
    cut = tmp_path / "train/c1/1.JPEG"
    cut.write_bytes(cut.read_bytes()[:2000])
    return tmp_path


def test_files_nvjpeg_cannot_take_reach_the_model_as_pil_reads_them(awkward, capfd):
    # one rank: every file is in the epoch; a cut-short file is skipped for the next readable one by both loaders
    pil_images, pil_labels = epoch(folder(awkward, "pil", rank=0, size=1, max_bad_images=0.5), 0)
    images, labels = epoch(folder(awkward, "nvjpeg", rank=0, size=1, max_bad_images=0.5), 0)
    assert labels == pil_labels and len(labels) == 8
    assert_like_pil(images, pil_images, mean_bound=0.25 * LEVEL, max_bound=2 * LEVEL)
    assert f"nvJPEG cannot decode {awkward / 'train/c1/1.JPEG'}" in capfd.readouterr().err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: nvJPEG runs on a GPU only")
def test_on_a_gpu_nvjpeg_feeds_a_rank_what_pil_feeds_it(photos):
    pil_images, pil_labels = epoch(folder(photos, "pil"), 1)
    images, labels = epoch(folder(photos, "nvjpeg", device="cuda"), 1)
    assert labels == pil_labels
    # nvJPEG's IDCT and chroma upsampling round differently from libjpeg-turbo's: DALI's bound (test_dali), which
    # also decodes with nvJPEG. Measured on an H100 (torchvision 0.26): mean 0.0065 (0.38 of a level), max 0.105.
    assert_like_pil(images, pil_images, mean_bound=0.02, max_bound=0.5)


def test_decode_is_one_batched_call_on_the_device(photos, monkeypatch):
    import torchvision.io

    calls = []
    real = torchvision.io.decode_jpeg

    def counting(data, **kwargs):
        calls.append((len(data) if isinstance(data, list) else 1, str(kwargs["device"])))
        return real(data, **kwargs)

    monkeypatch.setattr(torchvision.io, "decode_jpeg", counting)
    batches = list(folder(photos, "nvjpeg", device="cpu").epoch_batches(0, 0))
    assert len(batches) == 5 and calls == [(4, "cpu")] * len(batches)  # one call a batch, a batch ahead or not


def test_the_loader_defaults_to_nvjpeg_on_a_gpu_without_dali(monkeypatch):
    from training import config

    monkeypatch.setattr(config, "dali_installed", lambda: False)
    assert resolve_for_device(TrainConfig(), gpu=True).loader == "nvjpeg"
    assert resolve_for_device(TrainConfig(), gpu=False).loader == "pil"
    monkeypatch.setattr(config, "dali_installed", lambda: True)
    assert resolve_for_device(TrainConfig(), gpu=True).loader == "dali"


def test_training_through_nvjpeg_on_cpu(photos, tmp_path):
    out = tmp_path / "out"
    result = training("train", "--data", photos, "--num-classes", "4", "--loader", "nvjpeg", "--steps", "2",
                      *TINY, "--output-dir", out)
    assert "data: nvjpeg" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["data_path"] == "nvjpeg"


def test_a_worker_hands_over_bytes_not_pixels(photos):
    path = next(photos.rglob("*.JPEG"))
    sample = nvjpeg.read_sample(str(path), 3, seed=42, epoch=0, index=7)
    assert sample.data.dim() == 1 and sample.data.numel() == path.stat().st_size and sample.label == 3


def test_the_batched_resize_weighs_pixels_as_a_per_image_antialiased_interpolate():
    # Crops that shrink, grow and keep their size, flipped and not, padded to the batch's largest window: each
    # must come out as torch's own antialiased bilinear interpolate of its window alone (the previous loader's
    # per-image path), before rounding to 8 bits.
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(0)
    images = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=generator)
              for h, w in ((300, 420), (64, 64), (180, 500), (40, 30))]
    crops = [nvjpeg.Crop(10, 20, 250, 390, flip=False), nvjpeg.Crop(0, 0, 64, 64, flip=True),
             nvjpeg.Crop(5, 7, 170, 61, flip=True), nvjpeg.Crop(3, 2, 30, 27, flip=False)]
    batch = nvjpeg.resized_crops(images, crops, 64, channels_last=False)
    mean = torch.tensor(nvjpeg.MEAN).view(3, 1, 1) * 255
    std = torch.tensor(nvjpeg.STD).view(3, 1, 1) * 255
    for image, crop, got in zip(images, crops, batch):
        window = image[:, crop.top:crop.top + crop.height, crop.left:crop.left + crop.width].unsqueeze(0).float()
        expected = F.interpolate(window, size=(64, 64), mode="bilinear", antialias=True, align_corners=False)[0]
        expected = expected.flip(-1) if crop.flip else expected
        assert (got * std + mean - expected).abs().max() < 0.5 + 1e-3  # only the rounding to 8 bits differs


def test_resize_weights_are_interpolates_own_before_any_rounding():
    # One row of pixels resized alone by interpolate is that row times the weight matrix: shrinking, growing and
    # keeping the size, with columns padded past the length (which must weigh nothing).
    import torch.nn.functional as F

    lengths = [500, 227, 224, 100, 7, 1]
    weights = nvjpeg.resize_weights(torch.tensor(lengths), 224, 512)
    generator = torch.Generator().manual_seed(1)
    for length, matrix in zip(lengths, weights):
        row = torch.rand(1, 1, 1, length, generator=generator, dtype=torch.float64) * 255
        expected = F.interpolate(row.float(), size=(1, 224), mode="bilinear", antialias=True, align_corners=False)
        assert (matrix[:, :length].double() @ row[0, 0, 0] - expected[0, 0, 0]).abs().max() < 1e-2, length
        assert not matrix[:, length:].any() and torch.allclose(matrix.sum(1), torch.ones(224))
    assert torch.equal(weights[2][:, :224], torch.eye(224))  # the same size: each pixel is itself


def test_a_crop_far_larger_than_the_rest_is_resized_in_a_group_of_its_own():
    crops = [nvjpeg.Crop(0, 0, 400, 450, flip=False)] * 255 + [nvjpeg.Crop(0, 0, 3000, 2500, flip=False)]
    groups = nvjpeg.crop_groups(crops, 224)
    assert sorted(k for group in groups for k in group) == list(range(256)) and [255] in groups
    for group in groups:  # each within the bound, or a single crop
        tallest, widest = max(crops[k].height for k in group), max(crops[k].width for k in group)
        assert len(group) == 1 or len(group) * (tallest + 224) * (widest + 224) <= nvjpeg.GROUP_PIXELS
    # the batch's images land in their own places whatever the grouping
    images = [torch.full((3, c.height, c.width), k % 256, dtype=torch.uint8) for k, c in enumerate(crops[-3:])]
    out = nvjpeg.resized_crops(images, crops[-3:], 8, channels_last=False)
    mean, std = torch.tensor(nvjpeg.MEAN).view(3, 1, 1) * 255, torch.tensor(nvjpeg.STD).view(3, 1, 1) * 255
    assert [round(float((image * std + mean).mean())) for image in out] == [0, 1, 2]


def test_prefetched_batches_keep_their_order_raise_the_producers_error_and_stop_when_closed():
    produced = []

    def batches():
        for k in range(100):
            produced.append(k)
            yield torch.full((1,), k), torch.tensor([k])

    stream = nvjpeg.prefetched(batches(), torch.device("cpu"), depth=2)
    assert [int(images) for images, _ in (next(stream) for _ in range(3))] == [0, 1, 2]
    stream.close()  # the consumer stops early, as training does at its last step
    assert len(produced) <= 3 + nvjpeg.PREFETCH_DEPTH + 1  # handed over, the queue's depth, the one in hand
    assert not [t for t in __import__("threading").enumerate() if t.name == "nvjpeg-prefetch"]

    def failing():
        yield torch.zeros(1), torch.zeros(1)
        raise OSError("disk gone")

    stream = nvjpeg.prefetched(failing(), torch.device("cpu"))
    next(stream)
    with pytest.raises(OSError, match="disk gone"):
        next(stream)


@pytest.mark.parametrize("loader", ["pil", "nvjpeg"])
def test_workers_persist_across_epochs_and_still_crop_each_epoch_afresh(photos, loader):
    """The loaders' worker processes are forked once, not once an epoch (sampling.EpochTagged puts the epoch in
    each key): on a small dataset of a few batches an epoch, re-forking every worker each epoch cost the PIL
    loader 2-3x its rate on 2 cores (128 files at 96 px, batch 16, 2 workers: 289-308 img/s re-forked, 609-1,024
    persistent). Epoch 1 from the same workers must be what a fresh loader reads in epoch 1."""
    running = folder(photos, loader)
    epoch(running, 0)
    workers = [w.pid for w in running.train.loader._iterator._workers]
    second, second_labels = epoch(running, 1)
    assert [w.pid for w in running.train.loader._iterator._workers] == workers  # the same processes
    fresh, fresh_labels = epoch(folder(photos, loader), 1)
    assert fresh_labels == second_labels and torch.equal(fresh, second)
