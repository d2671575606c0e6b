"""Named datasets (training/data/datasets.py) on a real blob service (Azurite): two members' datasets with their
own classes side by side in one `data` container, listed, replaced and removed through `python -m infra`; staged
as the NFS server stages the container, each in its own folder with its manifest, which the trainer reads."""
from pathlib import Path

from azure.storage.blob import ContainerClient

from infra.cli.main import main
from training.data import datasets
from training.data.stage import stage
from training.data.transfer import ContainerTarget
from tests.training.data.test_infra_upload import image_tree, names, outputs_for


def test_two_datasets_keep_their_own_classes_and_are_listed_replaced_and_removed(azurite, container, tmp_path, capsys):
    url = azurite.container_url(container, "racwdl")
    member = str(outputs_for(tmp_path, url))
    old = image_tree(tmp_path / "old", "train/n01/1.jpg", "train/n02/2.jpg")  # a stack's one dataset from before
    assert main(["upload", "--outputs", member, str(old)]) == 0
    pets = image_tree(tmp_path / "pets", "train/cat/1.jpg", "train/dog/2.jpg", "val/cat/3.jpg")
    boats = image_tree(tmp_path / "boats", "train/ship/1.jpg", "train/yacht/2.jpg")
    assert main(["upload", "--outputs", member, "--dataset", "pets", str(pets)]) == 0  # not refused: n01, n02
    assert f"python -m infra submit --outputs {member} --dataset pets" in capsys.readouterr().out
    assert main(["upload", "--outputs", member, "--dataset", "boats", str(boats)]) == 0
    assert "train/cat/1.jpg" not in names(url) and "datasets/pets/train/cat/1.jpg" in names(url)
    capsys.readouterr()
    # The refusal is per dataset: a folder lacking one of pets' classes, not the other datasets'.
    cats = image_tree(tmp_path / "cats", "train/cat/9.jpg")
    assert main(["upload", "--outputs", member, "--dataset", "pets", str(cats)]) == 1
    line = capsys.readouterr().err.strip()
    assert "dataset pets in the stack's `data` container already holds 1 class(es) that it lacks (dog)" in line
    assert main(["upload", "--outputs", member, "--dataset", "Pets!", str(cats)]) == 1
    assert "--dataset 'Pets!': give 1 to 32 lowercase letters" in capsys.readouterr().err

    assert main(["datasets", "--outputs", member]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [row.split(":")[0] for row in listed] == ["default", "boats", "pets"]
    assert listed[2].startswith("pets: 2 class(es) (cat, dog), 2 train, 1 val images, ") and "uploaded by " in listed[2]
    assert " MB, files, uploaded by " in listed[2]  # the format: a blob per image (shards: test_shard_upload.py)
    assert "sha256:" in listed[2]

    # --replace: the dataset becomes the folder (dog goes), the others stay as they were.
    assert main(["upload", "--outputs", member, "--dataset", "pets", "--replace", str(cats)]) == 0
    assert "--replace deleted 3 blob(s) the folder lacks" in capsys.readouterr().out
    client = ContainerClient.from_container_url(url)
    assert datasets.classes(client, "pets") == ["cat"] and datasets.classes(client, "boats") == ["ship", "yacht"]
    assert datasets.classes(client, "default") == ["n01", "n02"]
    assert datasets.read_manifest(client, "pets")["classes"] == ["cat"]

    assert main(["datasets", "--outputs", member, "--remove", "boats"]) == 0
    assert "removed dataset boats: 3 blob(s) deleted" in capsys.readouterr().out
    assert datasets.names(client) == ["default", "pets"]
    assert main(["datasets", "--outputs", member, "--remove", "boats"]) == 1
    assert "has no dataset boats" in capsys.readouterr().err


def test_the_staged_container_holds_each_dataset_in_its_folder_with_its_manifest(azurite, container, tmp_path):
    url = azurite.container_url(container, "racwdl")
    member = str(outputs_for(tmp_path, url))
    pets = image_tree(tmp_path / "pets", "train/cat/1.jpg", "train/dog/2.jpg")
    assert main(["upload", "--outputs", member, "--dataset", "pets", str(pets)]) == 0
    again = datasets.describe(ContainerClient.from_container_url(url), "pets")
    staged = tmp_path / "nfs" / "imagenet"
    stage(ContainerTarget.parse(azurite.container_url(container, "rl")), staged, "", 2, extract=False)
    folder = Path(datasets.folder_of(str(staged), "pets"))
    assert sorted(p.name for p in (folder / "train").iterdir()) == ["cat", "dog"]
    manifest = datasets.manifest_of(folder)
    assert manifest["name"] == "pets" and manifest["content_hash"] == again.content_hash
    assert datasets.card_text(folder) == f"pets {again.content_hash}"
    assert datasets.card_text(tmp_path) == ""  # a folder with no manifest: nothing recorded
    # Removed from the container, removed on the next staging (only the datasets' folders are compared).
    (staged / "notes.txt").write_text("mine")
    assert main(["datasets", "--outputs", member, "--remove", "pets"]) == 0
    stage(ContainerTarget.parse(azurite.container_url(container, "rl")), staged, "", 2, extract=False)
    assert not folder.exists() and (staged / "notes.txt").is_file()


def test_the_model_card_records_the_dataset():
    from training.model_card import ModelCard

    card = ModelCard(num_classes=2, image_size=64, classes=("cat", "dog"), dataset="pets sha256:ab")
    assert ModelCard.from_metadata(card.metadata(), 2, 64).dataset == "pets sha256:ab"


def test_the_content_hash_is_the_images_not_the_upload():
    one = datasets.summarize("a", [("train/cat/1.jpg", 3, "aa"), ("train/dog/2.jpg", 4, "bb"), ("dataset.json", 9, "x")])
    two = datasets.summarize("b", [("train/dog/2.jpg", 4, "bb"), ("train/cat/1.jpg", 3, "aa")])
    assert one.content_hash == two.content_hash and one.bytes == 7 and one.images == {"train": 2, "val": 0}
    assert datasets.summarize("c", [("train/cat/1.jpg", 3, "ab")]).content_hash != one.content_hash
    assert datasets.summarize("d", [("notes.txt", 1, "cc")]) is None
    assert datasets.prefix("default") == "" and datasets.prefix("pets") == "datasets/pets/"


def test_the_gate_passes_a_container_of_named_datasets_alone_and_still_checks_the_root(azurite, container, tmp_path):
    from infra.backends import staging

    url = azurite.container_url(container, "racwdl")
    member = str(outputs_for(tmp_path, url))
    assert main(["upload", "--outputs", member, "--dataset", "pets",
                 str(image_tree(tmp_path / "pets", "train/cat/1.jpg"))]) == 0
    alone = staging.data_ready(azurite.container_url(container, "rl"))
    assert alone.ready  # no root: nothing there to refuse
    assert not alone.default and alone.named == ("pets",)  # but a job on `default` is refused (require_staged)
    assert main(["upload", "--outputs", member, "--no-layout-check", str(image_tree(tmp_path / "flat", "1.jpg"))]) == 0
    gate = staging.data_ready(azurite.container_url(container, "rl"))
    assert not gate.ready and "no class folders with images under train/" in gate.line
