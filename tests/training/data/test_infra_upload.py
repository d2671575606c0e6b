"""`python -m infra upload` and the submit gate on a real blob service (Azurite): a folder in the trainer's layout
goes into the stack's `data` container, a flat one is refused before a byte moves, and the gate refuses a
container whose layout has no classes."""
import json

from azure.storage.blob import ContainerClient

from infra.backends import staging
from infra.cli.main import main
from tests.training.data.conftest import cli


def image_tree(root, *names):
    from PIL import Image

    for index, name in enumerate(names):  # real images: upload decodes each before sending (decode_check.py)
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (index * 20 % 256, 0, 0)).save(path, format="PNG" if name.endswith(".png") else "JPEG")
    return root


def outputs_for(tmp_path, data_url):
    """The stack's outputs as a member file has them; the `data` URL here carries Azurite's SAS, as a test's own
    stand-in for the member's Azure AD sign-in (a member file never holds one)."""
    path = tmp_path / "member-dev.json"
    path.write_text(json.dumps({"memberFileOfStack": "dev", "containerUrls": {"data": data_url}}))
    return path


def names(url):
    """The container's blobs but the datasets' manifests (training/data/datasets.py: MANIFEST)."""
    return sorted(blob.name for blob in ContainerClient.from_container_url(url).list_blobs()
                  if not blob.name.endswith("dataset.json"))


def test_a_folder_in_the_trainers_layout_goes_up_and_the_gate_lets_it_train(azurite, container, tmp_path, capsys):
    src = image_tree(tmp_path / "pets", "train/cat/1.jpg", "train/dog/2.JPEG", "train/ship/3.png", "val/cat/4.jpg",
                     "val/dog/5.jpg", "val/ship/6.jpg")
    url = azurite.container_url(container, "racwl")
    assert main(["upload", "--outputs", str(outputs_for(tmp_path, url)), str(src), "--workers", "2"]) == 0
    out, err = capsys.readouterr()
    assert "pets: 3 classes, 3 training images, 3 validation images" in err and "6 transferred" in out
    assert "python -m infra submit --outputs" in out
    assert names(url)[:3] == ["train/cat/1.jpg", "train/dog/2.JPEG", "train/ship/3.png"]
    assert staging.data_ready(azurite.container_url(container, "rl")).ready


def test_a_flat_folder_is_refused_before_a_byte_moves_and_by_the_gate(azurite, container, tmp_path, capsys):
    src = image_tree(tmp_path / "flat", "1.jpg", "2.jpg", "3.jpg")
    url = azurite.container_url(container, "racwl")
    outputs = outputs_for(tmp_path, url)
    assert main(["upload", "--outputs", str(outputs), str(src)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no class folders with images under train/ (3 images outside class folders)" in err
    assert "expected train/<class>/IMAGE" in err and f"{src}/train/cat/1.jpg" in err and "--no-layout-check" in err
    assert names(url) == []
    assert main(["upload", "--outputs", str(outputs), str(tmp_path / "nothing")]) == 1  # no such folder
    assert "no such folder" in capsys.readouterr().err
    # Another tree, as it is: then the gate refuses it before any job (or node) starts.
    assert main(["upload", "--outputs", str(outputs), str(src), "--no-layout-check"]) == 0
    assert names(url) == ["1.jpg", "2.jpg", "3.jpg"]
    gate = staging.data_ready(azurite.container_url(container, "rl"))
    assert not gate.ready and "not a dataset the trainer reads: no class folders" in gate.line
    assert "expected train/<class>/IMAGE" in gate.line


def test_the_generic_upload_still_copies_any_tree(azurite, container, tmp_path):
    src = image_tree(tmp_path / "flat", "1.jpg")
    result = cli("upload", src, azurite.container_url(container, "racwl"))
    assert result.returncode == 0 and "upload: note: " in result.stderr and "uploading it as it is" in result.stderr
    assert names(azurite.container_url(container, "rl")) == ["1.jpg"]


def test_an_upload_into_a_container_with_other_classes_is_refused_unless_added(azurite, container, tmp_path, capsys):
    """A member's 3 classes into a container that holds the stack's earlier dataset would train a model on both:
    refused before a byte moves, with the fix; --add merges on purpose."""
    url = azurite.container_url(container, "racwl")
    outputs = outputs_for(tmp_path, url)
    earlier = image_tree(tmp_path / "earlier", "train/n01/1.jpg", "train/n02/2.jpg", "train/cat/3.jpg")
    assert main(["upload", "--outputs", str(outputs), str(earlier)]) == 0
    # The same classes again (a rerun, or more images of them) need no --add.
    assert main(["upload", "--outputs", str(outputs), str(earlier)]) == 0
    capsys.readouterr()
    pets = image_tree(tmp_path / "pets", "train/cat/1.jpg", "train/dog/2.jpg", "train/ship/3.jpg")
    assert main(["upload", "--outputs", str(outputs), str(pets)]) == 1
    err = capsys.readouterr().err
    line = err.splitlines()[-1]
    assert "already holds 2 class(es) that it lacks (n01, n02)" in line and "--add" in line, err
    assert names(url) == ["train/cat/3.jpg", "train/n01/1.jpg", "train/n02/2.jpg"]  # nothing moved
    assert main(["upload", "--outputs", str(outputs), str(pets), "--add"]) == 0
    assert names(url) == ["train/cat/1.jpg", "train/cat/3.jpg", "train/dog/2.jpg", "train/n01/1.jpg",
                          "train/n02/2.jpg", "train/ship/3.jpg"]
