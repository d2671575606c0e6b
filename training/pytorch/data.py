"""PyTorch data: an ImageNet-layout folder with augmentation and a distributed sampler, or synthetic tensors.

Folder data goes through one of three decoders (`--loader`): `pil` (torchvision on CPU worker processes, here),
`dali` (NVIDIA DALI, training/pytorch/dali.py) or `nvjpeg` (torchvision's nvJPEG decode on the GPU,
training/pytorch/nvjpeg.py). Which image a rank reads at each step, its random-resized crop and its flip are
decided per (seed, epoch, sample) by training/pytorch/sampling.py, the same for all three: a run resumed in the
middle of an epoch sees exactly the images and crops an uninterrupted run would have seen, and the loaders are
interchangeable.

A sharded dataset (`--data DIR` whose dataset.json says "format": "shards", training/data/shards.py) feeds the same
loaders: `pil` and `nvjpeg` read sample i where its shard's index says it lies (training/data/shard_samples.py), so
their sampler, epoch (the manifest's count // world // batch whole batches: the last part batch dropped, every rank
the same number of steps), crops and exact mid-epoch resume are the per-file path's; `dali` reads the shards with
DALI's own webdataset reader and GPU decoder (training/pytorch/dali_shards.py: its order and its resume semantics
are DALI's, documented there). Validation reads the val shards with PIL, as it reads val/ files.
"""
from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from training.errors import UsageError
from training.data import shards
from training.data.folder import MEAN, STD, num_classes, scan, sharded, verify_images
from training.data.shard_samples import ShardSamples
from training.pytorch.sampling import (EpochTagged, batches_per_epoch, first_readable, training_crop,
                                       training_sampler)
from training.runner import synthetic_steps_per_epoch


class FolderDataset(Dataset):
    """`samples`: (image file, label) pairs: a folder's paths, or a sharded dataset's ShardSamples (each image a
    ShardMember, a file object PIL opens alike)."""

    def __init__(self, samples: list[tuple[Path, int]] | ShardSamples, image_size: int, train: bool, seed: int):
        from torchvision import transforms

        self.samples, self.seed, self.image_size, self.train = samples, seed, image_size, train
        self.normalize = transforms.Compose([transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
        self.evaluation = transforms.Compose([transforms.Resize(int(image_size * 256 / 224)),
                                              transforms.CenterCrop(image_size)])

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key: int | tuple[int, int]):
        """`key`: a validation sample's index, or (epoch, index) of a training sample (sampling.EpochTagged)."""
        epoch, index = key if isinstance(key, tuple) else (0, key)
        return first_readable(self.samples, index, lambda path, label: (self._transformed(path, epoch, index), label))

    def _transformed(self, path: Path, epoch: int, index: int) -> torch.Tensor:
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as F

        with Image.open(path) as image:
            if not self.train:
                return self.normalize(self.evaluation(image.convert("RGB")))
            crop = training_crop(image, self.seed, epoch, index)
            cropped = F.resized_crop(image.convert("RGB"), crop.top, crop.left, crop.height, crop.width,
                                     [self.image_size, self.image_size], InterpolationMode.BILINEAR, antialias=True)
            return self.normalize(F.hflip(cropped) if crop.flip else cropped)


class PilBatches:
    """Training batches decoded and augmented by PIL/torchvision in `--workers` processes."""

    def __init__(self, samples: list[tuple[Path, int]] | ShardSamples, cfg, rank: int, size: int, pin_memory: bool):
        self.dataset = FolderDataset(samples, cfg.image_size, train=True, seed=cfg.seed)
        self.sampler = training_sampler(len(samples), cfg, rank, size)
        self.loader = DataLoader(self.dataset, batch_size=cfg.batch_size, sampler=EpochTagged(self.sampler),
                                 num_workers=cfg.workers, pin_memory=pin_memory, drop_last=True,
                                 persistent_workers=cfg.workers > 0)  # the epoch travels in each key

    def epoch_batches(self, epoch: int, start_batch: int):
        self.sampler.set_epoch(epoch)
        self.sampler.start_batch = start_batch
        return iter(self.loader)


class FolderData:
    def __init__(self, root: Path, cfg, rank: int, size: int, device: torch.device, broadcast=None):
        # broadcast: the distribution's broadcast_object; with it rank 0 alone reads the folders (folder.scan)
        if not root.is_dir():
            raise UsageError(f"--data {root}: no such folder (give an ImageNet-layout folder, a sharded dataset's "
                             "folder or 'synthetic')")
        self.sharded = sharded(root)
        if self.sharded:
            dataset = shards.read_sharded(root)
            classes, samples = list(dataset.classes), ShardSamples(root, "train", dataset)
        else:
            classes, samples = scan(root, "train", rank=rank, broadcast=broadcast)
        num_classes(cfg.num_classes, classes, root)  # the runner decided it from the same folder
        verify_images(samples, cfg.max_bad_images, cfg.seed)
        # Every loader's epoch, from the count alone (a sharded dataset's: its manifest's), the same on every rank
        self.steps_per_epoch = batches_per_epoch(len(samples), size, cfg.batch_size)
        if self.steps_per_epoch == 0:
            raise UsageError(f"--data {root}: {len(samples)} images are fewer than one global batch "
                             f"({cfg.batch_size} x {size} workers); lower --batch-size")
        if cfg.loader == "dali" and self.sharded:
            from training.pytorch.dali_shards import DaliShardBatches

            self.train = DaliShardBatches(root, dataset, cfg, rank, size, device, self.steps_per_epoch)
        elif cfg.loader == "dali":
            from training.pytorch.dali import DaliBatches

            self.train = DaliBatches(samples, cfg, rank, size, device, self.steps_per_epoch)
        elif cfg.loader == "nvjpeg":
            from training.pytorch.nvjpeg import NvjpegBatches

            self.train = NvjpegBatches(samples, cfg, rank, size, device)
        else:
            self.train = PilBatches(samples, cfg, rank, size, pin_memory=device.type == "cuda")
        # Evaluation runs once per epoch over a small split: PIL for every loader.
        self.val = None
        val_samples = None
        if self.sharded and dataset.shards.get("val"):
            val_samples = ShardSamples(root, "val", dataset)  # labelled by the manifest's (train/'s) classes
        elif not self.sharded and (root / "val").is_dir():
            _, val_samples = scan(root, "val", classes, rank=rank, broadcast=broadcast)  # by train/'s classes
        if val_samples is not None:
            val_set = FolderDataset(val_samples, cfg.image_size, train=False, seed=cfg.seed)
            val_sampler = DistributedSampler(val_set, num_replicas=size, rank=rank, shuffle=False)
            self.val = DataLoader(val_set, batch_size=cfg.batch_size, sampler=val_sampler, num_workers=cfg.workers)

    def epoch_batches(self, epoch: int, start_batch: int):
        return self.train.epoch_batches(epoch, start_batch)


class SyntheticData:
    """One random batch made on the device and reused each step: measures compute, not I/O (Horovod's
    synthetic benchmark does the same)."""

    def __init__(self, cfg, global_batch: int, device, rank: int):
        generator = torch.Generator().manual_seed(cfg.seed + rank)
        images = torch.randn(cfg.batch_size, 3, cfg.image_size, cfg.image_size, generator=generator)
        labels = torch.randint(0, cfg.num_classes, (cfg.batch_size,), generator=generator)
        self.batch = (images.to(device), labels.to(device))
        self.steps_per_epoch = synthetic_steps_per_epoch(global_batch)
        self.val = None

    def epoch_batches(self, epoch: int, start_batch: int):
        for _ in range(start_batch, self.steps_per_epoch):
            yield self.batch
