"""A sharded dataset's split as a sequence of samples, read at random through each shard's DALI index: what the CPU
loaders (PyTorch's `pil` and `nvjpeg`, TensorFlow's tf.data) read instead of one file per image. Standard library
only, beside training/data/shards.py (the format) and training/data/folder.py (which says which kind `--data` is).

Why random access and not a stream of whole shards: a rank must train the same number of steps as
every other (the manifest's count // world // batch, training/pytorch/sampling.py `batches_per_epoch`), and whole
shards dealt to ranks are uneven: ImageNet's ~1,150 shards of 128 MB over 256 ranks (32 nodes) are 4 or 5 a rank,
4,448 or 5,560 images, while every rank needs 5,004 an epoch. Reading sample `i` where the index says it lies lets
these loaders keep the per-file path's sampler (a seeded permutation of the whole split, dealt to ranks, drop_last:
every sample at most once an epoch, at most batch x world - 1 of them left out of it, and a resume mid-epoch that
sees exactly what an uninterrupted run would have), with the same crops (drawn per (seed, epoch, index)). The cost
is one read of ~115 KB (an ImageNet JPEG and its .cls, adjacent in the tar) per sample instead of a sequential
stream: on a node's local NVMe or its page cache that is not what bounds a loader that decodes on the CPU (the
shard-loader benchmark puts the two side by side: docs/data.md "Reading shards"). DALI reads the same shards with
its own sequential reader on the GPU nodes (training/pytorch/dali.py).

The index (DALI's v1.2 format, written beside every shard by shards.py: per sample `ext offset size name` for each
member) gives each member's offset and size; a sample's label is its `.cls` member, read with its image (the KEY's
class part is a sanitised name, never parsed: shards.py).
"""
from __future__ import annotations

import io
import os
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from training.data import layout, shards
from training.errors import UsageError

OPEN_SHARDS = 64  # open file descriptors a process keeps (an LRU): ImageNet has ~1,150 shards, a node 8 x ~10 readers
# A split's index as the flat arrays below, written once per node by node-stage beside the staged shards and keyed by
# the dataset's content hash, so that a node's ranks load it in one read instead of each parsing every .idx file.
FLAT_DIR = ".flat-index"
FLAT_MAGIC = b"DLTFLAT1"
ARRAYS = (("shard", "i"), ("start", "q"), ("image", "i"), ("image_size", "i"), ("cls", "i"), ("cls_size", "i"))


def flat_index_path(directory: Path | str, split: str, content_hash: str) -> Path | None:
    """Where SPLIT's flat index of the dataset with CONTENT_HASH lies (None without a hash: nothing keys it)."""
    digest = content_hash.partition(":")[2][:24]
    return Path(directory) / FLAT_DIR / f"{split}-{digest}.arrays" if digest else None


class ShardMember(io.BytesIO):
    """One sample's image bytes, as a file PIL opens; named `SHARD:MEMBER` in messages (an unreadable image)."""

    def __init__(self, data: bytes, where: str):
        super().__init__(data)
        self.where = where

    def __repr__(self) -> str:
        return self.where

    __str__ = __repr__


class ShardSamples(Sequence):
    """Sample i of a split (in manifest shard order, then file order: the order DALI's reader numbers them) ->
    (ShardMember of its image, class index). Holds the index as flat arrays (28 bytes a sample: ImageNet's 1.28 M
    in ~36 MB that forked DataLoader workers share without copying, as they would not a list of objects). Reading
    ImageNet's ~1,160 index files took 4.5 s of one core here (1.28 M lines, measured on the 2-core dev VM), in
    every rank; where node-stage left a flat index (FLAT_DIR) the arrays are one read."""

    def __init__(self, directory: Path | str, split: str, dataset: shards.ShardedDataset | None = None):
        self.root, self.split = Path(directory), split
        dataset = dataset or shards.read_sharded(directory)
        self.classes = dataset.classes
        self.shard_names = [s.name for s in dataset.shards.get(split, ())]
        if not self.shard_names:
            raise UsageError(f"--data {directory}: its {shards.MANIFEST} lists no {split} shards")
        # shard: position in shard_names; start: where the sample's members begin in the tar; image, cls: the image
        # and .cls members' offsets from start, with their sizes.
        for name, code in ARRAYS:
            setattr(self, name, array(code))
        flat = flat_index_path(directory, split, dataset.content_hash)
        expected = sum(entry.samples for entry in dataset.shards[split])
        if not (flat and self._load_flat(flat, expected)):
            for number, entry in enumerate(dataset.shards[split]):
                self._add_index(number, entry)
        self._files: OrderedDict[int, int] = OrderedDict()  # shard position -> fd, in this process
        self._pid = os.getpid()

    def _add_index(self, number: int, entry: shards.Shard) -> None:
        path = self.root / entry.index
        try:
            samples = shards.read_index(path)
        except (OSError, ValueError) as err:
            raise UsageError(f"--data {self.root}: {entry.index} is missing or damaged ({err}); stage the dataset "
                             "again (`python -m training node-stage`) or rewrite it with `python -m training shard`")
        if len(samples) != entry.samples:
            raise UsageError(f"--data {self.root}: {entry.index} lists {len(samples)} samples, {shards.MANIFEST} "
                             f"says {entry.samples}; stage the dataset again")
        for components in samples:
            image = [c for c in components if "." + c[0].lower() in layout.IMAGE_SUFFIXES]
            label = [c for c in components if c[0] == "cls"]
            if len(image) != 1 or len(label) != 1:
                raise UsageError(f"--data {self.root}: {entry.index}: sample {components[0][3]!r} needs one image "
                                 "and one .cls member; rewrite the dataset with `python -m training shard`")
            start = min(offset for _, offset, _, _ in components)
            self.shard.append(number)
            self.start.append(start)
            self.image.append(image[0][1] - start)
            self.image_size.append(image[0][2])
            self.cls.append(label[0][1] - start)
            self.cls_size.append(label[0][2])

    def _load_flat(self, path: Path, expected: int) -> bool:
        """The arrays from node-stage's flat index; False (the .idx files are read instead) when there is none or
        it does not hold EXPECTED samples of this split's shards."""
        try:
            data = path.read_bytes()
        except OSError:
            return False
        count = int.from_bytes(data[8:16], "little") if data[:8] == FLAT_MAGIC else -1
        sizes = [array(code).itemsize * count for _, code in ARRAYS]
        if count != expected or len(data) != 16 + sum(sizes):
            return False
        loaded, at = {}, 16
        for (name, code), size in zip(ARRAYS, sizes):
            loaded[name] = array(code)
            loaded[name].frombytes(data[at:at + size])
            at += size
        if count and max(loaded["shard"]) >= len(self.shard_names):
            return False  # nothing kept: the .idx files fill the empty arrays
        self.__dict__.update(loaded)
        return True

    def write_flat(self, content_hash: str) -> Path | None:
        """Write this split's flat index for the node's other readers (node-stage, once the indexes are checked):
        to a temporary name, then renamed, so a reader sees the whole file or none."""
        path = flat_index_path(self.root, self.split, content_hash)
        if path is None:
            return None
        path.parent.mkdir(exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        with open(temporary, "wb") as out:
            out.write(FLAT_MAGIC + len(self).to_bytes(8, "little"))
            for name, _ in ARRAYS:
                getattr(self, name).tofile(out)
        os.replace(temporary, path)
        return path

    def __len__(self) -> int:
        return len(self.start)

    def _fd(self, number: int) -> int:
        if self._pid != os.getpid():  # a forked worker: its own descriptors (pread shares no offset, but close does)
            self._files, self._pid = OrderedDict(), os.getpid()
        fd = self._files.pop(number, None)
        if fd is None:
            fd = os.open(self.root / self.shard_names[number], os.O_RDONLY)
            if len(self._files) >= OPEN_SHARDS:
                os.close(self._files.popitem(last=False)[1])
        self._files[number] = fd
        return fd

    def read(self, i: int) -> tuple[bytes, int]:
        """(image bytes, class index) of sample i: one read of its members' span. OSError when the shard is
        shorter than its index says, or its .cls is not a class index."""
        number, start = self.shard[i], self.start[i]
        end = max(self.image[i] + self.image_size[i], self.cls[i] + self.cls_size[i])
        span = os.pread(self._fd(number), end, start)
        if len(span) < end:
            raise OSError(f"{self.shard_names[number]}: truncated at sample {i} (stage the dataset again)")
        image = span[self.image[i]:self.image[i] + self.image_size[i]]
        try:
            label = int(span[self.cls[i]:self.cls[i] + self.cls_size[i]].decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            label = -1
        if not 0 <= label < len(self.classes):
            raise OSError(f"{self.shard_names[number]}: sample {i} has no class index in its .cls member")
        return image, label

    def __getitem__(self, i: int) -> tuple[ShardMember, int]:  # type: ignore[override]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        image, label = self.read(i)
        return ShardMember(image, f"{self.shard_names[self.shard[i]]}#{i}"), label

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_files": OrderedDict(), "_pid": -1}  # descriptors stay with their process

    def close(self) -> None:
        while self._files:
            os.close(self._files.popitem()[1])
