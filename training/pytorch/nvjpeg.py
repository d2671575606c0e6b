"""`--loader nvjpeg`: training batches decoded by nvJPEG on the GPU through torchvision, then cropped, resized,
flipped and normalised there. It needs nothing beyond torch and torchvision, so it runs wherever training runs
(DALI's ~424 MB wheel cannot travel everywhere).

Work is split as in the DALI loader: DataLoader worker processes read each file's bytes and header and draw its
crop window and flip with the PIL path's own functions (training/pytorch/sampling.py: `training_sampler`,
`training_crop`), so every loader feeds a rank the same images in the same order with the same windows, and a run
resumed mid-epoch sees what an uninterrupted one would have seen. The training process decodes each batch with
one call on `device` and augments it there: on a GPU the CPU cores only read files.

torchvision's API this relies on, `torchvision.io.decode_jpeg(input, mode, device)`
(https://pytorch.org/vision/stable/generated/torchvision.io.decode_jpeg.html):
- `input` a list of 1-D uint8 CPU tensors (the encoded files) is decoded as one batch, which on CUDA is several
  times faster than one call per image; lists are accepted since torchvision 0.19 (pytorch/vision PR 8496,
  "GPU jpeg decoder: add batch support"), so both the device image's torchvision 0.26 and this repository's
  0.29 have it (checked in the 0.26 wheel's torchvision/io/image.py: the same signature, a list on CUDA goes to
  `torch.ops.image.decode_jpegs_cuda`); the inputs stay on the CPU whatever `device` says;
- `device="cuda"` decodes with nvJPEG, `device="cpu"` with libjpeg-turbo (the library PIL uses), which is what
  the CPU tests run; `mode=ImageReadMode.RGB` makes grayscale files 3-channel, as PIL's convert("RGB") does;
- one bad image fails the whole call ("does not return partial results in case of an error"), so a failed
  batch is decoded again image by image to find it.
torchvision 0.29 deprecates its image codecs for TorchCodec (a DeprecationWarning per call); TorchCodec is not in
the device image, so this module silences that one warning and keeps torchvision's API.
"""
from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from training.data.folder import MEAN, STD
from training.pytorch.sampling import Crop, first_readable, training_crop, training_sampler

# What nvJPEG takes as is; anything else (ImageNet has a PNG and some CMYK files named .JPEG) is decoded by PIL in
# the worker, as the PIL loader decodes every file, and travels as pixels.
NVJPEG_MODES = ("RGB", "L")


@dataclass
class Sample:
    """One training sample as a worker hands it over: `data` is the file's bytes (1-D) or, for a file nvJPEG
    cannot take, its pixels (3 x H x W uint8)."""
    data: torch.Tensor
    label: int
    crop: Crop


def _pixels(image) -> torch.Tensor:
    return torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1).contiguous()


def read_sample(path: str, label: int, seed: int, epoch: int, index: int, encoded: bool = True) -> Sample:
    """Sample `index` of `epoch` from `path`: its bytes and the crop drawn from its header, or (not `encoded`, or
    not a JPEG file nvJPEG decodes) its pixels decoded by PIL. Raises OSError on a file PIL cannot read."""
    from PIL import Image

    with Image.open(path) as image:  # the header only, unless PIL has to decode it
        crop = training_crop(image, seed, epoch, index)
        if not encoded or image.format != "JPEG" or image.mode not in NVJPEG_MODES:
            return Sample(_pixels(image), label, crop)
    return Sample(torch.from_numpy(np.fromfile(path, dtype=np.uint8)), label, crop)


class EncodedDataset(Dataset):
    """Dataset index -> Sample, in DataLoader workers: file reading, no decoding."""

    def __init__(self, samples: list[tuple[Path, int]], seed: int):
        self.samples, self.seed, self.epoch = [(str(path), label) for path, label in samples], seed, 0

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[int, Sample]:
        return index, first_readable(self.samples, index,
                                     lambda path, label: read_sample(path, label, self.seed, self.epoch, index))


def _as_list(batch: list) -> list:
    return batch  # the files differ in length: no stacking until they are decoded


def decode_jpeg(data: torch.Tensor | list[torch.Tensor], device: torch.device):
    from torchvision.io import ImageReadMode, decode_jpeg

    with warnings.catch_warnings():  # torchvision 0.29's deprecation, once per call (see the module's docstring)
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="torchvision")
        return decode_jpeg(data, mode=ImageReadMode.RGB, device=device)


def decode(samples: list[Sample], device: torch.device) -> list[torch.Tensor | None]:
    """Each sample's image as 3 x H x W uint8 on `device`: the encoded ones in one batched decode, the rest moved
    there. None for a file nvJPEG (or libjpeg-turbo) refuses."""
    images: list[torch.Tensor | None] = [s.data.to(device) if s.data.dim() == 3 else None for s in samples]
    encoded = [k for k, s in enumerate(samples) if s.data.dim() == 1]
    if not encoded:
        return images
    try:
        decoded = decode_jpeg([samples[k].data for k in encoded], device)
    except RuntimeError:  # one bad file fails the batch: find it
        decoded = []
        for k in encoded:
            try:
                decoded.append(decode_jpeg(samples[k].data, device))
            except RuntimeError:
                decoded.append(None)
    for k, image in zip(encoded, decoded):
        images[k] = image
    return images


def resized_crops(images: list[torch.Tensor], crops: list[Crop], size: int, channels_last: bool) -> torch.Tensor:
    """The PIL loader's augmentation on the images' device: each crop window resized to `size` x `size` (bilinear
    with antialiasing, as torchvision's resized_crop does on a PIL image), flipped where drawn, normalised by
    ImageNet's mean and std; one float32 N x 3 x size x size batch."""
    device = images[0].device
    out = torch.empty(len(images), 3, size, size, device=device,
                      memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    for k, (image, crop) in enumerate(zip(images, crops)):
        window = image[:, crop.top:crop.top + crop.height, crop.left:crop.left + crop.width]
        resized = F.interpolate(window.unsqueeze(0).float(), size=(size, size), mode="bilinear", antialias=True,
                                align_corners=False)[0].round_()  # PIL resizes to uint8
        out[k] = resized.flip(-1) if crop.flip else resized
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255
    return out.sub_(mean).div_(std)


class NvjpegBatches:
    """Training batches: files read by `--workers` processes, decoded and augmented on `device` (nvJPEG on a
    GPU; libjpeg-turbo in the training process on CPU, where this loader is for tests, not speed)."""

    def __init__(self, samples: list[tuple[Path, int]], cfg, rank: int, size: int, device: torch.device):
        self.device, self.image_size, self.channels_last = device, cfg.image_size, bool(cfg.channels_last)
        self.dataset = EncodedDataset(samples, cfg.seed)
        self.sampler = training_sampler(len(samples), cfg, rank, size)
        self.loader = DataLoader(self.dataset, batch_size=cfg.batch_size, sampler=self.sampler,
                                 num_workers=cfg.workers, collate_fn=_as_list, drop_last=True,
                                 persistent_workers=False)  # workers re-fork per epoch and see dataset.epoch

    def epoch_batches(self, epoch: int, start_batch: int):
        self.sampler.set_epoch(epoch)
        self.dataset.epoch = epoch
        self.sampler.start_batch = start_batch
        for batch in self.loader:
            yield self.augmented(batch)

    def augmented(self, batch: list[tuple[int, Sample]]) -> tuple[torch.Tensor, torch.Tensor]:
        samples = [sample for _, sample in batch]
        images = decode(samples, self.device)
        for k, image in enumerate(images):
            if image is None:  # a file only a full decode shows to be broken: PIL's turn, as the PIL loader has
                index = batch[k][0]
                print(f"warning: nvJPEG cannot decode {self.dataset.samples[index][0]}; decoding with PIL",
                      file=sys.stderr)
                samples[k] = first_readable(self.dataset.samples, index, lambda path, label: read_sample(
                    path, label, self.dataset.seed, self.dataset.epoch, index, encoded=False))
                images[k] = samples[k].data.to(self.device)
        labels = torch.tensor([sample.label for sample in samples], dtype=torch.int64)
        return resized_crops(images, [s.crop for s in samples], self.image_size, self.channels_last), labels
