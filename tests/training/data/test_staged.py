"""`stage --mark/--report` (the NFS server's staging unit) and the deployer's gate (infra/backends/staging.py)
against a real blob service: a dataset uploaded after the stack exists is staged on the next run, an empty one
never is, a change is restaged, and the gate refuses any copy that is not the container's listing now."""
import json
import shutil
import uuid
from pathlib import Path

import pytest
from azure.storage.blob import ContainerClient

from infra.backends.batch import spec as batch_spec
from infra.core import containers as layout
from infra.backends import staging
from tests.training.data.conftest import cli, make_tree
from training.data import staged


@pytest.fixture
def stack(azurite):
    """A `data` and a `status` container, as the stack declares them, and the URLs each side uses."""
    names = {c: f"{c}{uuid.uuid4().hex[:8]}" for c in ("data", "status")}
    for name in names.values():
        azurite.create_container(name)
    return {"data": azurite.container_url(names["data"], "rl"), "data_write": azurite.container_url(names["data"], "racwl"),
            "status": azurite.container_url(names["status"], "racwdl")}


def run_unit(stack, dest, *extra):
    """What the staging unit runs on each tick of its timer."""
    return cli("stage", stack["data"], dest, "--report", stack["status"], "--workers", "4", *extra)


def report(stack):
    return json.loads(ContainerClient.from_container_url(stack["status"]).download_blob(
        layout.STAGED_BLOB).readall())


def test_an_empty_container_is_never_staged_and_data_uploaded_later_is(stack, tmp_path):
    dest = tmp_path / "nfs" / layout.DATASET
    first = run_unit(stack, dest)
    assert first.returncode == staged.EXIT_NO_DATA, first.stderr
    assert "waiting for data" in first.stdout and not (dest / staged.MARKER).exists()
    assert report(stack)["state"] == "waiting for data"
    gate = staging.data_ready(stack["data"], stack["status"])
    assert not gate.ready and "the `data` container is empty" in gate.line
    # The deployer uploads once the stack exists; the next tick stages every file and marks it.
    src = make_tree(tmp_path / "src" / "train", files=40).parent  # the trainer's train/<class>/ (the gate checks)
    assert cli("upload", src, stack["data_write"], "--workers", "4").returncode == 0
    assert not staging.data_ready(stack["data"], stack["status"]).ready  # the server has not seen it yet
    second = run_unit(stack, dest)
    assert second.returncode == 0, second.stderr
    assert "first staging: staged 40 files" in second.stdout
    assert sum(1 for p in dest.rglob("*.bin")) == 40
    marker = json.loads((dest / staged.MARKER).read_text())
    assert marker["state"] == "staged" and marker["files"] == 40
    assert report(stack)["fingerprint"] == marker["fingerprint"]
    gate = staging.data_ready(stack["data"], stack["status"])
    assert gate.ready and "staged 40 files" in gate.line
    # Unchanged: one listing, nothing transferred.
    third = run_unit(stack, dest)
    assert third.returncode == 0 and "unchanged since staged 40 files" in third.stdout, third.stdout


def test_a_change_unmarks_the_copy_until_it_is_restaged(stack, tmp_path):
    dest = tmp_path / "imagenet"
    src = make_tree(tmp_path / "src" / "train", files=10).parent
    cli("upload", src, stack["data_write"])
    assert run_unit(stack, dest).returncode == 0
    (src / "train" / "d0" / "new.bin").write_bytes(b"late file")
    cli("upload", src, stack["data_write"])
    gate = staging.data_ready(stack["data"], stack["status"])
    assert not gate.ready and "changed since the NFS server staged it (10 files staged, 11 now)" in gate.line
    again = run_unit(stack, dest)
    assert "the container changed: staged 11 files" in again.stdout, again.stdout
    assert (dest / "train" / "d0" / "new.bin").read_bytes() == b"late file"
    assert staging.data_ready(stack["data"], stack["status"]).ready


def test_a_restage_request_is_served_once_and_the_recheck_interval_is_kept(stack, tmp_path):
    dest = tmp_path / "imagenet"
    cli("upload", make_tree(tmp_path / "src", files=5), stack["data_write"])
    assert run_unit(stack, dest, "--recheck-minutes", "15").returncode == 0
    quiet = run_unit(stack, dest, "--recheck-minutes", "15")
    assert "is listed again after" in quiet.stdout, quiet.stdout  # no listing within the interval
    (dest / "d0" / "f0000.bin").unlink()  # a copy damaged on the server: the fingerprint cannot see it
    staging.request_restage(stack["status"])
    served = run_unit(stack, dest, "--recheck-minutes", "15")
    assert "restage asked: staged 5 files" in served.stdout, served.stdout
    assert (dest / "d0" / "f0000.bin").is_file()
    status = ContainerClient.from_container_url(stack["status"])
    assert staged.request_name(layout.DATASET) not in [b.name for b in status.list_blobs()]
    assert "is listed again after" in run_unit(stack, dest, "--recheck-minutes", "15").stdout


def test_without_a_report_the_gate_waits_for_the_server(stack, tmp_path):
    cli("upload", make_tree(tmp_path / "src" / "train", files=3).parent, stack["data_write"])
    gate = staging.data_ready(stack["data"], stack["status"])
    assert not gate.ready and "has not reported on the data yet" in gate.line
    # Without an NFS server (azure-files, azureml) a non-empty container is enough.
    assert staging.data_ready(stack["data"]).ready


def test_an_older_servers_plain_report_is_not_taken_for_staged(stack, tmp_path):
    cli("upload", make_tree(tmp_path / "src", files=3), stack["data_write"])
    ContainerClient.from_container_url(stack["status"]).upload_blob(layout.STAGED_BLOB, b"staged by nfs-dev\n")
    assert not staging.data_ready(stack["data"], stack["status"]).ready


def test_the_report_blob_is_the_one_the_deployer_reads():
    assert staged.report_name(layout.DATASET) == layout.STAGED_BLOB
    assert staged.MARKER == layout.STAGED_MARKER


def test_restage_asks_the_server_through_status_and_follows_its_reports(stack, tmp_path, capsys):
    """`python -m infra restage`: the deployer cannot reach the server; it writes the request into `status`, which
    the server's unit reads on its next tick, and --follow prints the reports until the request is served."""
    import threading

    from infra.cli.main import main

    dest = tmp_path / "imagenet"
    cli("upload", make_tree(tmp_path / "src", files=5), stack["data_write"])
    assert run_unit(stack, dest, "--recheck-minutes", "15").returncode == 0
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"containerUrls": {"data": stack["data"], "status": stack["status"]}}))
    # The dev stack as it stages through its NFS server (dataTier nfs): under node-local there is nothing to restage.
    project = tmp_path / "project"
    project.mkdir()
    repo = Path(__file__).resolve().parents[3]
    shutil.copy(repo / "Pulumi.yaml", project)
    (project / "Pulumi.dev.yaml").write_text((repo / "Pulumi.dev.yaml").read_text()
                                             + "  azure-dl-training:dataTier: nfs\n")
    flags = ["--outputs", str(outputs), "--project-dir", str(project)]
    assert main(["restage", "--stack", "dev", *flags]) == 0
    out = capsys.readouterr().out
    assert "asked the NFS server of stack dev to stage `data` again" in out and "staged 5 files" in out
    assert staging.restage_pending(stack["status"])
    codes = []
    follow = threading.Thread(target=lambda: codes.append(main(
        ["restage", "--stack", "dev", *flags, "--follow", "--poll-seconds", "0.2"])))
    follow.start()
    served = run_unit(stack, dest, "--recheck-minutes", "15")  # the timer's next tick
    follow.join(timeout=60)
    assert codes == [0] and "restage asked: staged 5 files" in served.stdout
    assert not staging.restage_pending(stack["status"])


def test_restage_is_refused_where_no_nfs_server_stages(tmp_path, capsys):
    from infra.cli.main import main

    (tmp_path / "outputs.json").write_text("{}")  # the refusal comes before the outputs are read
    assert main(["restage", "--stack", "nlp", "--outputs", str(tmp_path / "outputs.json")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "restage applies to nfsKind vm" in err


def test_the_azure_files_jobs_stage_line_marks_only_a_non_empty_container(stack, tmp_path):
    """With nfsKind azure-files the job stages `data` itself at its start (infra/backends/batch/spec.py stage_data),
    run here in bash as the task runs it: an empty container fails the job unmarked; data is staged and marked."""
    import os
    import shlex
    import subprocess
    import sys

    from infra import REPO_ROOT

    dataset = tmp_path / "share" / "imagenet"
    line = batch_spec.stage_data(shlex.quote(str(dataset)), stack["data"])
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin"}
    empty = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, timeout=120)
    assert empty.returncode == staged.EXIT_NO_DATA and "waiting for data" in empty.stdout
    assert not (dataset / staged.MARKER).exists()
    cli("upload", make_tree(tmp_path / "src", files=4), stack["data_write"])
    filled = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, timeout=120)
    assert filled.returncode == 0 and "first staging: staged 4 files" in filled.stdout, filled.stderr
    assert json.loads((dataset / staged.MARKER).read_text())["files"] == 4
