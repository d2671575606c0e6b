"""The sharded dataset format (training/data/shards.py) on real JPEG/PNG files made with PIL: the tar members, the
index as DALI reads it (checked against the tar's bytes, Python's tarfile and GNU tar's block numbers, the two ways
DALI's tools/wds2idx.py finds offsets), the MD5 per shard, the manifest, a content hash stable across writes, and
the readers' (rank, worker) split of the samples."""
import hashlib
import io
import json
import random
import shutil
import subprocess
import tarfile
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from training.data import shards
from training.errors import UsageError


def jpeg(seed: int, fmt: str = "JPEG") -> bytes:
    rng = random.Random(seed)
    image = Image.new("RGB", (24 + seed % 7, 20), tuple(rng.randrange(256) for _ in range(3)))
    for _ in range(20):
        image.putpixel((rng.randrange(image.width), rng.randrange(image.height)),
                       tuple(rng.randrange(256) for _ in range(3)))
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()


def image_folder(root: Path, classes=("cat", "dog", "fox"), per_class=10, val_per_class=2) -> dict[str, bytes]:
    """An ImageNet-layout folder; returns {split/class/name: bytes}."""
    made, n = {}, 0
    for split, count in (("train", per_class), ("val", val_per_class)):
        for cls in classes:
            for i in range(count):
                n += 1
                name = f"{split}/{cls}/{cls}_{i:03d}.JPEG"
                path = root / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(jpeg(n))
                made[name] = path.read_bytes()
    return made


def test_a_folder_becomes_shards_the_manifest_and_dali_indexes(tmp_path):
    made = image_folder(tmp_path / "src")
    seen = []
    dataset = shards.write_shards(tmp_path / "src", tmp_path / "out", shard_bytes=8000, seed=3,
                                  progress=lambda split, shard: seen.append((split, shard.name)))
    assert dataset.classes == ("cat", "dog", "fox")
    assert dataset.images() == {"train": 30, "val": 6}
    assert len(dataset.shards["train"]) > 2 and seen[0] == ("train", "shards/train-000000.tar")
    assert [s.name for s in dataset.shards["val"]][0] == "shards/val-000000.tar"

    manifest = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert manifest["format"] == "shards" and manifest["classes"] == ["cat", "dog", "fox"]
    assert manifest["images"] == {"train": 30, "val": 6}
    assert manifest["content_hash"] == dataset.content_hash and dataset.content_hash.startswith("sha256:")
    assert manifest["shards"]["train"][0] == {"name": "shards/train-000000.tar", "index": "shards/train-000000.idx",
                                              "md5": dataset.shards["train"][0].md5,
                                              "bytes": dataset.shards["train"][0].bytes,
                                              "samples": dataset.shards["train"][0].samples}
    assert shards.is_sharded(tmp_path / "out") and shards.read_sharded(tmp_path / "out") == dataset

    got = Counter()
    for split in ("train", "val"):
        for shard in dataset.shards[split]:
            path = tmp_path / "out" / shard.name
            assert shard.md5 == hashlib.md5(path.read_bytes()).hexdigest() and shard.bytes == path.stat().st_size
            with tarfile.open(path) as tar:
                members = tar.getmembers()
                assert [m.name.rsplit(".", 1)[1] for m in members] == ["jpeg", "cls"] * shard.samples
                assert all(m.isreg() and m.mtime == 0 and "." not in m.name.split("/")[-1].rsplit(".", 1)[0]
                           for m in members)
            for key, image, label in shards.iter_shard(path):
                cls = dataset.classes[label]
                assert key.startswith(f"{cls}/")
                got[f"{split}/{cls}/{key.split('/')[1]}.JPEG"] += 1
                assert image == made[f"{split}/{cls}/{key.split('/')[1]}.JPEG"]  # the bytes as given
    assert got == Counter(list(made))  # every image once, with its class
    labels = [label for shard in dataset.shards["train"]
              for _, _, label in shards.iter_shard(tmp_path / "out" / shard.name)]
    assert labels != sorted(labels) and len(set(labels[:10])) > 1  # shuffled: the classes mix in the shards


def test_the_index_is_what_dali_reads_and_points_at_each_members_bytes(tmp_path):
    image_folder(tmp_path / "src", per_class=6, val_per_class=0)
    dataset = shards.write_shards(tmp_path / "src", tmp_path / "out", shard_bytes=30_000)
    for shard in dataset.shards["train"]:
        tar_path, index_path = tmp_path / "out" / shard.name, tmp_path / "out" / shard.index
        lines = index_path.read_text().splitlines()
        assert lines[0] == f"v1.2 {shard.samples}" and len(lines) == shard.samples + 1
        index = shards.read_index(index_path)
        raw = tar_path.read_bytes()
        with tarfile.open(tar_path) as tar:  # wds2idx.py's tarfile path: the data offset of each regular member
            by_tarfile = [(m.name, m.offset_data, m.size) for m in tar.getmembers()]
            contents = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
        flat = [(name, offset, size) for sample in index for _, offset, size, name in sample]
        assert flat == by_tarfile
        for sample in index:
            assert [c[0] for c in sample] == ["jpeg", "cls"]
            assert sample[0][3].rsplit(".", 1)[0] == sample[1][3].rsplit(".", 1)[0]  # one key per line
            for ext, offset, size, name in sample:
                assert raw[offset:offset + size] == contents[name]
        if shutil.which("tar"):  # wds2idx.py's GNU tar path: `tar --list --block-num`, header block + 1
            listed = subprocess.run(["tar", "--list", "--block-num", "--file", str(tar_path)], capture_output=True,
                                    text=True, check=True).stdout.splitlines()
            blocks = [(line.split(": ", 1)[1], (int(line.split(":")[0].split()[1]) + 1) * 512)
                      for line in listed if not line.endswith("**")]  # not the end blocks
            assert blocks == [(name, offset) for name, offset, _ in flat]


def test_two_writes_of_one_folder_with_one_seed_give_the_same_shards_and_hash(tmp_path):
    image_folder(tmp_path / "src", per_class=5, val_per_class=1)
    one = shards.write_shards(tmp_path / "src", tmp_path / "a", shard_bytes=10_000, seed=7)
    two = shards.write_shards(tmp_path / "src", tmp_path / "b", shard_bytes=10_000, seed=7)
    other = shards.write_shards(tmp_path / "src", tmp_path / "c", shard_bytes=10_000, seed=8)
    assert one == two and [s.md5 for s in one.shards["train"]] == [s.md5 for s in two.shards["train"]]
    assert (tmp_path / "a" / "dataset.json").read_bytes() == (tmp_path / "b" / "dataset.json").read_bytes()
    assert other.content_hash != one.content_hash  # another order: other bytes, another identity


def test_odd_file_names_become_keys_dali_and_webdataset_split_right(tmp_path):
    src = tmp_path / "src" / "train"
    for name in ("a.b.jpg", "a_b.jpg", "a.b.png", "with space.JPG", "ünï.jpeg"):
        (src / "my class").mkdir(parents=True, exist_ok=True)
        (src / "my class" / name).write_bytes(jpeg(len(name), "PNG" if name.endswith("png") else "JPEG"))
    (src / "other").mkdir()
    (src / "other" / ("x" * 200 + ".jpg")).write_bytes(jpeg(1))
    dataset = shards.write_shards(tmp_path / "src", tmp_path / "out")
    shard = dataset.shards["train"][0]
    index = shards.read_index(tmp_path / "out" / shard.index)
    names = [c[3] for sample in index for c in sample]
    assert len(names) == len(set(names)) == 12
    assert all(name.isascii() and " " not in name and len(name) <= 100 for name in names)
    assert all("." not in name.rsplit("/", 1)[1].rsplit(".", 1)[0] for name in names)
    keys = [key for key, _, _ in shards.iter_shard(tmp_path / "out" / shard.name)]
    assert len(keys) == len(set(keys)) == 6
    assert sorted(c[0] for sample in index for c in sample if c[0] != "cls") == ["jpeg", "jpg", "jpg", "jpg", "jpg",
                                                                                  "png"]
    with tarfile.open(tmp_path / "out" / shard.name) as tar:  # ustar only: DALI's libtar knows no PAX header
        assert all(m.type == tarfile.REGTYPE for m in tar.getmembers()) and not tar.pax_headers


def test_a_missing_or_tampered_manifest_is_refused_in_one_line(tmp_path):
    with pytest.raises(UsageError, match="no readable dataset.json"):
        shards.read_sharded(tmp_path)
    image_folder(tmp_path / "src", per_class=2, val_per_class=0)
    shards.write_shards(tmp_path / "src", tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "dataset.json").read_text())
    manifest["shards"]["train"][0]["md5"] = "0" * 32
    (tmp_path / "out" / "dataset.json").write_text(json.dumps(manifest))
    with pytest.raises(UsageError, match="content_hash .* is not that of its shards"):
        shards.read_sharded(tmp_path / "out")
    (tmp_path / "out" / "dataset.json").write_text(json.dumps({"format": "files", "classes": ["a"]}))
    assert not shards.is_sharded(tmp_path / "out")
    with pytest.raises(UsageError, match='"format": \'files\', not "shards"'):
        shards.read_sharded(tmp_path / "out")
    with pytest.raises(UsageError, match="holds shards already"):
        shards.write_shards(tmp_path / "out", tmp_path / "again")
    with pytest.raises(UsageError, match="no class folders"):
        shards.write_shards(tmp_path / "out" / "shards", tmp_path / "again")


def test_a_damaged_shard_is_named(tmp_path):
    image_folder(tmp_path / "src", per_class=2, val_per_class=0)
    dataset = shards.write_shards(tmp_path / "src", tmp_path / "out")
    path = tmp_path / "out" / dataset.shards["train"][0].name
    with tarfile.open(path) as tar:
        first = tar.getmembers()[0]
    with tarfile.open(tmp_path / "cut.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        with tarfile.open(path) as whole:
            tar.addfile(first, whole.extractfile(first))
    with pytest.raises(UsageError, match="lacks its .cls member"):
        list(shards.iter_shard(tmp_path / "cut.tar"))
