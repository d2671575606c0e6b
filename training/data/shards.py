"""Sharded datasets: WebDataset tar shards with DALI's index beside each, an MD5 per shard and a manifest (the
contract every reader, the node stager and the rehearsal code against: docs/data.md, "Shards"). Standard library
and PIL only: the trainer's CPU loaders, the node stager and the uploader all import it.

  DIR/dataset.json                 the manifest: "format": "shards", classes, images, shards, content_hash
  DIR/shards/train-000000.tar      WebDataset tar: KEY.jpg|KEY.jpeg|KEY.png (the bytes as given) + KEY.cls
  DIR/shards/train-000000.idx      DALI's webdataset index of that tar
  DIR/shards/val-000000.tar/.idx   validation shards (when the folder has val/)

KEY is "<class>/<image stem>", '.' in the stem replaced by '_' (WebDataset and DALI split a member's name at the
first dot of its basename: DALI's split_name in dali/operators/reader/loader/webdataset_loader.cc, and
tools/wds2idx.py's IndexCreator.split_name), and any character outside [A-Za-z0-9_+-] replaced by '_' as well:
DALI's v1.2 index reads each component as `ext offset size filename` with `>>`, so a name may not hold a space,
and its tar reader (libtar with TAR_GNU, dali/operators/reader/loader/webdataset/tar_utils.cc) reads a ustar
header's 100-byte name but knows no PAX header (an 'x' entry fails with "Entry type in a tar archive not
recognized"). So every member is a plain ustar regular file whose ASCII name fits 100 bytes; a key made equal to
another by that (a.b.jpg and a_b.jpg) gets a numeric suffix. The class is the .cls member, never parsed from KEY.

The samples of a split are written in one seeded shuffle of the sorted file list, so a shard holds many classes
and two writes of the same folder with the same seed give the same bytes (fixed mtime, owner and mode in every
header): the same MD5s, the same content hash.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import random
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from training.data import layout, transfer
from training.errors import UsageError

SHARDS_DIR = "shards"
MANIFEST = "dataset.json"  # the same name as training/data/datasets.py's MANIFEST
FORMAT = "shards"
SPLITS = ("train", "val")
SHARD_BYTES = 128 * 1000 * 1000  # ~128 MB a shard: 10,000 ImageNet JPEGs (115 KB average); 100-250 MB allowed
INDEX_VERSION = "v1.2"  # DALI's kCurrentIndexVersion (webdataset_loader.h; tools/wds2idx.py writes the same)
BLOCK = 512  # a tar block: DALI refuses an index offset that is not a multiple of it (ParseSampleDesc)
_NAME_MAX = 100  # a ustar header's name field, without its prefix field
_UNSAFE = re.compile(r"[^A-Za-z0-9_+\-]")


@dataclass(frozen=True)
class Shard:
    name: str  # relative to the dataset's folder (or blob prefix): shards/train-000000.tar
    index: str  # shards/train-000000.idx
    md5: str  # hex of the tar
    bytes: int
    samples: int

    def entry(self) -> dict:
        return {"name": self.name, "index": self.index, "md5": self.md5, "bytes": self.bytes,
                "samples": self.samples}


@dataclass(frozen=True)
class ShardedDataset:
    classes: tuple[str, ...]
    shards: dict[str, tuple[Shard, ...]]  # split -> shards, in order
    content_hash: str

    def images(self) -> dict[str, int]:
        return {split: sum(s.samples for s in self.shards.get(split, ())) for split in SPLITS}

    def bytes(self) -> int:
        return sum(s.bytes for split in self.shards.values() for s in split)

    def manifest(self) -> dict:
        """The manifest's sharded keys (an upload adds name, uploaded_by and uploaded_at)."""
        return {"format": FORMAT, "classes": list(self.classes), "images": self.images(), "bytes": self.bytes(),
                "shards": {split: [s.entry() for s in shards] for split, shards in self.shards.items()},
                "content_hash": self.content_hash}


def content_hash(shards: dict[str, Iterable[Shard]]) -> str:
    """sha256 over every shard's name and MD5, splits in SPLITS order, shards in manifest order."""
    digest = hashlib.sha256()
    for split in SPLITS:
        for shard in shards.get(split, ()):
            digest.update(f"{shard.name}\0{shard.md5}\n".encode())
    return f"sha256:{digest.hexdigest()}"


def md5_file(path: Path | str) -> str:
    """The file's MD5 in hex (transfer.md5_file's digest, which the uploader sets as Content-MD5)."""
    return transfer.md5_file(Path(path)).hex()


# ---- reading ----------------------------------------------------------------------------------------------------

def _manifest(directory: Path | str) -> dict | None:
    try:
        manifest = json.loads((Path(directory) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def is_sharded(directory: Path | str) -> bool:
    """Whether DIR/dataset.json says "format": "shards"."""
    manifest = _manifest(directory)
    return bool(manifest) and manifest.get("format") == FORMAT


def from_manifest(manifest: dict, where: str) -> ShardedDataset:
    """A ShardedDataset from a parsed manifest; UsageError naming `where` when it is not a sharded one."""
    def bad(why: str) -> UsageError:
        return UsageError(f"{where}: {why}; rewrite the dataset with `python -m training shard` or "
                          "`python -m infra upload --format shards`")

    if manifest.get("format") != FORMAT:
        raise bad(f'{MANIFEST} has "format": {manifest.get("format")!r}, not "shards"')
    classes = manifest.get("classes")
    if not isinstance(classes, list) or not classes or not all(isinstance(c, str) for c in classes):
        raise bad(f'{MANIFEST} has no "classes" list')
    found: dict[str, tuple[Shard, ...]] = {}
    for split, entries in (manifest.get("shards") or {}).items():
        if split not in SPLITS or not isinstance(entries, list):
            raise bad(f'{MANIFEST}\'s "shards" has {split!r}, not a list under train or val')
        try:
            found[split] = tuple(Shard(str(e["name"]), str(e["index"]), str(e["md5"]), int(e["bytes"]),
                                       int(e["samples"])) for e in entries)
        except (KeyError, TypeError, ValueError):
            raise bad(f'{MANIFEST}\'s "shards" {split} entries need name, index, md5, bytes and samples') from None
    if not found.get("train"):
        raise bad(f"{MANIFEST} lists no train shard")
    expected = content_hash(found)
    if manifest.get("content_hash") != expected:
        raise bad(f"{MANIFEST}'s content_hash {manifest.get('content_hash')!r} is not that of its shards "
                  f"({expected[:19]}...)")
    return ShardedDataset(tuple(classes), found, expected)


def read_sharded(directory: Path | str) -> ShardedDataset:
    """The sharded dataset in DIR (its manifest; the shard files are not opened); UsageError in one line when DIR
    has no sharded manifest."""
    manifest = _manifest(directory)
    if manifest is None:
        raise UsageError(f"--data {directory}: no readable {MANIFEST}; a sharded dataset is DIR/{MANIFEST} + "
                         f"DIR/{SHARDS_DIR}/ (`python -m training shard SRC DIR` makes one)")
    return from_manifest(manifest, f"--data {directory}")


def iter_shard(path: Path | str) -> Iterator[tuple[str, bytes, int]]:
    """(key, image bytes, class index) of each sample in a shard, in file order. Streams the tar (bounded memory);
    a sample without an image or a .cls member is an error naming the shard."""
    key, image, label = None, None, None

    def sample():
        if image is None or label is None:
            raise UsageError(f"{path}: sample {key!r} lacks its {'image' if image is None else '.cls'} member; "
                             "the shard is damaged: fetch it again")
        return key, image, label

    with tarfile.open(path, mode="r|") as tar:
        for member in tar:
            if not member.isreg():
                continue
            base, _, ext = _split(member.name)
            if not base or base.endswith("/"):
                continue  # a hidden file: DALI's readers skip it too
            if base != key:
                if key is not None:
                    yield sample()
                key, image, label = base, None, None
            data = tar.extractfile(member).read()
            if ext == "cls":
                label = int(data.decode("ascii").strip())
            elif "." + ext in layout.IMAGE_SUFFIXES:
                image = data
    if key is not None:
        yield sample()


def _split(name: str) -> tuple[str, str, str]:
    """(key, '.', extension) at the first dot of the basename, as DALI and WebDataset split a member name."""
    dot = name.find(".", name.rfind("/") + 1)
    return (name, "", "") if dot < 0 else (name[:dot], ".", name[dot + 1:])


# ---- writing ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Source:
    """One image to shard: its split, class and file name, and where it is (a path, or a blob name) for the
    `read` that build() is given. Small on purpose: ImageNet is 1.28 M of them in memory at once."""
    split: str
    cls: str
    name: str
    ref: str


def read_file(source: Source) -> bytes:
    return Path(source.ref).read_bytes()


def _read_ahead(items: list[Source], read: Callable[[Source], bytes], readers: int) -> Iterator[tuple[Source, bytes]]:
    """(source, its bytes) in order, with up to 4 x readers reads in flight on `readers` threads (blobs: the
    latency of one GET hidden behind the others); one thread: plain sequential reads."""
    if readers <= 1:
        for source in items:
            yield source, read(source)
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(readers, thread_name_prefix="shard-read") as pool:
        window, pending = 4 * readers, deque()
        for source in items:
            pending.append((source, pool.submit(read, source)))
            if len(pending) >= window:
                done, future = pending.popleft()
                yield done, future.result()
        while pending:
            done, future = pending.popleft()
            yield done, future.result()


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text) or "_"


def _member_names(cls: str, name: str, taken: set[str]) -> tuple[str, str]:
    """(image member, .cls member) names for one image: KEY.ext and KEY.cls, KEY unique in its shard set."""
    stem, ext = os.path.splitext(name)
    ext = ext.lower().lstrip(".")
    key = f"{_safe(cls)[:40]}/{_safe(stem)[:_NAME_MAX - 56]}"
    unique, n = key, 1
    while unique in taken:
        n += 1
        unique = f"{key}_{n}"
    taken.add(unique)
    return f"{unique}.{ext}", f"{unique}.cls"


class _ShardWriter:
    """One open shard: a deterministic ustar archive and its DALI index lines, written as members go in."""

    def __init__(self, folder: Path, split: str, number: int):
        self.name = f"{SHARDS_DIR}/{split}-{number:06d}.tar"
        self.index = f"{SHARDS_DIR}/{split}-{number:06d}.idx"
        self.path, self.index_path = folder / self.name, folder / self.index
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "wb")
        self.tar = tarfile.open(fileobj=self.file, mode="w", format=tarfile.USTAR_FORMAT)
        self.lines: list[str] = []
        self.count = 0

    def size(self) -> int:
        return self.tar.offset

    def _add(self, name: str, data: bytes) -> tuple[str, int, int]:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode, info.uid, info.gid = len(data), 0, 0o644, 0, 0
        info.uname = info.gname = ""
        # The member's data starts right after its header: DALI's index offset is that position (wds2idx.py's
        # tarfile path: `farchive.fileobj.tell()` after the header; its GNU tar path: the next header's block
        # minus the size, rounded down to a block).
        offset = self.tar.offset + len(info.tobuf(tarfile.USTAR_FORMAT, "ascii", "strict"))
        self.tar.addfile(info, io.BytesIO(data))
        return _split(name)[2], offset, len(data)

    def add(self, image_name: str, image: bytes, cls_name: str, label: int) -> None:
        parts = [self._add(image_name, image), self._add(cls_name, str(label).encode("ascii"))]
        self.lines.append(" ".join(f"{ext} {offset} {size} {name}" for (ext, offset, size), name
                                   in zip(parts, (image_name, cls_name))))
        self.count += 1

    def close(self) -> Shard:
        self.tar.close()  # two zero blocks, padded to tarfile's record size
        self.file.close()
        # tools/wds2idx.py's IndexCreator.create_index: "v1.2 <samples>", then per sample its components'
        # "<ext> <offset> <size> <name>" on one line (DALI's ParseIndexFile/ParseSampleDesc read exactly that).
        self.index_path.write_text(f"{INDEX_VERSION} {self.count}\n" + "".join(f"{line}\n" for line in self.lines))
        return Shard(self.name, self.index, md5_file(self.path), self.path.stat().st_size, self.count)


def build(sources: Iterable[Source], classes: list[str], dest_dir: Path | str, *, shard_bytes: int = SHARD_BYTES,
          seed: int = 0, read: Callable[[Source], bytes] = read_file, readers: int = 1) -> Iterator[tuple[str, Shard]]:
    """Write the sources as shards under DEST/shards/, yielding (split, Shard) as each shard closes, so a caller
    can upload and delete it before the next is written (disk bounded by one shard). Each split's sources are
    sorted, then shuffled with `seed`; a shard closes before the member that would take it past shard_bytes.
    `read(source)` gives an image's bytes, on `readers` threads ahead of the writer."""
    if shard_bytes < 1:
        raise UsageError(f"--shard-mb {shard_bytes / 1e6:g}: give a positive size (100 to 250 MB is the norm)")
    label = {cls: i for i, cls in enumerate(classes)}
    by_split: dict[str, list[Source]] = {split: [] for split in SPLITS}
    for source in sources:
        by_split[source.split].append(source)
    folder = Path(dest_dir)
    for split in SPLITS:
        items = sorted(by_split[split], key=lambda s: (s.cls, s.name))
        random.Random(f"{seed}:{split}").shuffle(items)
        writer, number, taken = None, 0, set()
        for source in items:
            if source.cls not in label:
                raise UsageError(f"{split}/{source.cls}/: {layout.val_classes_problem(classes, [source.cls])}")
        for source, data in _read_ahead(items, read, readers):
            image_name, cls_name = _member_names(source.cls, source.name, taken)
            needed = 2 * BLOCK + len(data) + (-len(data) % BLOCK) + 2 * BLOCK
            if writer and writer.count and writer.size() + needed > shard_bytes:
                yield split, writer.close()
                writer, number = None, number + 1
            writer = writer or _ShardWriter(folder, split, number)
            writer.add(image_name, data, cls_name, label[source.cls])
        if writer:
            yield split, writer.close()


def folder_sources(src: Path | str) -> tuple[list[str], list[Source]]:
    """The classes (train/'s class folders with images, sorted: the trainer's labels) and images of an
    ImageNet-layout folder; UsageError when it is not one (training/data/layout.py's check)."""
    root = Path(src)
    found = layout.of_folder(root)
    problem = found.problem() or (None if found.images["train"] else
                                  "it holds shards already, no train/<class>/ images (upload it as it is)")
    if problem:
        raise UsageError(f"SRC {root}: {problem}; {layout.EXPECTED}")
    classes = sorted(found.images["train"])
    sources = []
    for split in SPLITS:
        for cls in sorted(found.images[split]):
            for path in sorted((root / split / cls).iterdir()):
                if path.is_file() and layout.is_image(path.name) and not path.name.startswith("."):
                    sources.append(Source(split, cls, path.name, str(path)))
    return classes, sources


def finish(dest_dir: Path | str, classes: list[str], built: Iterable[tuple[str, Shard]],
           extra: dict | None = None) -> ShardedDataset:
    """The ShardedDataset of the shards built, with its manifest written to DEST/dataset.json last."""
    shards: dict[str, list[Shard]] = {}
    for split, shard in built:
        shards.setdefault(split, []).append(shard)
    frozen = {split: tuple(found) for split, found in shards.items()}
    dataset = ShardedDataset(tuple(classes), frozen, content_hash(frozen))
    body = {**(extra or {}), **dataset.manifest()}
    (Path(dest_dir) / MANIFEST).write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    return dataset


def write_shards(src_folder: Path | str, dest_dir: Path | str, *, shard_bytes: int = SHARD_BYTES, seed: int = 0,
                 progress: Callable[[str, Shard], None] | None = None) -> ShardedDataset:
    """An ImageNet-layout folder (train/<class>/IMAGE, optionally val/<class>/IMAGE) as DEST/shards/ +
    DEST/dataset.json; `progress(split, shard)` after each shard."""
    classes, sources = folder_sources(src_folder)
    Path(dest_dir).mkdir(parents=True, exist_ok=True)

    def built():
        for split, shard in build(sources, classes, dest_dir, shard_bytes=shard_bytes, seed=seed):
            if progress:
                progress(split, shard)
            yield split, shard

    return finish(dest_dir, classes, built())


def read_index(path: Path | str) -> list[list[tuple[str, int, int, str]]]:
    """A DALI v1.2 index: per sample, its components (ext, offset, size, name), checked as DALI checks them
    (version, a positive sample count, offsets on block boundaries, four fields per component)."""
    lines = Path(path).read_text().splitlines()
    head = lines[0].split() if lines else []
    if len(head) != 2 or head[0] not in ("v1.1", INDEX_VERSION) or int(head[1]) <= 0:
        raise ValueError(f"{path}: first line {lines[:1]!r} is not '{INDEX_VERSION} <samples>'")
    found = []
    for number, line in enumerate(lines[1:1 + int(head[1])], 1):
        fields = line.split()
        if not fields or len(fields) % 4:
            raise ValueError(f"{path} line {number}: expected <ext> <offset> <size> <name> per component")
        components = [(fields[i], int(fields[i + 1]), int(fields[i + 2]), fields[i + 3])
                      for i in range(0, len(fields), 4)]
        if any(offset % BLOCK for _, offset, _, _ in components):
            raise ValueError(f"{path} line {number}: an offset is not a multiple of {BLOCK}")
        found.append(components)
    if len(found) != int(head[1]):
        raise ValueError(f"{path}: {len(found)} sample lines, the header says {head[1]}")
    return found
