"""PyTorch data: an ImageNet-layout folder with augmentation and a distributed sampler, or synthetic tensors.

Augmentation is seeded per (seed, epoch, sample), not per worker process, so a run resumed in the middle
of an epoch sees exactly the images and crops an uninterrupted run would have seen.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from training.errors import UsageError
from training.data.folder import MEAN, STD, scan, verify_images
from training.runner import synthetic_steps_per_epoch


class FolderDataset(Dataset):
    def __init__(self, samples: list[tuple[Path, int]], image_size: int, train: bool, seed: int):
        from torchvision import transforms

        self.samples, self.seed, self.epoch = samples, seed, 0
        normalize = [transforms.ToTensor(), transforms.Normalize(MEAN, STD)]
        self.transform = transforms.Compose(
            [transforms.RandomResizedCrop(image_size), transforms.RandomHorizontalFlip(), *normalize] if train else
            [transforms.Resize(int(image_size * 256 / 224)), transforms.CenterCrop(image_size), *normalize])

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        torch.manual_seed(hash((self.seed, self.epoch, index)) & 0x7FFF_FFFF)
        for offset in range(len(self.samples)):
            path, label = self.samples[(index + offset) % len(self.samples)]
            try:
                with Image.open(path) as image:
                    return self.transform(image.convert("RGB")), label
            except OSError as err:  # a bad file among good ones: use the next, say so
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


class FolderData:
    def __init__(self, root: Path, cfg, rank: int, size: int, pin_memory: bool):
        if not root.is_dir():
            raise UsageError(f"--data {root}: no such folder (give an ImageNet-layout folder or 'synthetic')")
        classes, samples = scan(root, "train")
        if len(classes) > cfg.num_classes:
            raise UsageError(f"--data {root}: {len(classes)} classes, more than --num-classes {cfg.num_classes}")
        verify_images(samples, cfg.max_bad_images, cfg.seed)
        self.dataset = FolderDataset(samples, cfg.image_size, train=True, seed=cfg.seed)
        self.sampler = ResumableSampler(self.dataset, num_replicas=size, rank=rank, shuffle=True, seed=cfg.seed,
                                        drop_last=True, batch_size=cfg.batch_size)
        self.loader = DataLoader(self.dataset, batch_size=cfg.batch_size, sampler=self.sampler,
                                 num_workers=cfg.workers, pin_memory=pin_memory, drop_last=True,
                                 persistent_workers=False)  # workers re-fork per epoch and see dataset.epoch
        self.steps_per_epoch = len(self.dataset) // size // cfg.batch_size
        if self.steps_per_epoch == 0:
            raise UsageError(f"--data {root}: {len(self.dataset)} images are fewer than one global batch "
                             f"({cfg.batch_size} x {size} workers); lower --batch-size")
        self.val = None
        if (root / "val").is_dir():
            _, val_samples = scan(root, "val")
            val_set = FolderDataset(val_samples, cfg.image_size, train=False, seed=cfg.seed)
            val_sampler = DistributedSampler(val_set, num_replicas=size, rank=rank, shuffle=False)
            self.val = DataLoader(val_set, batch_size=cfg.batch_size, sampler=val_sampler, num_workers=cfg.workers)

    def epoch_batches(self, epoch: int, start_batch: int):
        self.sampler.set_epoch(epoch)
        self.dataset.epoch = epoch
        self.sampler.start_batch = start_batch
        return iter(self.loader)


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
