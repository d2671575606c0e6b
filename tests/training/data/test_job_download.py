"""`python -m infra download`: a job's outputs from the outputs container (here Azurite), verified."""
import json

from infra.cli.main import main
from tests.training.data.conftest import cli, make_tree, tree
from tests.infra.backends.batch.test_operate import OUTPUTS


def no_batch(endpoint):
    raise AssertionError("download --job reads the outputs container only")


def test_download_fetches_only_that_jobs_outputs(azurite, container, tmp_path, capsys):
    src = make_tree(tmp_path / "src", files=6)
    write = azurite.container_url(container, "racwl")
    assert cli("upload", src, write, "--prefix", "train-dev-abc/run/").returncode == 0
    assert cli("upload", src / "d0", write, "--prefix", "train-dev-other/run/").returncode == 0
    outputs = {**OUTPUTS, "containerUrls": {**OUTPUTS["containerUrls"], "outputs": azurite.container_url(container, "rl")}}
    outputs_file = tmp_path / "outputs.json"
    outputs_file.write_text(json.dumps(outputs))
    dest = tmp_path / "results"
    code = main(["download", "--stack", "dev", "--outputs", str(outputs_file), "--job", "train-dev-abc",
                 "--dest", str(dest)], batch_factory=no_batch)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert tree(dest / "train-dev-abc" / "run") == tree(src)
    assert not (dest / "train-dev-other").exists()
    assert "sig=" not in out + err

    code = main(["download", "--stack", "dev", "--outputs", str(outputs_file), "--job", "train-dev-none",
                 "--dest", str(dest)], batch_factory=no_batch)
    _, err = capsys.readouterr()
    assert code == 1 and "no outputs for train-dev-none yet" in err


def test_the_staging_report_is_read_from_the_status_container(azurite, container):
    """infra/backends/staging.py against a real blob service: no report, then the report the NFS server writes
    (training/data/staged.py; tests/training/data/test_staged.py plays the server's whole life)."""
    from azure.storage.blob import ContainerClient

    from infra.core.containers import STAGED_BLOB
    from infra.backends import staging
    from training.data import staged

    url = azurite.container_url(container, "racwl")
    assert staging.read_report(url) is None
    report = staged.Report(staged.STAGED, 3, 300, "f" * 64, "2026-11-23T10:00:00Z", host="nfs-dev")
    ContainerClient.from_container_url(url).upload_blob(STAGED_BLOB, report.to_json().encode())
    assert staging.read_report(url) == report