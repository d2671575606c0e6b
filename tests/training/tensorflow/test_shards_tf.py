"""TensorFlow's and Keras's tf.data from a sharded dataset (training/data/shards.py): each sample's bytes and label
read from its shard (training/data/shard_samples.py), the per-file stream's epoch (every sample once across ranks
when the batches divide the count) and its validation, with the same pixels as the same images read as files."""
from collections import Counter

import pytest

from training.config import TrainConfig
from training.data import shards
from training.tensorflow.data import Data


@pytest.fixture(scope="module")
def sharded(dataset, tmp_path_factory):
    root = tmp_path_factory.mktemp("sharded")
    shards.write_shards(dataset, root, shard_bytes=20_000)  # 64 train, 16 val JPEGs of 40 px in 17 shards
    return root


def data(root, rank, size):
    import tensorflow as tf

    cfg = TrainConfig(framework="tensorflow", data=str(root), image_size=32, batch_size=4, workers=1, num_classes=4)
    return Data(tf, cfg, rank, size)


def test_ranks_read_every_sample_of_the_shards_once_an_epoch(sharded):
    import tensorflow as tf

    expected = Counter(label for s in shards.read_sharded(sharded).shards["train"]
                       for _, _, label in shards.iter_shard(sharded / s.name))
    per_epoch = [Counter(), Counter()]
    for rank in (0, 1):
        stream = data(sharded, rank, 2)
        assert stream.steps_per_epoch == 8  # the manifest's 64 // 2 ranks // batch 4
        for step, (images, labels) in enumerate(stream.stream(0).take(16)):
            assert images.shape == (4, 32, 32, 3)
            per_epoch[step // 8].update(tf.argmax(labels, 1).numpy().tolist())
    assert per_epoch[0] == per_epoch[1] == expected and sum(expected.values()) == 64


def test_validation_from_val_shards_has_the_pixels_of_the_val_files(sharded, dataset):
    import numpy as np

    def images(root):
        found = []
        for rank in (0, 1):
            for batch, labels in data(root, rank, 2).validation():
                found += [(round(float(np.abs(x).sum()), 2), int(np.argmax(y))) for x, y in zip(batch.numpy(), labels)]
        return sorted(found)

    from_shards = images(sharded)
    assert len(from_shards) == 16 and from_shards == images(dataset)
