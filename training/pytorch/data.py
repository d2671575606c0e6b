"""PyTorch data: an ImageNet-layout folder with augmentation and a distributed sampler, or synthetic tensors.

Which image a rank reads at each step, its random-resized crop and its flip are decided here, per (seed,
epoch, sample) and not per worker process, for both decoders (`--loader pil`: torchvision on CPU worker
processes; `--loader dali`: NVIDIA DALI, training/pytorch/dali.py). So a run resumed in the middle of an epoch
sees exactly the images and crops an uninterrupted run would have seen, and the two loaders crop alike.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from training.errors import UsageError
from training.data.folder import MEAN, STD, scan, verify_images
from training.runner import synthetic_steps_per_epoch

# torchvision's RandomResizedCrop defaults (Szegedy et al. 2015), which NVIDIA's DALI recipe uses too
CROP_AREA, CROP_RATIO = (0.08, 1.0), (3 / 4, 4 / 3)


@dataclass(frozen=True)
class Crop:
    top: int
    left: int
    height: int
    width: int
    flip: bool


def training_crop(image: Image.Image, seed: int, epoch: int, index: int) -> Crop:
    """The random-resized crop and horizontal flip of sample `index` in `epoch`. `image` may be opened lazily
    (only its header is read): torchvision draws the window from the image's size alone."""
    from torchvision.transforms import RandomResizedCrop

    # The CPU generator alone, which is all get_params draws from: torch.manual_seed would also seed every
    # device's generator, 200 us a sample (measured), a third of the DALI source's time per sample.
    torch.default_generator.manual_seed(hash((seed, epoch, index)) & 0x7FFF_FFFF)
    top, left, height, width = RandomResizedCrop.get_params(image, scale=CROP_AREA, ratio=CROP_RATIO)
    return Crop(top, left, height, width, flip=bool(torch.rand(1) < 0.5))


def first_readable(samples: list[tuple[Path | str, int]], index: int, use):
    """`use(path, label)` of the sample at `index`, or of the next one whose file PIL can read (a bad file among
    good ones: say so and go on; verify_images has refused a dataset with too many)."""
    for offset in range(len(samples)):
        path, label = samples[(index + offset) % len(samples)]
        try:
            return use(path, label)
        except OSError as err:
            print(f"warning: unreadable image {path}: {err}", file=sys.stderr)
    raise RuntimeError("no readable image in the dataset")


class FolderDataset(Dataset):
    def __init__(self, samples: list[tuple[Path, int]], image_size: int, train: bool, seed: int):
        from torchvision import transforms

        self.samples, self.seed, self.epoch, self.image_size, self.train = samples, seed, 0, image_size, train
        self.normalize = transforms.Compose([transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
        self.evaluation = transforms.Compose([transforms.Resize(int(image_size * 256 / 224)),
                                              transforms.CenterCrop(image_size)])

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        return first_readable(self.samples, index, lambda path, label: (self._transformed(path, index), label))

    def _transformed(self, path: Path, index: int) -> torch.Tensor:
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as F

        with Image.open(path) as image:
            if not self.train:
                return self.normalize(self.evaluation(image.convert("RGB")))
            crop = training_crop(image, self.seed, self.epoch, index)
            cropped = F.resized_crop(image.convert("RGB"), crop.top, crop.left, crop.height, crop.width,
                                     [self.image_size, self.image_size], InterpolationMode.BILINEAR, antialias=True)
            return self.normalize(F.hflip(cropped) if crop.flip else cropped)


class ResumableSampler(DistributedSampler):
    """DistributedSampler that can start its next pass at a given batch (resume mid-epoch)."""

    def __init__(self, *args, batch_size: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.batch_size, self.start_batch = batch_size, 0

    def __iter__(self):
        indices = list(super().__iter__())[self.start_batch * self.batch_size:]
        self.start_batch = 0
        return iter(indices)

    def __len__(self) -> int:
        return super().__len__() - self.start_batch * self.batch_size


def training_sampler(count: int, cfg, rank: int, size: int) -> ResumableSampler:
    """The order in which this rank reads the training samples, epoch by epoch: a shuffled, disjoint shard
    per rank (DistributedSampler seeded by --seed and the epoch), whole batches only."""
    return ResumableSampler(range(count), num_replicas=size, rank=rank, shuffle=True, seed=cfg.seed,
                            drop_last=True, batch_size=cfg.batch_size)


class PilBatches:
    """Training batches decoded and augmented by PIL/torchvision in `--workers` processes."""

    def __init__(self, samples: list[tuple[Path, int]], cfg, rank: int, size: int, pin_memory: bool):
        self.dataset = FolderDataset(samples, cfg.image_size, train=True, seed=cfg.seed)
        self.sampler = training_sampler(len(samples), cfg, rank, size)
        self.loader = DataLoader(self.dataset, batch_size=cfg.batch_size, sampler=self.sampler,
                                 num_workers=cfg.workers, pin_memory=pin_memory, drop_last=True,
                                 persistent_workers=False)  # workers re-fork per epoch and see dataset.epoch

    def epoch_batches(self, epoch: int, start_batch: int):
        self.sampler.set_epoch(epoch)
        self.dataset.epoch = epoch
        self.sampler.start_batch = start_batch
        return iter(self.loader)


class FolderData:
    def __init__(self, root: Path, cfg, rank: int, size: int, device: torch.device):
        if not root.is_dir():
            raise UsageError(f"--data {root}: no such folder (give an ImageNet-layout folder or 'synthetic')")
        classes, samples = scan(root, "train")
        if len(classes) > cfg.num_classes:
            raise UsageError(f"--data {root}: {len(classes)} classes, more than --num-classes {cfg.num_classes}")
        verify_images(samples, cfg.max_bad_images, cfg.seed)
        self.steps_per_epoch = len(samples) // size // cfg.batch_size
        if self.steps_per_epoch == 0:
            raise UsageError(f"--data {root}: {len(samples)} images are fewer than one global batch "
                             f"({cfg.batch_size} x {size} workers); lower --batch-size")
        if cfg.loader == "dali":
            from training.pytorch.dali import DaliBatches

            self.train = DaliBatches(samples, cfg, rank, size, device, self.steps_per_epoch)
        else:
            self.train = PilBatches(samples, cfg, rank, size, pin_memory=device.type == "cuda")
        # Evaluation runs once per epoch over a small split: PIL for both loaders.
        self.val = None
        if (root / "val").is_dir():
            _, val_samples = scan(root, "val")
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
