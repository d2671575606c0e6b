import hashlib
import re
import signal
import tarfile
import time

import pytest
from azure.storage.blob import ContainerClient

from tests.training.data.conftest import cli, cli_background, make_tree, tree
from training.data import transfer
from training.errors import UsageError


def _sig(url):
    return re.search(r"sig=([^&]+)", url).group(1)


def test_round_trip_small_files_and_one_larger_than_a_block(azurite, container, tmp_path):
    src = make_tree(tmp_path / "src", files=120, big=transfer.BLOCK_SIZE * 2 + 12345)
    write_url, read_url = azurite.container_url(container, "racwl"), azurite.container_url(container, "rl")
    up = cli("upload", src, write_url, "--workers", "8")
    assert up.returncode == 0, up.stderr
    assert "121 transferred" in up.stdout
    blobs = list(ContainerClient.from_container_url(read_url).list_blobs())
    assert len(blobs) == 121
    for blob in blobs:  # every blob carries the MD5 of its source file
        expected = hashlib.md5((src / blob.name).read_bytes()).digest()
        assert bytes(blob.content_settings.content_md5) == expected, blob.name
    staged = cli("stage", read_url, tmp_path / "dest", "--workers", "8")
    assert staged.returncode == 0, staged.stderr
    assert tree(tmp_path / "dest") == tree(src)
    assert not list((tmp_path / "dest").rglob("*.part"))
    for result in (up, staged):
        assert _sig(write_url) not in result.stdout + result.stderr
        assert _sig(read_url) not in result.stdout + result.stderr


def test_reruns_skip_what_is_already_there(azurite, container, tmp_path):
    src = make_tree(tmp_path / "src", files=30)
    write_url, read_url = azurite.container_url(container, "racwl"), azurite.container_url(container, "rl")
    assert cli("upload", src, write_url).returncode == 0
    again = cli("upload", src, write_url)
    assert "0 transferred, 30 skipped" in again.stdout, again.stdout
    assert cli("stage", read_url, tmp_path / "dest").returncode == 0
    (tmp_path / "dest" / "d0" / "f0000.bin").write_bytes(b"changed locally")  # same name, wrong content
    again = cli("stage", read_url, tmp_path / "dest")
    assert "1 transferred, 29 skipped" in again.stdout, again.stdout
    assert tree(tmp_path / "dest") == tree(src)


def test_killed_stager_leaves_nothing_corrupt_and_rerun_finishes(azurite, container, tmp_path):
    src = make_tree(tmp_path / "src", files=400, size=60_000)
    assert cli("upload", src, azurite.container_url(container, "racwl"), "--workers", "16").returncode == 0
    read_url, dest = azurite.container_url(container, "rl"), tmp_path / "dest"
    stager = cli_background("stage", read_url, dest, "--workers", "2")
    deadline = time.monotonic() + 60
    while len([p for p in dest.rglob("*.bin")]) < 40:
        assert time.monotonic() < deadline and stager.poll() is None
        time.sleep(0.05)
    stager.send_signal(signal.SIGKILL)
    stager.wait()
    finished = {p: p.stat().st_mtime_ns for p in dest.rglob("*.bin")}
    assert 40 <= len(finished) < 400
    source = tree(src)
    for path in finished:  # whatever carries a final name is whole
        assert path.read_bytes() == source[path.relative_to(dest).as_posix()]
    rerun = cli("stage", read_url, dest)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{len(finished)} skipped" in rerun.stdout, rerun.stdout
    assert tree(dest) == source
    assert all(path.stat().st_mtime_ns == mtime for path, mtime in finished.items())  # not downloaded again


def test_azurite_restarted_mid_stage(azurite, container, tmp_path):
    src = make_tree(tmp_path / "src", files=300, size=60_000)
    assert cli("upload", src, azurite.container_url(container, "racwl"), "--workers", "16").returncode == 0
    dest = tmp_path / "dest"
    stager = cli_background("stage", azurite.container_url(container, "rl"), dest, "--workers", "2")
    deadline = time.monotonic() + 60
    while len(list(dest.rglob("*.bin"))) < 30:
        assert time.monotonic() < deadline and stager.poll() is None
        time.sleep(0.05)
    azurite.stop()
    time.sleep(2)
    azurite.start()
    out, err = stager.communicate(timeout=180)
    source = tree(src)
    for path in dest.rglob("*.bin"):
        assert path.read_bytes() == source[path.relative_to(dest).as_posix()]
    if stager.returncode == 0:
        assert tree(dest) == source  # the SDK's retries or ours carried it over the outage
    else:  # a clear failure is acceptable; a hang or corruption is not
        lines = err.strip().splitlines()
        assert lines[-1].startswith("error: stage stopped"), err


def test_read_only_sas_cannot_upload_and_is_refused_before_any_request(azurite, container, tmp_path):
    url = azurite.container_url(container, "rl")
    result = cli("upload", make_tree(tmp_path / "src", files=3), url)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last == "error: CONTAINER_URL: the SAS grants sp=rl, but upload needs cw (lacks cw); use the container's cw SAS"
    assert _sig(url) not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_expired_sas_is_refused_clearly(azurite, container, tmp_path):
    url = azurite.container_url(container, "rl", hours=-1)
    result = cli("stage", url, tmp_path / "dest")
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: CONTAINER_URL: the SAS expired at ") and "get a fresh one" in last, result.stderr
    assert _sig(url) not in result.stdout + result.stderr


def test_list_only_sas_cannot_read_and_says_which_permission(azurite, container, tmp_path):
    cli("upload", make_tree(tmp_path / "src", files=3), azurite.container_url(container, "racwl"))
    url = azurite.container_url(container, "l")  # listing would work, every GET would be refused
    result = cli("stage", url, tmp_path / "dest")
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last == "error: CONTAINER_URL: the SAS grants sp=l, but stage needs rl (lacks r); use the container's rl SAS"
    assert _sig(url) not in result.stdout + result.stderr
    assert not [p for p in (tmp_path / "dest").rglob("*") if p.is_file()]  # nothing half written


def test_blob_names_that_need_quoting_round_trip(azurite, container, tmp_path):
    src = tmp_path / "src"
    for name in ("a b/c+d.JPEG", "ü/%20.JPEG", "x/y#z?.JPEG"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(name.encode() * 100)
    assert cli("upload", src, azurite.container_url(container, "racwl")).returncode == 0
    assert cli("stage", azurite.container_url(container, "rl"), tmp_path / "dest").returncode == 0
    assert tree(tmp_path / "dest") == tree(src)


def test_missing_container_is_named(azurite, tmp_path):
    url = azurite.container_url("nosuchcontainer", "rl")
    result = cli("stage", url, tmp_path / "dest")
    assert result.returncode == 2 and "container does not exist" in result.stderr


def test_extract_streams_a_tar_gz_blob_into_the_same_tree(azurite, container, tmp_path):
    src = make_tree(tmp_path / "src", files=40)
    archive = tmp_path / "train.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname="train")
    expected = tmp_path / "local"
    with tarfile.open(archive) as tar:
        tar.extractall(expected, filter="data")
    upload_dir = tmp_path / "upload"
    upload_dir.mkdir()
    archive.rename(upload_dir / "train.tar.gz")
    assert cli("upload", upload_dir, azurite.container_url(container, "racwl"), "--prefix", "tars/").returncode == 0
    result = cli("stage", azurite.container_url(container, "rl"), tmp_path / "dest", "--prefix", "tars/",
                 "--extract")
    assert result.returncode == 0, result.stderr
    assert tree(tmp_path / "dest") == tree(expected)
    assert not (tmp_path / "dest" / "train.tar.gz").exists()  # no temporary copy of the archive


@pytest.mark.parametrize("url,words", [
    ("DefaultEndpointsProtocol=https;AccountName=a;AccountKey=abc==", "account keys are never accepted"),
    ("ftp://example/data", "not a container URL"),
    ("https://acct.blob.core.windows.net/", "exactly one container"),
    ("http://acct.blob.core.windows.net/data", "use https"),
])
def test_bad_container_urls(url, words):
    with pytest.raises(UsageError, match=words):
        transfer.ContainerTarget.parse(url)


def test_account_key_on_the_command_line_is_refused_in_one_line(tmp_path):
    result = cli("stage", "https://a.blob.core.windows.net/data?AccountKey=abc", tmp_path)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "account keys are never accepted" in result.stderr and "abc" not in result.stderr


@pytest.mark.parametrize("query,words", [
    ("sp=rl&se=2099-01-01T00:00:00Z", "the SAS lacks sv and sig"),
    ("sv=2024-01-01&sp=rl&se=2099-01-01T00:00:00Z", "the SAS lacks sig"),
    ("sv=2024-01-01&se=2099-01-01T00:00:00Z&sig=x", "grants sp=(none), but stage needs rl"),
])
def test_a_sas_is_checked_before_the_first_request(query, words):
    with pytest.raises(UsageError, match=re.escape(words)) as raised:
        transfer.ContainerTarget.parse(f"https://a.blob.core.windows.net/data?{query}", verb="stage")
    assert "\n" not in str(raised.value)


def test_an_unreachable_account_fails_in_seconds_not_minutes(tmp_path):
    # Port 9 on loopback: nothing listens, the connection is refused at once. Before the reachability check,
    # upload retried every file for minutes (4.5 min measured against an unreachable endpoint).
    url = "http://127.0.0.1:9/devstoreaccount1/data?sv=2024-01-01&sp=cw&sig=SECRET"
    for verb, args in (("upload", [make_tree(tmp_path / "src", files=3), url]), ("stage", [url.replace("cw", "rl"),
                                                                                           tmp_path / "dest"])):
        result = cli(verb, *args, timeout=60)
        assert result.returncode == 2, result.stderr
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith(f"error: {verb} stopped: cannot reach 127.0.0.1:9") and "allowedIpRanges" in last
        assert "SECRET" not in result.stderr


def test_redact_keeps_the_query_mark():
    assert transfer.redact("GET https://a/c?sv=1&sp=rl&sig=x failed") == "GET https://a/c?sig=REDACTED failed"
    assert transfer.redact("https://a/c?sig=x&sv=1") == "https://a/c?sig=REDACTED"
    assert transfer.redact("https://a/c?restype=container&sv=1&sig=x") == "https://a/c?restype=container&sig=REDACTED"


def test_redact_removes_every_sas_value():
    url = "https://a.blob.core.windows.net/data?sv=2024-01-01&sp=rl&se=2026-01-01T00%3A00Z&sr=c&sig=SECRET%2Bx"
    assert "SECRET" not in transfer.redact(f"GET {url} failed") and "sig=REDACTED" in transfer.redact(url)
