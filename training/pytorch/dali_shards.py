"""`--loader dali` on a sharded dataset: DALI's own webdataset reader over the node-local shards and the GPU's
hardware JPEG decoder, configured as NVIDIA configures its MLPerf ResNet-50 on H100, the recipe that feeds 8 GPUs a
node at ~7,150 img/s each end to end.

NVIDIA's MLPerf Training v4.0 ResNet submission (github.com/mlcommons/training_results_v4.0, folder
NVIDIA/benchmarks/resnet/implementations/eos_ngc24.04_mxnet): `config_DGXH100.sh` sets DALI_THREADS=6,
DALI_PREFETCH_QUEUE=5, DALI_HW_DECODER_LOAD=0.99 and DALI_NVJPEG_MEMPADDING=256 (MiB); `common/dali.py`
(HybridTrainPipe) builds one pipeline per GPU with `shard_id` = the GPU's global index and `num_shards` = the GPUs,
`random_shuffle=True`, decodes with `fn.decoders.image(device="mixed", hw_decoder_load=..., device_memory_padding=
host_memory_padding=256 MiB)`, crops with `fn.random_resized_crop` and ends with `fn.crop_mirror_normalize(dtype=
FLOAT16, output_layout=NHWC, pad_output=True)` (4 channels, because its MXNet ResNet's first convolution takes 4).
What this module takes, and what not:
- the reader is `fn.readers.webdataset` over the shards with the .idx files training/data/shards.py writes (MLPerf
  reads RecordIO; the sharding, shuffling and padding arguments are the loaders' common ones);
- 3 channels, not 4: torchvision's ResNet-50 (training/pytorch/loop.py `_build_model`) has a 3-channel first
  convolution, which checkpoints, --init-from/--pretrained weights and the ONNX export share; a 4th, zero channel
  would need a 4-channel conv1 everywhere. Output is NHWC (channels-last, what the model runs in on a GPU) and
  fp16 under an fp16/bf16 autocast (half the bytes of fp32; autocast casts it on), fp32 otherwise;
- no decoded-image cache (MLPerf's DALI_CACHE_SIZE): it needs `stick_to_shard`, one fixed slice per GPU for the
  whole run, which NVIDIA's docs say "might affect accuracy"; a node-local copy makes re-reading cheap.

Threads and prefetch, sized for ND H100 v5 (8 GPUs, 96 vCPUs; `dali_threads`): 96 / 8 = 12 cores a rank, of which
the rank's own Python thread and Horovod's/NCCL's take ~2; MLPerf's 6 DALI threads fit with room to spare, and
with 0.99 of the JPEG work on the hardware decoder the threads only parse headers, run the 1% of Huffman decoding
and copy, so more would idle. Prefetch 5 batches: at batch 192 a batch out is 192 x 224 x 224 x 3 fp16 = 58 MB of
GPU memory, 0.3 GB for 5, and it rides out the slow batches (a shard boundary, a batch of very large images) that a
depth of 2 (DALI's default) passes on to the step.

DALI's rules this relies on (the loader's source, dali/operators/reader/loader/loader.h and loader.cc, and
docs/advanced_topics_sharding.rst, NVIDIA/DALI):
- `num_shards` W cuts the concatenated samples (the `paths` in order, each tar in file order) into W contiguous
  slices, slice s starting at N x s // W; each epoch a pipeline returns ceil(N / W) samples (with `pad_last_batch`,
  the last sample repeated to that count and then to whole batches: every pipeline the same number of batches);
- without `stick_to_shard` a pipeline moves to the next slice after each epoch: rank r reads slice (r + e) mod W in
  its epoch e, so over W epochs every rank reads every slice, and each epoch the slices are a partition;
- `random_shuffle` picks each sample at random from a buffer of `initial_fill` read ahead, within the epoch's slice.

Epoch and resume semantics (the training loop's epoch is the manifest's count // world // batch whole batches,
as for every loader, `batches_per_epoch`): a rank takes that many batches of its pipeline's epoch and discards the
rest of it (0 or 1 batch: the part one, padded), so each epoch trains on a random selection of all but at most
one batch of samples of its slice. One pipeline runs on across epochs. A resume at (epoch e, batch b) starts a
new pipeline on e's slice (`shard_id` (rank + e) mod W), so the resumed epoch's remaining batches are drawn from
the slice an uninterrupted run was reading, in a new order (an image of the slice may be seen twice in that epoch,
another not at all), and from epoch e + 1 on every rank reads the slice an uninterrupted run would; the order
within a slice, DALI's, is not reproduced (the PIL and nvjpeg loaders reproduce theirs exactly).
"""
from __future__ import annotations

import math
from pathlib import Path

import torch

from training.data import shards
from training.data.folder import MEAN, STD
from training.metrics import usable_cores
from training.pytorch.dali import require_installed
from training.pytorch.sampling import CROP_AREA, CROP_RATIO

# NVIDIA's MLPerf Training v4.0 ResNet-50 on DGX H100 (config_DGXH100.sh, see the module's docstring)
HW_DECODER_LOAD = 0.99  # DALI's default is 0.65: the rest decoded by CPU threads
THREADS = 6  # per GPU
PREFETCH = 5  # batches
NVJPEG_PADDING = 256 * 2**20  # bytes, device and host (DALI's defaults: 16 MiB and 8 MiB)
RESERVED_CORES = 2  # per rank, besides DALI's threads: the training thread, Horovod's and NCCL's
INITIAL_FILL = 1024  # samples in the shuffle buffer (DALI's default; the shards are written shuffled already)
IMAGE_EXTENSIONS = "jpg;jpeg;png"  # shards.py's image members (extension lowercased); one reader output
DRAIN_MAX = 2  # batches left in a pipeline's epoch that are read and dropped rather than the pipeline rebuilt
OUTPUTS = ("images", "labels")


def dali_threads(cores: int, gpus: int) -> int:
    """DALI's CPU threads per pipeline (one a GPU): MLPerf's 6, or fewer where a rank's share of the cores,
    less RESERVED_CORES, is smaller (at least 1)."""
    return max(1, min(THREADS, cores // max(1, gpus) - RESERVED_CORES))


def batches_per_pipeline_epoch(count: int, world: int, batch: int) -> int:
    """Batches in one epoch of a DALI pipeline with pad_last_batch: ceil(ceil(N / W) / B) (loader.cc num_samples,
    loader.h ShouldPadBatch), one more than the training loop's N // W // B when the slice ends in a part batch."""
    return math.ceil(math.ceil(count / world) / batch)


def reader_kwargs(root: Path, dataset: shards.ShardedDataset, split: str, rank: int, world: int, epoch: int,
                  seed: int) -> dict:
    """fn.readers.webdataset's arguments for `rank` starting at training epoch `epoch`."""
    entries = dataset.shards[split]
    return {"paths": [str(root / s.name) for s in entries], "index_paths": [str(root / s.index) for s in entries],
            "ext": [IMAGE_EXTENSIONS, "cls"], "missing_component_behavior": "error",
            "shard_id": (rank + epoch) % world, "num_shards": world, "stick_to_shard": False,
            "pad_last_batch": True, "random_shuffle": True, "initial_fill": INITIAL_FILL, "seed": seed,
            "name": "Reader"}


def decoder_kwargs(gpu: bool) -> dict:
    """fn.decoders.image's arguments: on a GPU the mixed backend, 0.99 of the JPEGs on the hardware decoder."""
    from nvidia.dali import types

    if not gpu:
        return {"device": "cpu", "output_type": types.RGB}
    return {"device": "mixed", "output_type": types.RGB, "hw_decoder_load": HW_DECODER_LOAD,
            "device_memory_padding": NVJPEG_PADDING, "host_memory_padding": NVJPEG_PADDING}


def crop_kwargs(image_size: int) -> dict:
    """fn.random_resized_crop's: torchvision's RandomResizedCrop ranges (the PIL loader's), bilinear, antialiased."""
    from nvidia.dali import types

    return {"size": [image_size, image_size], "random_area": list(CROP_AREA), "random_aspect_ratio": list(CROP_RATIO),
            "interp_type": types.INTERP_LINEAR, "antialias": True}


def normalize_kwargs(precision: str, channels_last: bool) -> dict:
    """fn.crop_mirror_normalize's: ImageNet's mean and std, fp16 under an fp16/bf16 autocast, NHWC when the model
    runs channels-last; 3 channels (no pad_output: the model's first convolution takes 3)."""
    from nvidia.dali import types

    return {"dtype": types.FLOAT16 if precision in ("fp16", "bf16") else types.FLOAT,
            "output_layout": "HWC" if channels_last else "CHW", "pad_output": False,
            "mean": [255 * m for m in MEAN], "std": [255 * s for s in STD]}


def pipeline_kwargs(batch_size: int, device: torch.device, seed: int, cores: int, gpus: int) -> dict:
    gpu = device.type == "cuda"
    return {"batch_size": batch_size, "num_threads": dali_threads(cores, gpus),
            "device_id": device.index if gpu else None, "seed": seed, "prefetch_queue_depth": PREFETCH}


def ascii_labels(padded: torch.Tensor) -> torch.Tensor:
    """N x L uint8 .cls members (ASCII decimal, zero-padded at the end to the batch's longest) -> N int64."""
    digits = padded.long() - ord("0")
    is_digit = (digits >= 0) & (digits <= 9)
    value = torch.zeros(padded.shape[0], dtype=torch.int64, device=padded.device)
    for column in range(padded.shape[1]):
        value = torch.where(is_digit[:, column], value * 10 + digits[:, column], value)
    return value


def build_pipeline(root: Path, dataset: shards.ShardedDataset, cfg, rank: int, world: int, epoch: int,
                   device: torch.device):
    from nvidia.dali import fn, pipeline_def

    gpu = device.type == "cuda"
    seed = (cfg.seed * 1_000_003 + rank * 1009 + epoch) & 0x7FFF_FFFF  # a pipeline's own: per rank, per start
    gpus = torch.cuda.device_count() if gpu else 1

    @pipeline_def(**pipeline_kwargs(cfg.batch_size, device, seed, usable_cores(), gpus))
    def training_pipeline():
        jpegs, labels = fn.readers.webdataset(**reader_kwargs(root, dataset, "train", rank, world, epoch, seed))
        images = fn.decoders.image(jpegs, **decoder_kwargs(gpu))
        images = fn.random_resized_crop(images, **crop_kwargs(cfg.image_size))
        flip = fn.random.coin_flip(probability=0.5)
        images = fn.crop_mirror_normalize(images, mirror=flip, **normalize_kwargs(cfg.precision,
                                                                                 bool(cfg.channels_last)))
        labels = fn.pad(labels, fill_value=0)  # ASCII digits of different lengths -> one N x L batch
        return images, labels.gpu() if gpu else labels

    pipeline = training_pipeline()
    pipeline.build()
    return pipeline


class DaliShardBatches:
    """Training batches from DALI's webdataset reader over the shards (semantics: the module's docstring)."""

    def __init__(self, root: Path, dataset: shards.ShardedDataset, cfg, rank: int, size: int,
                 device: torch.device, steps_per_epoch: int):
        require_installed()
        self.root, self.dataset, self.cfg, self.rank, self.size, self.device = root, dataset, cfg, rank, size, device
        self.steps_per_epoch = steps_per_epoch  # FolderData's: the manifest's count // world // batch
        count = dataset.images()["train"]
        self.pipeline_batches = batches_per_pipeline_epoch(count, size, cfg.batch_size)
        self._iterator, self._next, self._left = None, None, 0  # _left: batches left in the pipeline's epoch

    def _start(self, epoch: int) -> None:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator

        self._iterator = None  # the old pipeline's buffers go before the new one's are allocated
        pipeline = build_pipeline(self.root, self.dataset, self.cfg, self.rank, self.size, epoch, self.device)
        self._iterator = DALIGenericIterator([pipeline], list(OUTPUTS))  # no size: runs on across epochs
        self._left = self.pipeline_batches

    def epoch_batches(self, epoch: int, start_batch: int):
        if self._iterator is None or self._next != (epoch, start_batch):
            self._start(epoch)
        elif self._left < self.pipeline_batches:  # continuing: the pipeline's epoch has part batches left
            if self._left > DRAIN_MAX:  # after a resume mid-epoch: cheaper to start the next slice afresh
                self._start(epoch)
            else:
                for _ in range(self._left):
                    next(self._iterator)
                self._left = self.pipeline_batches
        for batch in range(start_batch, self.steps_per_epoch):
            self._next = (epoch, batch + 1) if batch + 1 < self.steps_per_epoch else (epoch + 1, 0)
            out = next(self._iterator)[0]
            self._left = self._left - 1 or self.pipeline_batches
            images = out["images"]
            if self.cfg.channels_last:
                images = images.permute(0, 3, 1, 2)  # a view: NCHW shape, channels-last strides
            yield images, ascii_labels(out["labels"].reshape(out["labels"].shape[0], -1))
