"""`--loader nvjpeg`: training batches decoded by nvJPEG on the GPU through torchvision, then cropped, resized,
flipped and normalised there. It needs nothing beyond torch and torchvision, so it runs wherever training runs
(DALI's ~424 MB wheel cannot travel everywhere). A sharded dataset's images come from their shards
(training/data/shard_samples.py) instead of their files; everything after the read is the same.

Work is split as in the DALI loader: DataLoader worker processes read each file's bytes and header and draw its
crop window and flip with the PIL path's own functions (training/pytorch/sampling.py: `training_sampler`,
`training_crop`), so every loader feeds a rank the same images in the same order with the same windows, and a run
resumed mid-epoch sees what an uninterrupted one would have seen. The training process decodes each batch with
one call on `device` and augments it there: on a GPU the CPU cores only read files.

What the first GPU measurement showed (H100, 256 images of ImageNet size a batch; figures in issue 27's note) and
shaped this module: torchvision's batched decode runs at ~11,000 img/s and the crops at ~11,700 img/s when each
image was resized by its own `interpolate` (seven kernel launches an image), but both ran in the training thread
between steps, so the model waited for them: 2,160 img/s against 5,000 on synthetic data. So now
- a worker hands over a batch as one tensor of the files end to end (one shared-memory handle a batch, not one a
  file), with each file's length, label and crop;
- the crops are resized by two batched matrix products with the antialiased bilinear weights torch and PIL use
  (`resize_weights`), a few launches per group of similar-sized crops (`crop_groups`) instead of seven an image;
- a thread decodes and augments the next batches on its own CUDA stream while the model trains on this one
  (`prefetched`), and hands each over with an event the training stream waits on.

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

import contextlib
import dataclasses
import queue
import sys
import threading
import warnings
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from training.data.folder import MEAN, STD
from training.data.shard_samples import ShardMember, ShardSamples
from training.pytorch.sampling import Crop, EpochTagged, first_readable, training_crop, training_sampler

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


def read_sample(path: str | ShardMember, label: int, seed: int, epoch: int, index: int,
                encoded: bool = True) -> Sample:
    """Sample `index` of `epoch` from `path` (a file, or a sharded dataset's ShardMember: the image's bytes read
    from its shard): its bytes and the crop drawn from its header, or (not `encoded`, or not a JPEG file nvJPEG
    decodes) its pixels decoded by PIL. Raises OSError on a file PIL cannot read."""
    from PIL import Image

    with Image.open(path) as image:  # the header only, unless PIL has to decode it
        crop = training_crop(image, seed, epoch, index)
        if not encoded or image.format != "JPEG" or image.mode not in NVJPEG_MODES:
            return Sample(_pixels(image), label, crop)
    if isinstance(path, ShardMember):  # in memory already: one copy into a tensor of its own
        return Sample(torch.frombuffer(bytearray(path.getbuffer()), dtype=torch.uint8), label, crop)
    return Sample(torch.from_numpy(np.fromfile(path, dtype=np.uint8)), label, crop)


class EncodedDataset(Dataset):
    """Dataset index -> Sample, in DataLoader workers: file reading, no decoding."""

    def __init__(self, samples: list[tuple[Path, int]] | ShardSamples, seed: int):
        # A folder's paths as strings (they pickle at a fraction of Path objects' size); ShardSamples as it is
        self.samples = samples if isinstance(samples, ShardSamples) else [(str(path), label) for path, label in samples]
        self.seed = seed

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key: tuple[int, int]) -> tuple[tuple[int, int], Sample]:
        """`key`: (epoch, index) of a training sample (sampling.EpochTagged)."""
        epoch, index = key
        return key, first_readable(self.samples, index,
                                   lambda path, label: read_sample(path, label, self.seed, epoch, index))


@dataclass
class EncodedBatch:
    """A batch as a worker hands it over: the encoded files end to end in one tensor (DataLoader moves each
    tensor through its own shared-memory segment, so one a batch, not one a file), the pixels of files nvJPEG
    cannot take, and every sample's dataset index, label and crop, in batch order."""
    indices: list[int]
    labels: list[int]
    crops: list[Crop]
    encoded: torch.Tensor  # 1-D uint8: the JPEG files of the batch's encoded samples, in batch order
    lengths: list[int]  # their lengths in bytes
    pixels: dict[int, torch.Tensor]  # batch position -> 3 x H x W uint8, for the others

    def pin_memory(self) -> EncodedBatch:
        """Called by DataLoader's pin-memory thread (it pins any batch object with this method): the files in
        page-locked memory. How nvJPEG reads them is its own affair (torchvision hands it host pointers), but
        measured on an H100 a batch of 256 decoded in 16.7 ms from page-locked memory and 23.8 ms without."""
        return dataclasses.replace(self, encoded=self.encoded.pin_memory())

    def samples(self) -> list[Sample]:
        files = iter(torch.split(self.encoded, self.lengths))
        return [Sample(self.pixels[k] if k in self.pixels else next(files), label, crop)
                for k, (label, crop) in enumerate(zip(self.labels, self.crops))]


def collate(batch: list[tuple[tuple[int, int], Sample]]) -> EncodedBatch:
    """In the worker: ((epoch, index), Sample) pairs -> one EncodedBatch."""
    encoded = [sample.data for _, sample in batch if sample.data.dim() == 1]
    return EncodedBatch(indices=[index for index, _ in batch], labels=[sample.label for _, sample in batch],
                        crops=[sample.crop for _, sample in batch],
                        encoded=torch.cat(encoded) if encoded else torch.empty(0, dtype=torch.uint8),
                        lengths=[len(data) for data in encoded],
                        pixels={k: sample.data for k, (_, sample) in enumerate(batch) if sample.data.dim() == 3})


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


def resize_weights(lengths: torch.Tensor, size: int, padded: int) -> torch.Tensor:
    """N x size x padded: row i of matrix n weighs input pixels 0..lengths[n]-1 into output pixel i, as torch's
    antialiased bilinear resize does (`interpolate(..., mode="bilinear", antialias=True, align_corners=False)`:
    aten/src/ATen/native/cpu/UpSampleKernel.cpp `HelperInterpBase::_compute_indices_min_size_weights_aa`, on
    CUDA `upsample_antialias::_compute_weights_span` in aten/src/ATen/native/cuda/UpSample.cuh, both PIL's
    `precompute_coeffs` in libImaging/Resample.c): a triangle filter centred at scale x (i + 0.5), widened by the
    scale when shrinking, over [max(int(centre - support + 0.5), 0), min(int(centre + support + 0.5), length)),
    normalised to sum 1. In float64, as PIL computes them (ATen's float32 differs by < 0.01 of an 8-bit level).
    Columns at or past a sample's length are zero, so a crop padded to the batch's largest is resized alone."""
    scale = (lengths.double() / size).view(-1, 1, 1)
    centre = scale * (torch.arange(size, dtype=torch.float64, device=lengths.device).view(1, -1, 1) + 0.5)
    support = scale.clamp(min=1.0)  # the bilinear filter's support (1) x the scale when shrinking
    # max(int(x), 0): int() truncates towards zero, floor() does not, but both are <= 0 exactly when x < 1
    first = (centre - support + 0.5).floor().clamp(min=0)
    end = torch.minimum((centre + support + 0.5).floor(), lengths.double().view(-1, 1, 1))
    pixel = torch.arange(padded, dtype=torch.float64, device=lengths.device).view(1, 1, -1)
    weights = (1 - ((pixel - centre + 0.5) / support).abs()).clamp_(min=0)
    weights.mul_((pixel >= first) & (pixel < end))
    return (weights / weights.sum(-1, keepdim=True)).float()


# Batches decoded ahead of the model: the one in use overlaps the next one's decoding, and one more rides out a
# slow batch. (The producer holds one more while it waits to hand it over.)
PREFETCH_DEPTH = 2

# The most padded pixels one group of crops takes at once: N x (H + size) x (W + size) bounds the windows and both
# weight matrices. A batch of 256 ImageNet crops (at most ~500 x 500) is one or two groups; a multi-megapixel crop
# (ImageNet has some) goes in a group of its own instead of padding the whole batch to its size.
GROUP_PIXELS = 48 * 2**20


def crop_groups(crops: list[Crop], size: int) -> list[list[int]]:
    """Batch positions in groups, by window area, each group's padded size within GROUP_PIXELS (at least one
    crop a group)."""
    groups: list[list[int]] = []
    tallest = widest = 0
    for k in sorted(range(len(crops)), key=lambda k: crops[k].height * crops[k].width):
        height, width = max(tallest, crops[k].height), max(widest, crops[k].width)
        if groups and (len(groups[-1]) + 1) * (height + size) * (width + size) <= GROUP_PIXELS:
            groups[-1].append(k)
        else:
            groups.append([k])
            height, width = crops[k].height, crops[k].width
        tallest, widest = height, width
    return groups


def resized_crops(images: list[torch.Tensor], crops: list[Crop], size: int, channels_last: bool) -> torch.Tensor:
    """The PIL loader's augmentation on the images' device: each crop window resized to `size` x `size`
    (antialiased bilinear, rounded to 8 bits as PIL's resize is), flipped where drawn, normalised by ImageNet's
    mean and std; one float32 N x 3 x size x size batch. The windows of a group of crops (`crop_groups`) are
    copied into one zero-padded tensor and resized by two batched products, rows then columns, with
    `resize_weights`: a few launches a group instead of several an image."""
    device = images[0].device
    # On a GPU the products run in float16 on the tensor cores: the float32 ones took ~3 ms of an H100 a batch,
    # time the model's step waits for. 8-bit pixels are exact in float16, the weights keep 11 significant bits,
    # and the products' outputs are float16 too: about one output pixel in twenty lands one 8-bit level from the
    # float64 result (an emulation on photo-like images), under nvJPEG's own differences from libjpeg-turbo that
    # the GPU test bounds. On CPU (the tests) float32.
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    out = torch.empty(len(images), 3, size, size, device=device)
    for group in crop_groups(crops, size):
        chosen = [crops[k] for k in group]
        windows = torch.zeros(len(group), 3, max(c.height for c in chosen), max(c.width for c in chosen),
                              dtype=dtype, device=device)
        for slot, (k, crop) in enumerate(zip(group, chosen)):
            windows[slot, :, :crop.height, :crop.width] = images[k][:, crop.top:crop.top + crop.height,
                                                                    crop.left:crop.left + crop.width]
        heights = torch.tensor([c.height for c in chosen], device=device)
        widths = torch.tensor([c.width for c in chosen], device=device)
        rows = resize_weights(heights, size, windows.shape[2]).to(dtype)  # n x size x H
        columns = resize_weights(widths, size, windows.shape[3]).to(dtype)  # n x size x W
        flips = torch.tensor([c.flip for c in chosen], device=device).view(-1, 1, 1)
        columns = torch.where(flips, columns.flip(1), columns)  # a mirrored image: output column i reads size-1-i's
        resized = rows.unsqueeze(1) @ (windows @ columns.transpose(1, 2).unsqueeze(1))
        out[torch.tensor(group, device=device)] = resized.float().round_()
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255
    out.sub_(mean).div_(std)
    return out.contiguous(memory_format=torch.channels_last) if channels_last else out


def prefetched(source: Generator[tuple[torch.Tensor, torch.Tensor], None, None], device: torch.device,
               depth: int = PREFETCH_DEPTH) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """`source` run `depth` batches ahead in a thread, on its own CUDA stream on a GPU, so decoding and
    augmenting the next batches overlaps the model's step on this one (torch releases the GIL inside its
    operators). Each batch is handed over with an event the consuming stream waits on, and `record_stream` keeps
    the allocator from reusing its memory before that stream is done with it (CUDA semantics, "Use of multiple
    streams": https://pytorch.org/docs/stable/notes/cuda.html#cuda-streams). Order and errors are the
    producer's; closing this generator stops the thread after the batch in hand and closes `source`.
    `source` is made by the caller, in its own thread: a DataLoader forks its workers when its iterator is made,
    and forking from the main thread, not this one, keeps that as it was before the thread existed."""
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    handed: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                handed.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            with torch.cuda.stream(stream) if stream else contextlib.nullcontext():
                for images, labels in source:
                    event = torch.cuda.Event() if stream else None
                    if event:
                        event.record(stream)
                    if not put((images, labels, event)):
                        return
            put(None)
        except BaseException as err:  # handed to the consumer, raised there
            put(err)
        finally:
            source.close()  # the DataLoader's workers stop with it

    thread = threading.Thread(target=produce, name="nvjpeg-prefetch", daemon=True)
    thread.start()
    try:
        while (item := handed.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            images, labels, event = item
            if event:
                consumer = torch.cuda.current_stream(device)
                consumer.wait_event(event)
                images.record_stream(consumer)
            yield images, labels
    finally:
        stop.set()
        thread.join()


class NvjpegBatches:
    """Training batches: files read by `--workers` processes, decoded and augmented on `device` (nvJPEG on a
    GPU; libjpeg-turbo in the training process on CPU, where this loader is for tests, not speed)."""

    def __init__(self, samples: list[tuple[Path, int]] | ShardSamples, cfg, rank: int, size: int,
                 device: torch.device):
        self.device, self.image_size, self.channels_last = device, cfg.image_size, bool(cfg.channels_last)
        self.dataset = EncodedDataset(samples, cfg.seed)
        self.sampler = training_sampler(len(samples), cfg, rank, size)
        self.loader = DataLoader(self.dataset, batch_size=cfg.batch_size, sampler=EpochTagged(self.sampler),
                                 num_workers=cfg.workers, collate_fn=collate, drop_last=True,
                                 pin_memory=device.type == "cuda",
                                 persistent_workers=cfg.workers > 0)  # the epoch travels in each key

    def epoch_batches(self, epoch: int, start_batch: int):
        self.sampler.set_epoch(epoch)
        self.sampler.start_batch = start_batch
        # The generator's first iterable, iter(self.loader), is made here: the workers fork in this thread.
        return prefetched((self.augmented(batch) for batch in self.loader), self.device)

    def augmented(self, batch: EncodedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        samples = batch.samples()
        images = decode(samples, self.device)
        for k, image in enumerate(images):
            if image is None:  # a file only a full decode shows to be broken: PIL's turn, as the PIL loader has
                epoch, index = batch.indices[k]
                print(f"warning: nvJPEG cannot decode {self.dataset.samples[index][0]}; decoding with PIL",
                      file=sys.stderr)
                samples[k] = first_readable(self.dataset.samples, index, lambda path, label: read_sample(
                    path, label, self.dataset.seed, epoch, index, encoded=False))
                images[k] = samples[k].data.to(self.device)
        labels = torch.tensor([sample.label for sample in samples], dtype=torch.int64)
        return resized_crops(images, [s.crop for s in samples], self.image_size, self.channels_last), labels
