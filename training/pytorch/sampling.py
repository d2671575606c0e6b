"""Which training image a rank reads at each step, and its random-resized crop and flip: decided here, per
(seed, epoch, sample) and not per worker process, for every decoder (`--loader pil`: training/pytorch/data.py;
`dali`: training/pytorch/dali.py; `nvjpeg`: training/pytorch/nvjpeg.py). So a run resumed in the middle of an
epoch sees exactly the images and crops an uninterrupted run would have seen, and the loaders crop alike.

The loaders import this module and nothing of each other's (data.py picks a loader and imports it lazily), so
the import graph stays acyclic.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image
from torch.utils.data import DistributedSampler

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


class EpochTagged:
    """A training sampler's order with the epoch beside each index: (epoch, index). The dataset reads the epoch
    from its key rather than from an attribute set before each epoch, so a DataLoader's workers can persist across
    epochs (`persistent_workers`: forked once, not once an epoch, which on a small dataset of a few batches an epoch
    is a fork of every worker every few steps) and still draw each epoch's crops. A DataLoader iterates its
    sampler in the training process and sends the keys to the workers, so the epoch is the sampler's as set now."""

    def __init__(self, sampler: ResumableSampler):
        self.sampler = sampler

    def __iter__(self):
        epoch = self.sampler.epoch
        return ((epoch, index) for index in self.sampler)

    def __len__(self) -> int:
        return len(self.sampler)


def batches_per_epoch(count: int, size: int, batch_size: int) -> int:
    """The training loop's epoch on each of `size` ranks: whole batches of its shard (DistributedSampler's
    drop_last shard of count // size samples, less the part batch). Every loader's epoch is this many batches, so
    that step s is the same sample wherever a run started: the sampler's shard alone is up to a batch longer
    (ImageNet on 16 ranks at 192: 80,072 samples, the loop's 417 x 192 = 80,064)."""
    return count // size // batch_size


def training_sampler(count: int, cfg, rank: int, size: int) -> ResumableSampler:
    """The order in which this rank reads the training samples, epoch by epoch: a shuffled, disjoint shard
    per rank (DistributedSampler seeded by --seed and the epoch), whole batches only."""
    return ResumableSampler(range(count), num_replicas=size, rank=rank, shuffle=True, seed=cfg.seed,
                            drop_last=True, batch_size=cfg.batch_size)
