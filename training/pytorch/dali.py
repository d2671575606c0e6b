"""`--loader dali`: training batches decoded and augmented by NVIDIA DALI, on the GPU (nvJPEG) or on its CPU
backend where there is no GPU.

A PIL worker decodes a few hundred ImageNet JPEGs per second per core; a GPU trains ResNet50 on thousands.
DALI moves the decode, the crop, the resize and the normalisation onto the GPU. What it does not decide is
which image comes next and how it is cropped: Python worker processes (DALI's parallel external source) read
each file's bytes and header and draw its crop window and flip with the PIL path's own functions
(`training_sampler`, `training_crop`), so both loaders feed a rank the same images in the same order with the
same windows, and a run resumed mid-epoch sees exactly what an uninterrupted one would have seen.

DALI's rules this relies on (DALI 2.4 user guide, https://docs.nvidia.com/deeplearning/dali/user-guide/docs/):
- parallel external source, sample mode: the callback gets a SampleInfo and returns CPU arrays; its workers
  must not inherit a CUDA context, so they are started with "spawn" and the callback must pickle
  (examples/general/data_loading/parallel_external_source.html);
- decoders.image_slice takes the window as two positional inputs, anchor and shape, in pixels with
  normalized_anchor/normalized_shape False, ordered by axis_names ("WH"), and on device "mixed" decodes on the
  GPU (operations/nvidia.dali.fn.decoders.image_slice.html); jpeg_fancy_upsampling makes its chroma
  upsampling that of libjpeg-turbo, which PIL uses;
- device_id=None builds a CPU-only pipeline (every operator on "cpu").
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from training.config import dali_installed
from training.data.folder import MEAN, STD
from training.errors import UsageError
from training.pytorch.sampling import batches_per_epoch, first_readable, training_crop, training_sampler

OUTPUTS = ("images", "labels")


def require_installed() -> None:
    if not dali_installed():
        raise UsageError("--loader dali: NVIDIA DALI is not installed here (training/requirements-torch.txt pins "
                         "nvidia-dali-cuda130, the wheel for this CUDA 13 torch); install it or use --loader pil")


class SampleSource:
    """DALI's per-sample callback: sample number k of this loader (counted across epochs from where it
    started) -> (JPEG bytes, label, crop anchor (x, y), crop shape (w, h), flip). Runs in spawned workers."""

    def __init__(self, samples: list[tuple[Path, int]], cfg, rank: int, size: int, epoch: int, start_batch: int):
        # Each worker gets a pickled copy of the whole list (every epoch reshuffles over all of it): strings
        # pickle at a fraction of Path objects' size and time.
        self.samples, self.seed = [(str(path), label) for path, label in samples], cfg.seed
        self.sampler = training_sampler(len(samples), cfg, rank, size)
        # The loop's epoch, not the sampler's shard (up to a batch longer): the count runs on across epochs, so
        # an epoch of another length would start every later epoch at another sample than a resumed run does.
        self.per_epoch = batches_per_epoch(len(samples), size, cfg.batch_size) * cfg.batch_size
        self.first = epoch * self.per_epoch + start_batch * cfg.batch_size
        self._epoch, self._order = None, []

    def position(self, sample_number: int) -> tuple[int, int]:
        """(epoch, index into the dataset) of the loader's `sample_number`-th sample."""
        epoch, offset = divmod(self.first + sample_number, self.per_epoch)
        if epoch != self._epoch:
            self.sampler.set_epoch(epoch)
            self._epoch, self._order = epoch, list(iter(self.sampler))
        return epoch, self._order[offset]

    def __call__(self, info):
        epoch, index = self.position(info.idx_in_epoch)  # the source never ends an epoch: one running count

        def read(path: str, label: int):
            from PIL import Image

            with Image.open(path) as header:  # the header only: the window needs the image's size
                crop = training_crop(header, self.seed, epoch, index)
            return (np.fromfile(path, dtype=np.uint8), np.array(label, dtype=np.int64),
                    np.array([crop.left, crop.top], dtype=np.float32),
                    np.array([crop.width, crop.height], dtype=np.float32), np.array(crop.flip, dtype=np.int32))

        return first_readable(self.samples, index, read)


def build_pipeline(source: SampleSource, cfg, device: torch.device, channels_last: bool):
    from nvidia.dali import fn, pipeline_def, types

    gpu = device.type == "cuda"

    @pipeline_def(batch_size=cfg.batch_size, num_threads=max(1, cfg.workers),
                  device_id=device.index if gpu else None, seed=cfg.seed,
                  py_num_workers=max(1, cfg.workers), py_start_method="spawn")
    def training_pipeline():
        jpegs, labels, anchor, shape, flip = fn.external_source(source=source, num_outputs=5, batch=False,
                                                                parallel=True)
        images = fn.decoders.image_slice(jpegs, anchor, shape, device="mixed" if gpu else "cpu",
                                         output_type=types.RGB, normalized_anchor=False, normalized_shape=False,
                                         axis_names="WH", jpeg_fancy_upsampling=True)
        # torchvision's RandomResizedCrop: bilinear with antialiasing to the square training size
        images = fn.resize(images, resize_x=cfg.image_size, resize_y=cfg.image_size,
                           interp_type=types.INTERP_LINEAR, antialias=True)
        # HWC out of DALI is NCHW in channels-last memory once permuted: no transpose on the way to the model
        images = fn.crop_mirror_normalize(images, mirror=flip, dtype=types.FLOAT,
                                          mean=[255 * m for m in MEAN], std=[255 * s for s in STD],
                                          output_layout="HWC" if channels_last else "CHW")
        return images, labels.gpu() if gpu else labels  # on the device already: no copy in the training step

    pipeline = training_pipeline()
    pipeline.build()
    return pipeline


class DaliBatches:
    """Training batches from one DALI pipeline that runs on across epochs; a resume (or any call that does not
    continue where the last epoch ended) builds a new one starting at that epoch and batch."""

    def __init__(self, samples: list[tuple[Path, int]], cfg, rank: int, size: int, device: torch.device,
                 steps_per_epoch: int):
        require_installed()
        self.samples, self.cfg, self.rank, self.size, self.device = samples, cfg, rank, size, device
        self.steps_per_epoch = steps_per_epoch  # FolderData's: whole global batches
        self._iterator, self._next = None, None  # the pipeline's iterator and the (epoch, batch) it yields next

    def _start(self, epoch: int, start_batch: int) -> None:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator

        source = SampleSource(self.samples, self.cfg, self.rank, self.size, epoch, start_batch)
        pipeline = build_pipeline(source, self.cfg, self.device, bool(self.cfg.channels_last))
        self._iterator = DALIGenericIterator([pipeline], list(OUTPUTS))

    def epoch_batches(self, epoch: int, start_batch: int):
        if self._next != (epoch, start_batch):
            self._start(epoch, start_batch)
        for batch in range(start_batch, self.steps_per_epoch):
            self._next = (epoch, batch + 1) if batch + 1 < self.steps_per_epoch else (epoch + 1, 0)
            out = next(self._iterator)[0]
            images = out["images"]
            if self.cfg.channels_last:
                images = images.permute(0, 3, 1, 2)  # a view: NCHW shape, channels-last strides
            yield images, out["labels"].reshape(-1)
