"""The stager's GET path: listing page by page (on Azurite), and Azure AD access with one token for many
requests, renewed before it expires."""
import hashlib
import time
from types import SimpleNamespace

import pytest

from tests.training.data.conftest import cli, make_tree
from training.data import transfer
from training.data.blob_reader import STORAGE_SCOPE, BlobReader, _TokenCache
from training.data.stage import _blobs


def test_listing_follows_the_pages_and_reads_size_and_md5(azurite, container, tmp_path):
    src = make_tree(tmp_path / "src", files=20)
    assert cli("upload", src, azurite.container_url(container, "racwl"), "--prefix", "p/").returncode == 0
    assert cli("upload", src / "d0", azurite.container_url(container, "racwl"), "--prefix", "q/").returncode == 0
    reader = BlobReader(transfer.ContainerTarget.parse(azurite.container_url(container, "rl")), workers=2)
    reader.page_size = 7  # 20 blobs under p/: three pages
    listed = {blob.name: blob for blob in _blobs(reader, "p/", transfer.Stats())}
    files = {f"p/{path.relative_to(src).as_posix()}": path.read_bytes() for path in src.rglob("*") if path.is_file()}
    assert listed.keys() == files.keys()
    for name, data in files.items():
        assert listed[name].size == len(data) and listed[name].md5 == hashlib.md5(data).digest()


class CountingCredential:
    def __init__(self, lifetime_s):
        self.lifetime_s, self.calls = lifetime_s, []

    def get_token(self, scope):
        self.calls.append(scope)
        return SimpleNamespace(token=f"t{len(self.calls)}", expires_on=int(time.time() + self.lifetime_s))


def test_a_token_is_fetched_once_for_many_requests():
    credential = CountingCredential(3600)
    cache = _TokenCache(credential)
    assert {cache.header() for _ in range(100)} == {"Bearer t1"}
    assert credential.calls == [STORAGE_SCOPE]


def test_a_token_about_to_expire_is_renewed():
    credential = CountingCredential(120)  # inside the five-minute margin
    cache = _TokenCache(credential)
    assert [cache.header(), cache.header()] == ["Bearer t1", "Bearer t2"]


def test_a_token_never_goes_over_plain_http():
    from training.data.transfer import ContainerTarget
    from training.errors import UsageError

    credential = CountingCredential(3600)
    target = ContainerTarget.parse("http://127.0.0.1:10000/devstoreaccount1/data", "data container")
    with pytest.raises(UsageError, match="Azure AD sign-in is sent only over https"):
        BlobReader(target, 1, credential=credential)
    assert credential.calls == []
