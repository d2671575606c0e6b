"""Sharded datasets on a real blob service (Azurite): `python -m infra upload --format shards`, `python -m infra
shard` (a per-file dataset converted in place), `python -m training shard` and `upload` of a sharded folder, the
`datasets` listing, a resumed upload, --replace/--remove-files, and the data gate on a sharded `default`."""
import hashlib
import json

from azure.storage.blob import ContainerClient

from infra.backends import staging
from infra.cli.main import main
from tests.training.data.conftest import cli, cli_background
from tests.training.data.test_infra_upload import names, outputs_for
from tests.training.data.test_shards import image_folder
from training.data import datasets, sharding, shards


def blob_md5(client, name):
    return bytes(client.get_blob_client(name).get_blob_properties().content_settings.content_md5).hex()


def manifest_of(client, name):
    return json.loads(client.download_blob(datasets.prefix(name) + "dataset.json").readall())


def samples_in_container(client, name, tmp_path):
    """{(class, image bytes)} of every shard the dataset's manifest lists, each checked against its MD5."""
    manifest, found = manifest_of(client, name), set()
    for split in ("train", "val"):
        for entry in manifest["shards"].get(split, []):
            data = client.download_blob(datasets.prefix(name) + entry["name"]).readall()
            assert hashlib.md5(data).hexdigest() == entry["md5"] == blob_md5(client, datasets.prefix(name) +
                                                                              entry["name"])
            local = tmp_path / "check.tar"
            local.write_bytes(data)
            index = client.download_blob(datasets.prefix(name) + entry["index"]).readall().decode()
            assert index.startswith(f"v1.2 {entry['samples']}\n")
            found |= {(split, manifest["classes"][label], image) for _, image, label in shards.iter_shard(local)}
    return found


def made_set(made):
    return {(name.split("/")[0], name.split("/")[1], data) for name, data in made.items()}


def test_upload_as_shards_lists_resumes_and_replaces(azurite, container, tmp_path, capsys):
    url = azurite.container_url(container, "racwdl")
    member = str(outputs_for(tmp_path, url))
    client = ContainerClient.from_container_url(url)
    made = image_folder(tmp_path / "pets", per_class=8, val_per_class=2)
    assert main(["upload", "--outputs", member, "--dataset", "pets", "--format", "files", str(tmp_path / "pets")]) == 0
    assert "datasets/pets/train/cat/cat_000.JPEG" in names(url)
    assert manifest_of(client, "pets")["format"] == "files"
    capsys.readouterr()

    args = ["upload", "--outputs", member, "--dataset", "pets", "--format", "shards", "--shard-mb", "0.02"]
    assert main([*args, str(tmp_path / "pets")]) == 0
    err = capsys.readouterr().err
    assert "as shards (--format shards)" in err and "shard: shards/train-000000.tar:" in err
    manifest = manifest_of(client, "pets")
    assert manifest["format"] == "shards" and manifest["name"] == "pets" and manifest["uploaded_by"]
    assert manifest["images"] == {"train": 24, "val": 6} and len(manifest["shards"]["train"]) >= 3
    assert samples_in_container(client, "pets", tmp_path) == made_set(made)
    assert "datasets/pets/train/cat/cat_000.JPEG" in names(url)  # per-file blobs kept without --replace

    assert main(["datasets", "--outputs", member]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("pets: 3 class(es) (cat, dog, fox), 24 train, 6 val images, ")
    assert f" MB, shards ({len(manifest['shards']['train']) + len(manifest['shards']['val'])}), uploaded by " in line
    assert manifest["content_hash"][:19] in line

    # A half upload: the manifest and one shard gone. Until the rerun writes the manifest the dataset is not listed
    # as shards; the rerun sends only the missing shard.
    client.delete_blob("datasets/pets/dataset.json")
    client.delete_blob("datasets/pets/shards/train-000001.tar")
    assert datasets.describe(client, "pets").format == "files"
    assert main([*args, str(tmp_path / "pets")]) == 0
    out = capsys.readouterr().out
    total = len(manifest["shards"]["train"]) + len(manifest["shards"]["val"])
    assert f"1 transferred, {total - 1} skipped" in out
    assert manifest_of(client, "pets")["content_hash"] == manifest["content_hash"]  # same folder, same seed

    # --replace: the dataset becomes the shards alone; fewer, larger shards leave no stale ones behind.
    assert main([*args[:-1], "1", "--replace", str(tmp_path / "pets")]) == 0
    left = [n for n in names(url) if n.startswith("datasets/pets/")]
    assert left == ["datasets/pets/shards/train-000000.idx", "datasets/pets/shards/train-000000.tar",
                    "datasets/pets/shards/val-000000.idx", "datasets/pets/shards/val-000000.tar"]
    assert samples_in_container(client, "pets", tmp_path) == made_set(made)


def test_a_per_file_dataset_converts_in_place_and_imagenet_names_too(azurite, container, tmp_path, capsys):
    url = azurite.container_url(container, "racwdl")
    member = str(outputs_for(tmp_path, url))
    client = ContainerClient.from_container_url(url)
    made = image_folder(tmp_path / "inet", classes=("n01440764", "n01443537"), per_class=6, val_per_class=2)
    for cls in ("n01440764", "n01443537"):  # ImageNet as the docs stage it: train/<wnid>/<wnid>_<n>.JPEG
        for path in sorted((tmp_path / "inet" / "train" / cls).iterdir()):
            path.rename(path.with_name(f"{cls}_{10026 + int(path.stem.split('_')[-1])}.JPEG"))
    made = {"/".join(p.relative_to(tmp_path / "inet").parts): p.read_bytes()
            for p in (tmp_path / "inet").rglob("*.JPEG")}
    assert main(["upload", "--outputs", member, "--dataset", "inet", str(tmp_path / "inet")]) == 0  # auto: files
    assert "as files (--format auto)" in capsys.readouterr().err
    files_hash = manifest_of(client, "inet")["content_hash"]

    assert main(["shard", "--outputs", member, "--dataset", "inet", "--shard-mb", "0.01", "--workers", "4"]) == 0
    out = capsys.readouterr().out
    assert "shard: dataset inet: " in out and "its per-file blobs are kept" in out
    manifest = manifest_of(client, "inet")
    assert manifest["format"] == "shards" and manifest["converted_from"] == files_hash
    assert manifest["classes"] == ["n01440764", "n01443537"]
    assert samples_in_container(client, "inet", tmp_path) == made_set(made)
    assert "datasets/inet/train/n01440764/n01440764_10026.JPEG" in names(url)
    assert main(["shard", "--outputs", member, "--dataset", "inet"]) == 1
    assert "is sharded already" in capsys.readouterr().err
    assert main(["shard", "--outputs", member, "--dataset", "nope"]) == 1
    assert "has no such dataset" in capsys.readouterr().err

    # The same through the trainer's CLI with a SAS, removing the per-file blobs; the sharded `default` passes the gate.
    assert main(["upload", "--outputs", member, "--format", "files", str(tmp_path / "inet")]) == 0
    result = cli("shard", azurite.container_url(container, "racwdl"), "--remove-files", "--shard-mb", "0.01")
    assert result.returncode == 0, result.stderr
    assert not [n for n in names(url) if n.startswith(("train/", "val/"))]
    assert samples_in_container(client, "default", tmp_path) == made_set(made)
    assert staging.data_ready(azurite.container_url(container, "rl")).ready
    assert datasets.names(client)[0] == "default"


def test_a_local_folder_sharded_then_uploaded_as_it_is(azurite, container, tmp_path):
    made = image_folder(tmp_path / "src", per_class=4, val_per_class=1)
    result = cli("shard", tmp_path / "src", tmp_path / "out", "--shard-mb", "0.01")
    assert result.returncode == 0, result.stderr
    assert "shard: " in result.stdout and (tmp_path / "out" / "shards" / "train-000000.idx").is_file()
    url = azurite.container_url(container, "racwl")
    result = cli("upload", tmp_path / "out", url, "--prefix", "datasets/pets/")
    assert result.returncode == 0, result.stderr
    client = ContainerClient.from_container_url(url)
    local = json.loads((tmp_path / "out" / "dataset.json").read_text())
    remote = manifest_of(client, "pets")
    assert remote["shards"] == local["shards"] and remote["content_hash"] == local["content_hash"]
    assert samples_in_container(client, "pets", tmp_path) == made_set(made)
    tar = local["shards"]["train"][0]["name"]
    # A create+write-only SAS: every shard goes up (nothing to compare with), the manifest last; nothing is deleted.
    blind = cli("upload", tmp_path / "out", azurite.container_url(container, "cw"), "--prefix", "datasets/w/")
    assert blind.returncode == 0, blind.stderr
    assert "blobs the manifest does not list stay" in blind.stderr
    assert manifest_of(client, "w")["content_hash"] == local["content_hash"]
    # A damaged local shard is refused before anything moves; a non-empty DEST is refused; a bad prefix too.
    (tmp_path / "out" / tar).write_bytes(b"broken")
    again = cli("upload", tmp_path / "out", azurite.container_url(container, "racwl"), "--prefix", "datasets/b/")
    assert again.returncode == 2 and "its MD5 is not its manifest's" in again.stderr
    assert not [n for n in names(url) if n.startswith("datasets/b/")]
    assert "not empty" in cli("shard", tmp_path / "src", tmp_path / "out").stderr
    odd = cli("upload", tmp_path / "out", url, "--prefix", "x/")
    assert odd.returncode == 2 and "--prefix x/: a sharded dataset goes at no prefix" in odd.stderr


def test_auto_picks_shards_at_ten_thousand_images_or_one_gib():
    assert sharding.choose("auto", 9_999, 2**30 - 1) == "files"
    assert sharding.choose("auto", 10_000, 0) == "shards"
    assert sharding.choose("auto", 1, 2**30) == "shards"
    assert sharding.choose("files", 10**6, 2**40) == "files" and sharding.choose("shards", 1, 1) == "shards"


def test_an_upload_stopped_midway_is_no_dataset_and_its_rerun_sends_only_the_rest(azurite, container, tmp_path):
    image_folder(tmp_path / "src", per_class=10, val_per_class=0)  # 30 images, about one a shard
    url = azurite.container_url(container, "racwdl")
    run = cli_background("upload", tmp_path / "src", url, "--format", "shards", "--shard-mb", "0.002")
    seen = []
    for line in run.stderr:
        seen.append(line)
        if line.startswith("shard: shards/train-000003.tar"):
            run.terminate()  # SIGTERM while shards are going up
            break
    run.communicate(timeout=60)
    assert run.returncode != 0, "".join(seen)
    client = ContainerClient.from_container_url(url)
    assert "dataset.json" not in names_with_manifest(client)  # no manifest: not a dataset yet
    assert datasets.describe(client, "default") is None and datasets.names(client) == ["default"]
    sent = len([n for n in names_with_manifest(client) if n.endswith(".tar")])
    assert 1 <= sent < 30
    again = cli("upload", tmp_path / "src", url, "--format", "shards", "--shard-mb", "0.002")
    assert again.returncode == 0, again.stderr
    manifest = manifest_of(client, "default")
    total = len(manifest["shards"]["train"])
    assert total >= 25 and f"{total - sent} transferred, {sent} skipped" in again.stdout
    assert len(samples_in_container(client, "default", tmp_path)) == 30


def names_with_manifest(client):
    return [blob.name for blob in client.list_blobs()]
