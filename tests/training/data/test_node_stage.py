"""`python -m training node-stage` against a real Azurite: a sharded dataset (made by training/data/shards.py from
real JPEGs, uploaded by the real uploader) lands in DEST/datasets/NAME with its marker; a second run skips; a shard
whose blob differs from the manifest is fetched again (and after 3 downloads stops in one line); a missing dataset
is one line; a per-file dataset goes through the existing stager into the same folder."""
import json
from types import SimpleNamespace

import pytest
from azure.storage.blob import ContainerClient

from tests.training.data.conftest import cli
from tests.training.data.test_shards import image_folder
from training.data import datasets, node_stage, shard_samples, shards, transfer, upload
from training.errors import UsageError


def sharded_upload(azurite, container, tmp_path, name="pets", seed=0, per_class=10):
    """A sharded dataset NAME in the container (several shards); returns its ShardedDataset and local folder."""
    image_folder(tmp_path / f"src-{seed}", per_class=per_class)
    out = tmp_path / f"sharded-{seed}"
    dataset = shards.write_shards(tmp_path / f"src-{seed}", out, shard_bytes=8000, seed=seed)
    upload.upload(out, transfer.ContainerTarget.parse(azurite.container_url(container, "racwl")),
                  datasets.prefix(name), 4)
    return dataset, out


def files(folder):
    """The dataset's files in FOLDER: not node-stage's own (marker, lock, the ranks' flat index)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in (node_stage.STAGED, node_stage.LOCK)
            and shard_samples.FLAT_DIR not in p.relative_to(folder).parts}


def flat_indexes(folder):
    return sorted(p.name for p in (folder / shard_samples.FLAT_DIR).iterdir())


def test_a_sharded_dataset_lands_with_its_marker_a_second_run_skips_and_a_new_version_replaces_it(
        azurite, container, tmp_path):
    dataset, out = sharded_upload(azurite, container, tmp_path)
    url, dest = azurite.container_url(container, "rl"), tmp_path / "local-data"
    result = cli("node-stage", url, "--dataset", "pets", "--dest", dest, "--threads", "3")
    assert result.returncode == 0, result.stderr
    folder = dest / "datasets" / "pets"
    assert files(folder) == files(out)  # every tar and .idx, and dataset.json, byte for byte
    assert len(dataset.shards["train"]) > 2
    assert (folder / ".staged").read_text().strip() == dataset.content_hash
    assert flat_indexes(folder) == sorted(shard_samples.flat_index_path(folder, split, dataset.content_hash).name
                                          for split in ("train", "val"))
    assert f"marked {dataset.content_hash}" in result.stdout and "sig=" not in result.stdout + result.stderr
    assert not list(folder.rglob("*.part"))

    stamps = {p: p.stat().st_mtime_ns for p in folder.rglob("*.tar")}
    again = cli("node-stage", url, "--dataset", "pets", "--dest", dest)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"{folder} holds pets ({dataset.content_hash}): copy skipped"
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*.tar")} == stamps

    # A new version under the same name (fewer images: fewer shards): staged again, the old shards gone.
    newer, newer_out = sharded_upload(azurite, container, tmp_path, seed=1, per_class=4)
    client = ContainerClient.from_container_url(azurite.container_url(container, "racwdl"))
    for blob in client.list_blobs(name_starts_with="datasets/pets/shards/"):
        if not (newer_out / blob.name[len("datasets/pets/"):]).exists():
            client.delete_blob(blob.name)
    third = cli("node-stage", url, "--dataset", "pets", "--dest", dest)
    assert third.returncode == 0, third.stderr
    assert newer.content_hash != dataset.content_hash
    assert files(folder) == files(newer_out)
    assert (folder / ".staged").read_text().strip() == newer.content_hash
    assert flat_indexes(folder) == sorted(shard_samples.flat_index_path(folder, split, newer.content_hash).name
                                          for split in ("train", "val"))  # the old version's went with its shards


def test_the_ranks_load_the_flat_index_node_stage_wrote_and_read_the_idx_files_when_it_is_not_whole(tmp_path):
    """The flat index gives the samples the .idx files give (ImageNet's ~1,160 .idx files took 4.5 s of one core a
    rank to parse). One that is cut short or counts other samples is not used: with the .idx files gone, the
    split then fails in one line, which shows it was the flat file that was read before."""
    image_folder(tmp_path / "src", per_class=10)
    dataset = shards.write_shards(tmp_path / "src", tmp_path / "out", shard_bytes=8000)
    parsed = shard_samples.ShardSamples(tmp_path / "out", "train")
    flat = parsed.write_flat(dataset.content_hash)
    assert flat == shard_samples.flat_index_path(tmp_path / "out", "train", dataset.content_hash)
    assert not [p for p in flat.parent.iterdir() if p != flat]  # no temporary left
    # One that names a shard the manifest does not list is not used, and nothing of it is kept beside the .idx's.
    whole = flat.read_bytes()
    flat.write_bytes(whole[:16] + len(dataset.shards["train"]).to_bytes(4, "little") + whole[20:])
    fallen_back = shard_samples.ShardSamples(tmp_path / "out", "train")
    assert len(fallen_back) == len(parsed) and list(fallen_back.shard) == list(parsed.shard)
    flat.write_bytes(whole)
    for shard in dataset.shards["train"]:
        (tmp_path / "out" / shard.index).unlink()
    loaded = shard_samples.ShardSamples(tmp_path / "out", "train")
    assert len(loaded) == len(parsed) == dataset.images()["train"]
    assert [loaded.read(i) for i in range(len(loaded))] == [parsed.read(i) for i in range(len(parsed))]
    whole = flat.read_bytes()
    for damaged in (whole[:-4], whole[:8] + (len(parsed) + 1).to_bytes(8, "little") + whole[16:], b"x" + whole[1:]):
        flat.write_bytes(damaged)
        with pytest.raises(UsageError, match="is missing or damaged"):
            shard_samples.ShardSamples(tmp_path / "out", "train")


def test_a_shard_unlike_its_manifest_is_fetched_again(azurite, container, tmp_path, monkeypatch, capsys):
    dataset, out = sharded_upload(azurite, container, tmp_path)
    bad = dataset.shards["train"][1].name
    good = (out / bad).read_bytes()
    client = ContainerClient.from_container_url(azurite.container_url(container, "racwl"))
    blob = f"datasets/pets/{bad}"
    client.upload_blob(blob, good[:600] + bytes(b ^ 0xFF for b in good[600:610]) + good[610:], overwrite=True)

    # The first download reads the corrupted blob from Azurite; the blob is then repaired, so the refetch gets it.
    real, downloads = node_stage.ShardFetcher._download, []

    def download_then_repair(self, name, target):
        got = real(self, name, target)
        if name == blob:
            downloads.append(got[0])
            client.upload_blob(blob, good, overwrite=True)
        return got

    monkeypatch.setattr(node_stage.ShardFetcher, "_download", download_then_repair)
    dest = tmp_path / "local-data"
    result = node_stage.node_stage(transfer.ContainerTarget.parse(azurite.container_url(container, "rl")), "pets",
                                   dest, threads=2)
    folder = dest / "datasets" / "pets"
    assert len(downloads) == 2 and downloads[0] != downloads[1] == dataset.shards["train"][1].md5
    assert (folder / bad).read_bytes() == good and files(folder) == files(out)
    assert "1 fetched again" in result.line
    assert f"{bad}: {len(good)} bytes with MD5 {downloads[0]}, unlike the manifest's" in capsys.readouterr().err


def test_a_shard_that_stays_bad_stops_in_one_line_after_three_downloads(azurite, container, tmp_path):
    dataset, out = sharded_upload(azurite, container, tmp_path)
    bad = dataset.shards["train"][0].name
    good = (out / bad).read_bytes()
    client = ContainerClient.from_container_url(azurite.container_url(container, "racwl"))
    client.upload_blob(f"datasets/pets/{bad}", good[:-1] + bytes([good[-1] ^ 1]), overwrite=True)
    dest = tmp_path / "local-data"
    result = cli("node-stage", azurite.container_url(container, "rl"), "--dataset", "pets", "--dest", dest)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"datasets/pets/{bad}: MD5" in errors[0] and "after 3 downloads" in errors[0]
    assert result.stderr.count("fetching it again") == 2  # downloads 2 and 3 of 3
    folder = dest / "datasets" / "pets"
    assert not (folder / ".staged").exists() and not (folder / bad).exists() and not list(folder.rglob("*.part"))
    assert "sig=" not in result.stderr


def test_an_index_of_another_version_beside_its_tar_stops_before_the_marker(azurite, container, tmp_path):
    """The manifest lists no MD5 for an .idx: one fetched while an upload replaced its shard (the new version's index
    beside the old tar, which matched the manifest) would send the loaders to the wrong offsets. node-stage checks
    each index against its tar's headers and stops in one line, unmarked."""
    dataset, out = sharded_upload(azurite, container, tmp_path, seed=0)
    image_folder(tmp_path / "src-other", per_class=10)
    other = shards.write_shards(tmp_path / "src-other", tmp_path / "other", shard_bytes=8000, seed=1)
    shard = dataset.shards["train"][1]
    assert other.shards["train"][1].index == shard.index  # same name, another version's content
    client = ContainerClient.from_container_url(azurite.container_url(container, "racwl"))
    client.upload_blob(f"datasets/pets/{shard.index}", (tmp_path / "other" / shard.index).read_bytes(), overwrite=True)
    dest = tmp_path / "local-data"
    result = cli("node-stage", azurite.container_url(container, "rl"), "--dataset", "pets", "--dest", dest)
    assert result.returncode == 2, result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"datasets/pets/{shard.index} does not index datasets/pets/{shard.name}" in errors[0]
    assert "run node-stage again once it has finished" in errors[0]
    folder = dest / "datasets" / "pets"
    assert not (folder / ".staged").exists() and not (folder / shard.index).exists()
    # The right index back in the container: the next run fetches it and marks the dataset.
    client.upload_blob(f"datasets/pets/{shard.index}", (out / shard.index).read_bytes(), overwrite=True)
    again = cli("node-stage", azurite.container_url(container, "rl"), "--dataset", "pets", "--dest", dest)
    assert again.returncode == 0, again.stderr
    assert files(folder) == files(out) and (folder / ".staged").read_text().strip() == dataset.content_hash


def test_a_missing_dataset_is_one_line(azurite, container, tmp_path):
    result = cli("node-stage", azurite.container_url(container, "rl"), "--dataset", "nope", "--dest", tmp_path / "d")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "holds no dataset nope" in result.stderr
    assert "python -m infra upload" in result.stderr and "sig=" not in result.stderr
    assert not (tmp_path / "d" / "datasets" / "nope" / ".staged").exists()


def test_a_per_file_dataset_is_staged_by_the_stager_into_the_same_folder_and_marked(azurite, container, tmp_path):
    made = image_folder(tmp_path / "src", per_class=3, val_per_class=1)
    write = azurite.container_url(container, "racwl")
    upload.upload(tmp_path / "src", transfer.ContainerTarget.parse(write), "", 4)  # the dataset `default`
    client = ContainerClient.from_container_url(write)
    described = datasets.describe(client, "default")
    datasets.write_manifest(client, described)
    # Another dataset's blobs under the root's datasets/ are not the default's.
    client.upload_blob("datasets/other/train/x/1.jpg", b"not default's")
    dest = tmp_path / "local-data"
    result = cli("node-stage", azurite.container_url(container, "rl"), "--dest", dest)
    assert result.returncode == 0, result.stderr
    folder = dest / "datasets" / "default"
    staged = files(folder)
    assert {k: v for k, v in staged.items() if k != "dataset.json"} == made
    assert json.loads(staged["dataset.json"])["content_hash"] == described.content_hash
    assert (folder / ".staged").read_text().strip() == described.content_hash
    again = cli("node-stage", azurite.container_url(container, "rl"), "--dest", dest)
    assert again.stdout.strip().endswith(f"holds default ({described.content_hash}): copy skipped")


def test_not_enough_space_stops_before_a_byte_moves(azurite, container, tmp_path, monkeypatch):
    sharded_upload(azurite, container, tmp_path)
    monkeypatch.setattr(node_stage.shutil, "disk_usage", lambda path: SimpleNamespace(free=1000))
    dest = tmp_path / "local-data"
    with pytest.raises(UsageError, match=r"1000 bytes free, the dataset needs \d+ bytes more"):
        node_stage.node_stage(transfer.ContainerTarget.parse(azurite.container_url(container, "rl")), "pets", dest)
    assert not list((dest / "datasets" / "pets").rglob("*.tar"))


def test_a_dataset_without_val_shards_stages_with_a_flat_index_for_train_only(azurite, container, tmp_path):
    image_folder(tmp_path / "src", per_class=6, val_per_class=0)
    dataset = shards.write_shards(tmp_path / "src", tmp_path / "out", shard_bytes=8000)
    assert not dataset.shards.get("val")
    upload.upload(tmp_path / "out", transfer.ContainerTarget.parse(azurite.container_url(container, "racwl")),
                  datasets.prefix("trainonly"), 4)
    dest = tmp_path / "local-data"
    result = cli("node-stage", azurite.container_url(container, "rl"), "--dataset", "trainonly", "--dest", dest)
    assert result.returncode == 0, result.stderr
    folder = dest / "datasets" / "trainonly"
    assert flat_indexes(folder) == [shard_samples.flat_index_path(folder, "train", dataset.content_hash).name]
