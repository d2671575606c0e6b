"""The rehearsal under faults: a cancel from another shell, a cancel during the coordination command, identities
without their roles (the same two local nodes, Batch endpoint and Azurite as test_rehearsal.py). A Spot eviction and a
lost node, which need a spare node, are in test_rehearsal_node_faults.py (make test-faults)."""
import time

import pytest

from tests.devtools.rehearsal.rehearsal_runs import FAST, WHY_NOT, served, start_rehearsal, verb

pytestmark = pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or "-")


def test_cancel_from_another_shell_stops_the_task_without_a_retry(tmp_path):
    work = tmp_path / "work"
    rehearsal = start_rehearsal(work, FAST.replace("--steps 30", "--steps 3000"))
    deadline = time.monotonic() + 300
    while "step 5/" not in verb("logs", "--rehearsal", str(work)).stdout:
        assert rehearsal.poll() is None and time.monotonic() < deadline, rehearsal.communicate()
        time.sleep(3)  # each look is a verb's whole process, as from another shell: a few a minute will do
    asked = time.monotonic()
    cancel = verb("cancel", "--rehearsal", str(work))  # returns once Batch's job has left `terminating`
    assert cancel.returncode == 0 and "cancelled train-dev-" in cancel.stdout, cancel.stderr
    out, err = rehearsal.communicate(timeout=300)
    assert time.monotonic() - asked < 60, "the task did not stop within a minute"
    assert rehearsal.returncode == 1, out[-2000:] + err[-2000:]
    with served(work):
        status = verb("status", "--rehearsal", str(work)).stdout
    assert "cancelled" in status and "exit code 0" not in status and "retried 0 time(s)" in status, status

def test_a_job_cancelled_during_the_coordination_command_ends_without_a_retry_or_the_application(tmp_path):
    """Cancel arrives while the coordination command runs on the nodes (Batch's job terminate, through the real
    azure-batch client and the endpoint): the task ends, is not retried though retries are allowed, and the
    application command never starts (https://learn.microsoft.com/rest/api/batchservice/job/terminate: running
    tasks are terminated; https://learn.microsoft.com/azure/batch/batch-mpi: the application command runs only
    once every coordination command has finished). Batch's own part on two nodes, with no training: seconds."""
    from azure.batch import BatchClient

    from devtools.emulator import Azurite
    from devtools.rehearsal.batch import RehearsalBatch
    from devtools.rehearsal.batch_endpoint import BatchEndpoint
    from devtools.rehearsal.nodes import Pool
    from devtools.rehearsal.storage import Account
    from infra.backends.batch.service import AzureBatch
    from infra.core.config import stack as config
    from infra.preview import offline
    from tests.devtools.rehearsal import batch_rest_spec
    from tests.infra.backends.batch.fake_batch import _Token

    ev = offline.evaluate(config.from_stack_file("dev"))
    job = {"id": "cancel-in-coordination", "poolInfo": {"poolId": "gpu"}, "onAllTasksComplete": "noaction"}
    task = {"id": "train", "commandLine": "/bin/sh -c 'echo started > application-started'",
            "constraints": {"maxTaskRetryCount": 2},
            "multiInstanceSettings": {"numberOfInstances": 2,
                                      "coordinationCommandLine": "/bin/sh -c 'touch coordinating; sleep 120'"}}
    export = tmp_path / "export"
    export.mkdir()
    with Azurite(location=tmp_path / "azurite") as azurite, Pool(tmp_path / "nodes", 2, export, "nfs") as pool:
        batch = RehearsalBatch(pool, Account(azurite, ev), {"PATH": "/usr/bin:/bin"}, {}, {}, tmp_path, log=print)
        with BatchEndpoint(batch) as endpoint, BatchClient(endpoint.url, _Token(),
                                                           connection_verify=endpoint.ca_file) as client:
            service = AzureBatch(endpoint.url, client=client)
            service.submit(job, task)
            wd = [batch._task_dir(node, job["id"], "train") / "wd" for node in pool.nodes]
            deadline = time.monotonic() + 60
            while not all((folder / "coordinating").exists() for folder in wd):
                assert time.monotonic() < deadline, "the coordination command did not start on both nodes"
                time.sleep(0.1)
            asked = time.monotonic()
            service.terminate(job["id"])  # returns once the job has left `terminating`
            batch.wait(job["id"], timeout=60)
            took = time.monotonic() - asked
            ended = service.get_task(job["id"], "train")
            assert batch_rest_spec.violations(endpoint.responses) == []
    assert took < 10, f"the task took {took:.1f}s to stop"
    info = ended["executionInfo"]
    assert ended["state"] == "completed" and info["retryCount"] == 0 and info["exitCode"] != 0, ended
    assert batch.jobs[job["id"]]["state"] == "completed"
    assert len(batch.processes[job["id"]]) == 2  # the two coordination commands, no application command
    assert not (wd[0] / "application-started").exists() and batch.retried_at == []

def test_an_identity_without_the_role_is_refused_as_azure_would(tmp_path):
    """Storage access is what the program's role assignments grant: the NFS server's identity may read `data`
    and write `status`, never write `outputs`; the nodes may read `scripts` but not write there."""
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import ContainerClient

    from devtools.emulator import Azurite
    from devtools.rehearsal.storage import Account, principal_of
    from infra.preview import offline
    from infra.core.config import stack as config

    ev = offline.evaluate(config.from_stack_file("dev"))
    nodes = principal_of(ev, ev.outputs["pullIdentityId"])
    nfs = next(r.state["principalId"] for r in ev.of_type("azure-native:managedidentity:UserAssignedIdentity")
               if "nfs" in r.name)
    urls = ev.outputs["containerUrls"]
    with Azurite() as azurite:
        account = Account(azurite, ev)
        account.create_containers()
        assert account.upload_scripts() > 20
        ContainerClient.from_container_url(account.as_identity(nodes, urls["outputs"])).upload_blob("ok", b"1")
        assert list(ContainerClient.from_container_url(account.as_identity(nodes, urls["scripts"])).list_blobs())
        for principal, container in ((nfs, "outputs"), (nodes, "scripts"), (nodes, "status")):
            client = ContainerClient.from_container_url(account.as_identity(principal, urls[container]))
            with pytest.raises(HttpResponseError) as refused:
                client.upload_blob("x", b"1")
            assert refused.value.status_code == 403, (principal, container)

def test_a_job_whose_identity_cannot_read_the_scripts_fails_before_it_runs(tmp_path, capsys):
    """The task's common resource files come from `scripts` with the nodes' identity: without its Reader role
    the download is refused and the task fails without running, as Batch fails it."""
    from devtools.rehearsal.run import rehearse as run_rehearsal

    def revoke_the_nodes_scripts_reader(account):
        account.grants = [g for g in account.grants if not (g.container == "scripts" and "rl" == g.permissions
                                                              and "pull" in g.principal_id)]

    result = run_rehearsal("dev", 2, "pytorch", FAST, tmp_path, tamper_storage=revoke_the_nodes_scripts_reader)
    out = capsys.readouterr().out
    assert result.failure and result.failure["code"] == "ResourceFileDownloadFailed", out[-2000:]
    assert "AuthorizationPermissionMismatch" in result.failure["message"] or "403" in result.failure["message"]
    assert result.uploaded == [] or all("/logs/" in name for name in result.uploaded)
    assert "job train-dev" in out and "completed" in out

def test_the_nfs_servers_unit_fails_without_its_reader_role_on_data(tmp_path, monkeypatch):
    """dataTier nfs: the staging unit, written by cloud-init's code from the VM's user data and run as systemd starts
    it, signs in as the VM's identity: without Storage Blob Data Reader on `data` it is refused, and no job is
    submitted."""
    import dataclasses

    from devtools.rehearsal import run
    from devtools.rehearsal.nfs_server import StagingFailed
    from devtools.rehearsal.run import rehearse as run_rehearsal

    def nfs_tier(stack):
        cfg = rehearsed(stack)
        return dataclasses.replace(cfg, nfs=dataclasses.replace(cfg.nfs, data_tier="nfs"))

    rehearsed = run.rehearsed_config
    monkeypatch.setattr(run, "rehearsed_config", nfs_tier)

    def revoke_the_nfs_servers_data_reader(account):
        account.grants = [g for g in account.grants if not (g.container == "data" and "nfs" in g.principal_id)]

    with pytest.raises(StagingFailed) as failed:
        run_rehearsal("dev", 2, "pytorch", FAST, tmp_path, tamper_storage=revoke_the_nfs_servers_data_reader)
    message = str(failed.value)
    assert message.startswith("dltrain-stage.service exited with 2"), message  # the stager's usage/refusal code
    assert "not allowed: listing the container" in message and "Storage Blob Data Contributor" in message, message
    assert not (tmp_path / "batch-state.json").exists()  # nothing was submitted


def test_a_node_whose_identity_cannot_read_data_stops_the_job_before_any_rank(tmp_path, capsys):
    """dataTier node-local: the coordination command stages the dataset with the pool's identity; without its
    Reader role on `data` node-stage is refused in one line, the coordination command ends with its status before
    the job's sshd, and no rank starts (Batch retries the task; each try fails the same way)."""
    from devtools.rehearsal.run import rehearse as run_rehearsal

    def revoke_the_nodes_data_reader(account):
        account.grants = [g for g in account.grants if not (g.container == "data" and "pull" in g.principal_id)]

    result = run_rehearsal("dev", 2, "pytorch", FAST, tmp_path, tamper_storage=revoke_the_nodes_data_reader)
    out = capsys.readouterr().out
    assert result.exit_code == 2, out[-3000:]  # node-stage's exit status for what it cannot mend
    assert "[0]<stdout>" not in out and result.world_size == 0  # no rank started
    stderr = (result.downloaded / "logs" / "stderr.txt").read_text()
    assert "node-stage" in stderr and "error:" in stderr, stderr[-2000:]
    assert "data: the job's --data folder on node0 (local-data/datasets/default) holds no staged dataset" in out
