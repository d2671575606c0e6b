"""TensorFlow/Keras input: an ImageNet-layout folder as a seeded, sharded tf.data stream that can start at any
step (resume mid-epoch), or one synthetic batch repeated (Horovod's synthetic benchmark does the same).

A sharded dataset (`--data DIR` whose dataset.json says "format": "shards") takes the same stream: the order,
the epoch (the manifest's count // world // batch whole batches, the last part batch dropped) and the resume are
the folder's, and each sample's bytes and label are read from its shard where the index says they lie
(training/data/shard_samples.py, in a tf.numpy_function) instead of from its file."""
from __future__ import annotations

from pathlib import Path

from training.config import TrainConfig
from training.data import shards
from training.data.folder import MEAN, STD, num_classes, scan, sharded, verify_images
from training.data.shard_samples import ShardSamples
from training.errors import UsageError
from training.runner import synthetic_steps_per_epoch


class Data:
    """Batches (images NHWC float, one-hot labels) as an endless tf.data stream from any step on."""

    def __init__(self, tf, cfg: TrainConfig, rank: int, size: int, broadcast=None):
        # broadcast: Horovod's broadcast_object; with it rank 0 alone reads the folders (folder.scan)
        self.tf, self.cfg, self.rank, self.size = tf, cfg, rank, size
        self.synthetic = cfg.data == "synthetic"
        self.val = None
        if self.synthetic:
            self.steps_per_epoch = synthetic_steps_per_epoch(cfg.batch_size * size)
            return
        root = Path(cfg.data)
        self.shards: dict[str, ShardSamples] = {}  # split -> its samples, for a sharded dataset
        if sharded(root):
            dataset = shards.read_sharded(root)
            classes = list(dataset.classes)
            self.shards = {split: ShardSamples(root, split, dataset) for split in dataset.shards}
            samples = self.shards["train"]
        else:
            classes, samples = scan(root, "train", rank=rank, broadcast=broadcast)
        num_classes(cfg.num_classes, classes, root)  # the runner decided it from the same folder
        verify_images(samples, cfg.max_bad_images, cfg.seed)
        # A sharded sample is its index (read by _read_shard); a folder's, its path and label
        self.files = list(range(len(samples))) if self.shards else [str(p) for p, _ in samples]
        self.labels = [0] * len(samples) if self.shards else [label for _, label in samples]
        self.steps_per_epoch = len(samples) // (cfg.batch_size * size)
        if self.steps_per_epoch == 0:
            raise UsageError(f"--data {root}: {len(samples)} training images are fewer than one global batch "
                             f"({cfg.batch_size} x {size}); lower --batch-size")
        if "val" in self.shards:
            self.val = (list(range(len(self.shards["val"]))), [0] * len(self.shards["val"]))
        elif not self.shards and (root / "val").is_dir():
            _, val = scan(root, "val", classes, rank=rank, broadcast=broadcast)  # labelled by train/'s classes
            self.val = ([str(p) for p, _ in val], [label for _, label in val])

    def _read(self, item, label, split: str):
        """(encoded image, label) of one sample: a file's bytes, or a shard's (its label read with them)."""
        tf = self.tf
        if not self.shards:
            return tf.io.read_file(item), label
        samples = self.shards[split]

        def read(index):
            import numpy as np

            image, found = samples.read(int(index))
            return np.array(image, dtype=object), np.int64(found)  # np.bytes_ would drop trailing NULs

        image, label = tf.numpy_function(read, [item], (tf.string, tf.int64), stateful=False)
        image.set_shape(())
        label.set_shape(())
        return image, label

    def _decode(self, item, label, seed, train: bool):
        tf, size = self.tf, self.cfg.image_size
        data, label = self._read(item, label, "train" if train else "val")
        image = tf.image.decode_jpeg(data, channels=3)
        image = tf.image.convert_image_dtype(image, tf.float32)
        if train:
            # Resize a little larger, then a seeded random crop and flip: the same augmentation on a rerun.
            image = tf.image.resize(image, (int(size * 1.15), int(size * 1.15)))
            image = tf.image.stateless_random_crop(image, (size, size, 3), seed=seed)
            image = tf.image.stateless_random_flip_left_right(image, seed=seed)
        else:
            image = tf.image.resize(image, (size, size))
        image = (image - MEAN) / STD
        return image, tf.one_hot(label, self.cfg.num_classes)

    def stream(self, start_step: int):
        tf, cfg = self.tf, self.cfg
        if self.synthetic:
            gen = tf.random.Generator.from_seed(cfg.seed + self.rank)
            images = gen.normal((cfg.batch_size, cfg.image_size, cfg.image_size, 3))
            labels = tf.one_hot(gen.uniform((cfg.batch_size,), 0, cfg.num_classes, dtype=tf.int32), cfg.num_classes)
            return tf.data.Dataset.from_tensors((images, labels)).repeat()
        epoch, offset = divmod(start_step, self.steps_per_epoch)
        files, labels = tf.constant(self.files), tf.constant(self.labels)
        per_epoch = self.steps_per_epoch * cfg.batch_size

        def one_epoch(e):
            # Every rank shuffles the same way (seed, epoch), then takes its own shard: no overlap, no gaps.
            order = tf.random.experimental.stateless_shuffle(tf.range(len(self.files)), seed=[cfg.seed, e])
            mine = order[self.rank::self.size][:per_epoch]
            ds = tf.data.Dataset.from_tensor_slices((tf.gather(files, mine), tf.gather(labels, mine), mine))
            return ds.map(lambda p, y, i: self._decode(p, y, tf.stack([tf.cast(e, tf.int32) * 7919 + cfg.seed,
                                                                       tf.cast(i, tf.int32)]), True),
                          num_parallel_calls=max(1, cfg.workers) if cfg.workers else tf.data.AUTOTUNE)

        epochs = tf.data.Dataset.range(epoch, 1 << 30)
        stream = epochs.flat_map(one_epoch).batch(cfg.batch_size, drop_remainder=True)
        return stream.skip(offset).prefetch(tf.data.AUTOTUNE)

    def validation(self):
        if self.val is None:
            return None
        tf = self.tf
        files, labels = self.val
        ds = tf.data.Dataset.from_tensor_slices((files[self.rank::self.size], labels[self.rank::self.size]))
        return ds.map(lambda p, y: self._decode(p, y, None, False)).batch(self.cfg.batch_size)
