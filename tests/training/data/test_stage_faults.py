"""The data path under faults, through the real azure-storage-blob client against Azurite (and the kernel's own
ENOSPC from /dev/full): a SAS that expires mid-run is said to have expired (Azurite answers 403
AuthorizationFailure, Azure AuthenticationFailed: only the clock against `se` tells them from a firewall refusal),
a blob whose bytes do not match its Content-MD5 and a full disk stop at once naming the file, and a refused
connection is one line naming the endpoint."""
import dataclasses

import pytest
from azure.storage.blob import ContainerClient, ContentSettings

from tests.training.data.conftest import make_tree
from training.data import stage, transfer
from training.errors import UsageError


def test_a_sas_that_expired_after_the_run_began_is_said_to_have_expired(azurite, container, tmp_path):
    target = transfer.ContainerTarget.parse(azurite.container_url(container, "rl"), verb="stage")
    # What the run holds once its SAS has passed `se` (parse checked it while it was valid).
    expired = dataclasses.replace(target, url=azurite.container_url(container, "rl", hours=-1))
    with pytest.raises(UsageError) as raised:
        with transfer.stopping_cleanly("stage", expired):
            stage.stage(expired, tmp_path / "dest", "", 2, extract=False)
    line = str(raised.value)
    assert line.startswith("stage stopped: the SAS expired at ") and "get a fresh one" in line, line
    assert "firewall" not in line and "\n" not in line and "sig=" not in line


def test_a_firewall_refusal_with_a_valid_sas_still_names_the_firewall():
    err = transfer.classify(type("Refused", (Exception,), {"status_code": 403, "error_code": "AuthorizationFailure",
                                                           "message": "This request is not authorized"})(),
                            "listing the container")
    target = transfer.ContainerTarget.parse("https://acct.blob.core.windows.net/data?sv=2024-01-01&sp=rl&"
                                            "se=2999-01-01T00:00:00Z&sig=SECRET", verb="stage")
    with pytest.raises(UsageError, match="not in the storage firewall"):
        with transfer.stopping_cleanly("stage", target):
            raise err


def test_a_blob_whose_bytes_do_not_match_its_md5_stops_at_once_naming_it(azurite, container, tmp_path):
    write = ContainerClient.from_container_url(azurite.container_url(container, "racwl"))
    src = make_tree(tmp_path / "src", files=1)
    [path] = [p for p in src.rglob("*") if p.is_file()]
    name = path.relative_to(src).as_posix()
    write.upload_blob(name, path.read_bytes())
    # The blob's stored MD5 rewritten (Set Blob Properties does not check it against the bytes).
    write.get_blob_client(name).set_http_headers(ContentSettings(content_md5=bytearray(16)))
    target = transfer.ContainerTarget.parse(azurite.container_url(container, "rl"), verb="stage")
    stats = transfer.Stats()
    with pytest.raises(UsageError) as raised:
        with transfer.stopping_cleanly("stage", target):
            reader = stage.BlobReader(target, 1)
            stage.Stager(reader, tmp_path / "dest", "", False, stats)(next(iter(stage._blobs(reader, "", stats))))
    line = str(raised.value)
    assert line.startswith(f"stage stopped: {name}: MD5 ") and "upload it again" in line, line
    assert stats.retried == 0 and "attempts" not in line
    assert not list((tmp_path / "dest").rglob("*.part"))


def test_a_full_disk_stops_at_once_naming_the_file(azurite, container, tmp_path):
    src = make_tree(tmp_path / "src", files=1)
    [path] = [p for p in src.rglob("*") if p.is_file()]
    name = path.relative_to(src).as_posix()
    ContainerClient.from_container_url(azurite.container_url(container, "racwl")).upload_blob(name, path.read_bytes())
    dest = tmp_path / "dest"
    part = dest / (name + ".part")
    part.parent.mkdir(parents=True)
    part.symlink_to("/dev/full")  # the kernel answers every write there with ENOSPC, as a full disk does
    target = transfer.ContainerTarget.parse(azurite.container_url(container, "rl"), verb="stage")
    stats = transfer.Stats()
    with pytest.raises(UsageError) as raised:
        with transfer.stopping_cleanly("stage", target):
            reader = stage.BlobReader(target, 1)
            stage.Stager(reader, dest, "", False, stats)(next(iter(stage._blobs(reader, "", stats))))
    line = str(raised.value)
    assert line.startswith(f"stage stopped: download of {name}: No space left on device ({part})"), line
    assert "free space" in line and stats.retried == 0 and "attempts" not in line


def test_a_refused_connection_is_one_line_naming_the_endpoint():
    # Port 9 on loopback: nothing listens, the connection is refused (the real SDK's error, its retries off).
    url = "http://127.0.0.1:9/devstoreaccount1/data?sv=2024-01-01&sp=rl&se=2999-01-01T00:00:00Z&sig=SECRET"
    target = transfer.ContainerTarget.parse(url, verb="stage")
    client = ContainerClient.from_container_url(url, retry_total=0)
    with pytest.raises(UsageError) as raised:
        with transfer.stopping_cleanly("stage", target):
            client.get_container_properties()
    line = str(raised.value)
    assert line.startswith("stage stopped after 6 attempts: 127.0.0.1:9 refused the connection"), line
    assert "\n" not in line and "SECRET" not in line and "urllib3" not in line and "HTTPConnection" not in line
