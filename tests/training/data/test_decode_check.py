"""Upload refuses images that do not decode, before a byte moves, in one line naming them (decode_check.py)."""
import pytest
from PIL import Image

from infra.jobs import Upload, check_upload
from training.data import decode_check, upload
from training.errors import UsageError


def tree(root):
    for i, name in enumerate(("train/cat/1.jpg", "train/dog/2.jpg", "val/cat/3.png")):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (64, 48), (40 * i, 90, 0)).save(root / name)
    whole = (root / "train/cat/1.jpg").read_bytes()
    (root / "train/dog/cut.jpg").write_bytes(whole[: len(whole) // 2])  # opens, then fails in load()
    (root / "train/cat/text.jpg").write_text("not a photo")
    return root


def test_each_image_is_decoded_and_the_broken_ones_are_named(tmp_path):
    bad = decode_check.undecodable(tree(tmp_path))
    assert [name for name, _ in bad] == ["train/cat/text.jpg", "train/dog/cut.jpg"]
    assert dict(bad)["train/cat/text.jpg"] == "not an image PIL reads" and "truncated" in dict(bad)["train/dog/cut.jpg"].lower()
    assert decode_check.describe(bad).startswith("2 images do not decode: train/cat/text.jpg (not an image PIL reads), "
                                                 "train/dog/cut.jpg (")


def test_both_uploads_refuse_them_before_anything_is_sent(tmp_path):
    src = tree(tmp_path / "pets")
    with pytest.raises(UsageError, match=r"^DIR .*pets: 2 images do not decode: train/cat/text.jpg .*nothing was "
                                         r"uploaded$"):
        check_upload(Upload(src))
    assert check_upload(Upload(src, layout_check=False)) is None  # the way round it, as for the layout
    url = "https://nosuchaccount.blob.core.windows.net/data"  # never reached: the refusal comes first
    with pytest.raises(UsageError, match=r"^SRC .*pets: 2 images do not decode"):
        upload.main([str(src), url, "--check-layout"])
