"""The TrainingJob dynamic provider and the `python -m infra` job verbs, through the real AzureBatch and azure-batch
client, against a local Batch REST endpoint (tests/infra/backends/batch/fake_batch.py)."""
import dataclasses
import io
import json
import logging

import pytest

from infra.backends.batch import operate
from infra.backends.batch import spec as batch_spec
from infra.core.config import stack as config
from infra.cli.main import main
from infra.backends.shared import StackOutputs, load_outputs, now_utc
from infra.backends.batch.training_job import INPUT_FIELDS, TrainingJobProvider
from infra.backends.staging import Readiness
from tests.infra.backends.batch.test_spec import inputs

OUTPUTS = {
    "batchAccountEndpoint": "badev.westeurope.batch.azure.com", "poolId": "gpu",
    "imageRefs": {"pytorch": "cr.azurecr.io/pytorch:latest@sha256:00",
                  "tensorflow": "cr.azurecr.io/tensorflow:latest@sha256:00"},
    "registryLoginServer": "cr.azurecr.io", "pullIdentityId": "/subscriptions/s/.../pull",
    "pullIdentityClientId": "client-pull",
    "containerUrls": {c: f"https://st.blob.core.windows.net/{c}" for c in ("data", "scripts", "outputs", "status")},
    "sas": {"data": "sp=rl&sig=DATASIG", "scripts": "sp=rl&sig=SCRIPTSIG", "outputs": "sp=cw&sig=OUTSIG"},
}


STATUS = OUTPUTS["containerUrls"]["status"]


def props(**changes):
    return {"batch_endpoint": "badev.westeurope.batch.azure.com", "data_status_url": STATUS,
            "data_container_url": OUTPUTS["containerUrls"]["data"],
            **dataclasses.asdict(inputs(**changes))}


def staged(data_url, status_url):
    """infra.backends.staging.data_ready's answer when the NFS server has staged `data` as it is now."""
    assert data_url == OUTPUTS["containerUrls"]["data"] and status_url in (STATUS, "")
    return Readiness(True, "the NFS server staged 160 files")


def not_staged(data_url, status_url):
    return Readiness(False, "the NFS server reports: staging 160 files (0.00 GB) since 2026-11-21T12:00:00Z")


def test_create_submits_the_job_and_its_task(batch):
    result = TrainingJobProvider(batch, staged).create(props())
    job = batch_spec.job_id(inputs())
    assert result.id == job and result.outs["job_id"] == job
    assert batch.requests == [("POST", "/jobs", ""), ("POST", f"/jobs/{job}/tasks", ""), ("PATCH", f"/jobs/{job}", "")]
    assert batch.tasks[job]["multiInstanceSettings"]["numberOfInstances"] == 2


def test_up_submits_nothing_while_the_nfs_server_is_still_staging(batch):
    """No job and no failure (the first `up` cannot have data): the resource says why (tests/infra/
    test_job_resources.py plays the following `up`s)."""
    created = TrainingJobProvider(batch, not_staged).create(props())
    assert batch.requests == [] and created.outs["job_id"] == ""
    assert "the NFS server reports: staging 160 files" in created.outs["state"]


def test_diff_replaces_on_training_changes_only(batch):
    provider = TrainingJobProvider(batch, staged)
    old = {**props(), "train_args": ["--epochs", "90"], "nodes": 2.0}  # as the engine hands state back
    assert provider.diff("j", old, props()).changes is False
    diff = provider.diff("j", old, props(train_args=("--epochs", "1")))
    assert diff.changes and diff.replaces == ["train_args"] and diff.delete_before_replace is False
    assert provider.diff("j", old, props(framework="keras")).replaces == ["framework"]


def test_delete_terminates_and_deletes_and_tolerates_a_gone_job(batch):
    provider = TrainingJobProvider(batch, staged)
    created = provider.create(props())
    provider.delete(created.id, created.outs)
    provider.delete(created.id, created.outs)
    deletes = [r for r in batch.requests if r[0] == "DELETE"]
    assert deletes == [("DELETE", f"/jobs/{created.id}", "")] * 2 and not batch.jobs


def test_a_job_launched_before_the_allocation_deadline_existed_is_not_replaced_by_its_arrival(batch):
    provider = TrainingJobProvider(batch, staged)
    old = {k: v for k, v in props().items() if k != "allocation_timeout_minutes"}  # a state from before the key
    assert provider.diff("j", {**old, "job_id": "j"}, props()).changes is False
    assert provider.diff("j", {**old, "job_id": "j", "allocation_timeout_minutes": 60.0}, props()).replaces == [
        "allocation_timeout_minutes"]


def test_a_job_launched_before_datasets_had_names_is_not_replaced_by_the_next_up(batch):
    provider = TrainingJobProvider(batch, staged)
    old = {k: v for k, v in props().items() if k != "dataset"}  # a state from before JobInputs.dataset
    assert provider.diff("j", {**old, "job_id": "j"}, props()).changes is False


def test_provider_inputs_cover_every_job_input():
    assert set(INPUT_FIELDS) == {f.name for f in dataclasses.fields(batch_spec.JobInputs)}


@pytest.fixture
def outputs_file(tmp_path):
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(OUTPUTS))
    return path


def run(argv, batch, capsys, staged=staged):
    code = main(argv, batch_factory=lambda endpoint: batch, staged=staged)
    out, err = capsys.readouterr()
    return code, out, err


def test_submit_builds_the_job_from_config_and_outputs(outputs_file, batch, capsys):
    code, out, err = run(["submit", "--stack", "dev", "--outputs", str(outputs_file), "--framework", "keras",
                          "--nodes", "1", "--args", "--epochs 1"], batch, capsys)
    assert code == 0, err
    [job] = batch.jobs
    task = batch.tasks[job]
    assert job.startswith("train-dev-") and f"submitted {job}: keras on 1 node(s) x 8 GPUs" in out
    assert task["containerSettings"]["imageName"] == OUTPUTS["imageRefs"]["tensorflow"]
    assert task["multiInstanceSettings"]["numberOfInstances"] == 1
    assert "--framework keras" in task["commandLine"] and "--epochs 1" in task["commandLine"]
    destination = task["outputFiles"][0]["destination"]["container"]
    assert destination["containerUrl"] == OUTPUTS["containerUrls"]["outputs"]  # no SAS: the nodes' identity
    assert destination["identityReference"] == {"resourceId": OUTPUTS["pullIdentityId"]}
    assert "SIG" not in json.dumps(task) + out + err


@pytest.mark.parametrize("argv,message", [
    (["--nodes", "9"], "give 1 to 2 (maxNodes in Pulumi.dev.yaml"),  # refused before any sign-in
    (["--nodes", "0"], "give 1 to 2"),
    (["--args", "--data /elsewhere"], "set by the job"),
    (["--args", "--epochs 1 --bacth-size 8"], "unrecognized arguments: --bacth-size"),
    (["--args", "--precision fp8"], "invalid choice: 'fp8'"),
    (["--args", "--epochs 'open"], "shell command line"),
    (["--framework", "pytorch", "--args=--xla"], "--xla applies to --framework tensorflow only"),
])
def test_submit_refuses_bad_requests_with_one_line(outputs_file, batch, capsys, argv, message):
    code, out, err = run(["submit", "--stack", "dev", "--outputs", str(outputs_file), *argv], batch, capsys)
    assert code != 0 and message in err and err.count("\n") == 1 and not batch.jobs


def test_status_logs_follow_and_cancel_the_newest_job(outputs_file, batch, capsys):
    spec = batch_spec.job_inputs(config.from_stack_file("dev"), StackOutputs.from_json(OUTPUTS))
    old = operate.submit(batch, spec, now_utc().replace(year=2025), io.StringIO())
    # The old job runs on its nodes: the next submit leaves it alone (it ends only jobs still waiting past their
    # allocation deadline: tests/infra/backends/batch/test_allocation.py).
    batch.tasks[old].update(state="running", executionInfo={"startTime": "2026-11-21T12:00:05Z", "retryCount": 0,
                                                            "requeueCount": 0})
    new = operate.submit(batch, spec, now_utc(), io.StringIO())
    batch.tasks[new]["executionInfo"] = {"exitCode": 0, "retryCount": 1, "requeueCount": 0,
                                         "startTime": "2026-11-21T12:00:10.5Z", "endTime": "2026-11-21T12:30:00Z"}
    batch.tasks[new]["nodeInfo"] = {"nodeId": "tvmps_0001"}
    code, out, _ = run(["status", "--stack", "dev", "--outputs", str(outputs_file)], batch, capsys)
    assert code == 0 and f"job {new}: active" in out and "exit code 0, retried 1 time(s)" in out
    assert "primary node: tvmps_0001" in out and "started: 2026-11-21T12:00:10.5Z" in out

    # --follow prints what the task appends until it completes.
    log = b"step 10 loss 6.1\nstep 20 loss 5.2\ndone\n"
    batch.tasks[new]["state"] = "running"
    batch.files[(new, "stdout.txt")] = log[:17]
    meanwhile = iter([lambda: batch.files.update({(new, "stdout.txt"): log}),  # the task wrote more
                      lambda: batch.tasks[new].update(state="completed")])
    printed = io.StringIO()
    operate.logs(batch, new, "stdout", True, printed, sleep=lambda _: next(meanwhile)())
    assert printed.getvalue() == log.decode()
    file = f"/jobs/{new}/tasks/{batch_spec.TASK_ID}/files/stdout.txt"
    assert [r for r in batch.requests if r[1] == file] == [  # each read starts where the last ended
        ("HEAD", file, ""), ("GET", file, "bytes=0-"), ("HEAD", file, ""), ("GET", file, "bytes=17-"),
        ("HEAD", file, "")]  # and once completed, only the length is read: nothing more to print

    code, out, _ = run(["cancel", "--stack", "dev", "--outputs", str(outputs_file), "--job", old], batch, capsys)
    assert code == 0 and ("POST", f"/jobs/{old}/terminate", "") in batch.requests
    assert batch.jobs[old]["state"] == "completed" and batch.jobs[old]["executionInfo"]["terminateReason"]
    code, _, err = run(["cancel", "--stack", "dev", "--outputs", str(outputs_file), "--job", "nope"], batch, capsys)
    assert code == 1 and "job nope not found" in err
    batch.jobs[new]["state"] = "completed"
    code, _, err = run(["cancel", "--stack", "dev", "--outputs", str(outputs_file), "--job", new], batch, capsys)
    assert code == 1 and f"job {new} has already completed; nothing to cancel" in err
    assert ("POST", f"/jobs/{new}/terminate", "") not in batch.requests


def test_status_shows_the_runs_efficiency_and_what_its_shortfall_costs(outputs_file, batch, capsys):
    from infra.core import cost

    spec = batch_spec.job_inputs(config.from_stack_file("dev"), StackOutputs.from_json(OUTPUTS))
    job = operate.submit(batch, dataclasses.replace(spec, nodes=2), now_utc(), io.StringIO())
    batch.tasks[job]["state"] = "running"
    batch.files[(job, "stdout.txt")] = (  # rank 0's progress lines (training/runner.py), the last one counts
        b"step 10/90  epoch 0.01  loss 6.9  lr 0.1  30000.0 img/s  1875.0 img/s per worker (0.36 of 5155 expected), "
        b"input-bound (data 60%, compute 35%, exchange 5%)\n"
        b"step 20/90  epoch 0.02  loss 6.8  lr 0.1  62000.0 img/s  3875.0 img/s per worker (0.75 of 5155 expected), "
        b"input-bound (data 22%, compute 74%, exchange 4%)\n")
    code, out, _ = run(["status", "--stack", "dev", "--outputs", str(outputs_file)], batch, capsys)
    price = cost.estimate(config.from_stack_file("dev")).node_price
    assert code == 0 and (f"  efficiency: 3875 img/s per GPU, 0.75 of the size's 5155, input-bound (data 22%, compute "
                          f"74%, exchange 4%); the shortfall costs ${0.25 * 2 * price:,.2f}/h of 2 node(s) at "
                          f"${price:,.2f}/h") in out.splitlines(), out
    batch.files[(job, "stdout.txt")] = b"training ResNet50 ...\n"  # no step logged yet
    code, out, _ = run(["status", "--stack", "dev", "--outputs", str(outputs_file)], batch, capsys)
    assert "  efficiency: no progress line yet" in out.splitlines()


def test_verbs_without_jobs_or_outputs_fail_clearly(outputs_file, batch, tmp_path, capsys):
    code, _, err = run(["status", "--stack", "dev", "--outputs", str(outputs_file)], batch, capsys)
    assert code == 1 and "has no training jobs" in err and "python -m infra submit" in err
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"poolId": "gpu"}))
    code, _, err = run(["status", "--stack", "dev", "--outputs", str(partial)], batch, capsys)
    assert code == 1 and "stack outputs lack batchAccountEndpoint" in err


def test_outputs_come_from_the_pulumi_cli_when_no_file_is_given():
    seen = []

    def fake_run(command, **kwargs):
        seen.append(command)
        import subprocess

        return subprocess.CompletedProcess(command, 0, json.dumps(OUTPUTS), "")

    assert load_outputs("dev", None, (), run=fake_run) == StackOutputs.from_json(OUTPUTS)
    assert seen == [["pulumi", "stack", "output", "--json", "--show-secrets", "--stack", "dev"]]


class _RefusingCredential:
    """What DefaultAzureCredential does without `az login`: it raises on the first token request."""

    def get_token(self, *scopes, **kwargs):
        from azure.identity import CredentialUnavailableError

        raise CredentialUnavailableError("DefaultAzureCredential failed to retrieve a token from the included "
                                         "credentials.\nAttempted credentials:\n\tEnvironmentCredential: ...")


def test_job_verbs_without_az_login_end_in_one_line(outputs_file, capsys):
    from infra.backends.batch.service import AzureBatch

    # The real Batch client, with a credential that cannot sign in: the first request fails as it would.
    factory = lambda endpoint: AzureBatch(endpoint, credential=_RefusingCredential())  # noqa: E731
    code = main(["status", "--stack", "dev", "--outputs", str(outputs_file)], batch_factory=factory)
    _, err = capsys.readouterr()
    assert code == 1 and err.startswith("error: cannot sign in to Azure") and "az login" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_download_errors_end_in_one_line(outputs_file, batch, tmp_path, capsys):
    expired = dict(OUTPUTS, containerUrls={**OUTPUTS["containerUrls"],
                                           "outputs": "https://st.blob.core.windows.net/outputs?sv=2024-01-01"
                                                      "&se=2020-01-01T00:00:00Z&sp=rl&sig=OLD"})
    path = tmp_path / "expired.json"
    path.write_text(json.dumps(expired))
    code, out, err = run(["download", "--stack", "dev", "--outputs", str(path), "--job", "j1",
                          "--dest", str(tmp_path)], batch, capsys)
    assert code == 1 and "the SAS expired" in err and err.count("\n") == 1 and "OLD" not in err


def test_submit_creates_the_job_waiting_then_adds_the_task_then_lets_it_end(batch):
    spec = inputs()
    job = batch_spec.job_id(spec)
    batch.submit(batch_spec.job_spec(spec, job), batch_spec.task_spec(spec, job))
    assert [r[:2] for r in batch.requests] == [("POST", "/jobs"), ("POST", f"/jobs/{job}/tasks"),
                                               ("PATCH", f"/jobs/{job}")]
    assert batch.jobs[job]["state"] == "active" and batch.jobs[job]["onAllTasksComplete"] == "terminatejob"
    # The rule that order answers: a job created to end with its tasks, and none yet, is complete at once.
    early = {**batch_spec.job_spec(spec, "early"), "onAllTasksComplete": "terminatejob"}
    batch.client.create_job(early)
    assert batch.jobs["early"]["state"] == "completed"


def test_submit_waits_for_the_staging_report_unless_told_not_to(outputs_file, batch, capsys, monkeypatch):
    from tests.infra.test_jobs import nfs_tier

    nfs_tier(monkeypatch)  # the NFS server's staging report is read only with dataTier nfs
    submit = ["submit", "--stack", "dev", "--outputs", str(outputs_file)]
    code, _, err = run(submit, batch, capsys, staged=not_staged)
    assert code == 1 and "the NFS server reports: staging 160 files" in err and "--skip-data-check" in err
    assert "python -m infra restage --stack dev" in err
    assert not batch.jobs and err.count("\n") == 1
    code, out, _ = run([*submit, "--skip-data-check"], batch, capsys, staged=not_staged)
    assert code == 0 and len(batch.jobs) == 1


def test_a_task_file_not_written_yet_reads_as_nothing_and_logs_nothing(batch, caplog):
    """Batch answers the HEAD for a missing file 404 with no body (HEAD has none): azure-batch logs a WARNING with
    a traceback about it unless told not to, which `infra logs` would print before the task starts."""
    spec = inputs()
    job = batch_spec.job_id(spec)
    batch.submit(batch_spec.job_spec(spec, job), batch_spec.task_spec(spec, job))
    caplog.clear()  # what submitting logged (azure-core's INFO request lines, where an earlier test enabled them)
    with caplog.at_level("WARNING"):
        assert batch.read_task_file(job, batch_spec.TASK_ID, "stderr.txt", 0) == b""
    assert ("HEAD", f"/jobs/{job}/tasks/{batch_spec.TASK_ID}/files/stderr.txt", "") in batch.requests
    assert [record for record in caplog.records if record.levelno >= logging.WARNING] == []


def test_status_names_the_node_that_failed_its_health_checks_and_why(outputs_file, batch, capsys):
    """A node whose start task (the node health checks, infra/core/node_health.py) failed after its retries is
    `starttaskfailed` in Nodes - List, with startTaskInfo (BatchStartTaskInfo in the Batch REST spec 2025-06-01);
    status reads it through the real client, and the endpoint's answers conform to the vendored spec."""
    from tests.devtools.rehearsal.batch_rest_spec import violations

    spec = batch_spec.job_inputs(config.from_stack_file("dev"), StackOutputs.from_json(OUTPUTS))
    job = operate.submit(batch, spec, now_utc(), io.StringIO())
    batch.account.pools["gpu"] = {"id": "gpu", "state": "active", "allocationState": "steady",
                                  "currentDedicatedNodes": 2, "currentLowPriorityNodes": 0}
    batch.account.nodes["gpu"] = [
        {"id": "tvmps_ok", "state": "idle", "isDedicated": True,
         "startTaskInfo": {"state": "completed", "startTime": "2026-11-21T12:00:00Z", "endTime": "2026-11-21T12:09:00Z",
                           "exitCode": 0, "retryCount": 0, "result": "success"}},
        {"id": "tvmps_bad", "state": "starttaskfailed", "isDedicated": True,
         "startTaskInfo": {"state": "completed", "startTime": "2026-11-21T12:20:00Z", "endTime": "2026-11-21T12:29:00Z",
                           "exitCode": 1, "retryCount": 2, "lastRetryTime": "2026-11-21T12:20:00Z",
                           "result": "failure",
                           "failureInfo": {"category": "usererror", "code": "FailureExitCode",
                                           "message": "The task exited with an exit code representing a failure"}}}]
    code, out, _ = run(["status", "--stack", "dev", "--outputs", str(outputs_file)], batch, capsys)
    assert code == 0 and f"job {job}: active" in out
    [line] = [line for line in out.splitlines() if "start task" in line]
    assert line.startswith("  node tvmps_bad: failed its start task (the node health checks), exit code 1, retried 2 "
                           "time(s) (FailureExitCode: The task exited with an exit code representing a failure); it "
                           "takes no task but bills")
    assert "startup/stderr.txt" in line and "tvmps_ok" not in out
    assert ("GET", "/pools/gpu/nodes", "") in batch.requests
    assert not violations(batch.endpoint.responses)


def test_status_without_the_pool_says_nothing_of_nodes(outputs_file, batch, capsys):
    spec = batch_spec.job_inputs(config.from_stack_file("dev"), StackOutputs.from_json(OUTPUTS))
    operate.submit(batch, spec, now_utc(), io.StringIO())
    code, out, _ = run(["status", "--stack", "dev", "--outputs", str(outputs_file)], batch, capsys)
    assert code == 0 and "start task" not in out
