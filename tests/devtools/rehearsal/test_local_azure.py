"""The rehearsal's local Azure as the job verbs reach it: `--rehearsal` reads the folder's endpoints file, signs in
at the rehearsal's Azure AD as the deployer and calls the Batch endpoint through the real azure-batch client, as on
Azure. The account behind the endpoint here is the tests' in-memory one (no nodes, no root): the endpoint, the
sign-in and the verbs are the rehearsal's own."""
import json
import stat
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest

from devtools.emulator import Azurite
from devtools.rehearsal import batch_endpoint as rest
from devtools.rehearsal.azure_ad import AzureAd
from devtools.rehearsal.identities import DEPLOYER, DEPLOYER_CLIENT_ID, deployer_token, write_endpoints
from devtools.rehearsal.storage import Account
from infra import REPO_ROOT
from infra.backends.batch import spec as batch_spec
from infra.backends.shared import REHEARSAL_FILE
from tests.devtools.rehearsal import batch_rest_spec
from tests.infra.backends.batch.fake_batch import MemoryAccount

JOB = "train-dev-20261121120000"


@pytest.fixture(scope="module")
def evaluation():
    from infra.core.config import stack as config
    from infra.preview import offline

    return offline.evaluate(config.from_stack_file("dev"))


@pytest.fixture
def local_azure(tmp_path, evaluation):
    """A running job's account behind the endpoint, and the folder's REHEARSAL_FILE naming it."""
    memory = MemoryAccount()
    with Azurite() as azurite, AzureAd(Account(azurite, evaluation), {DEPLOYER_CLIENT_ID: DEPLOYER},
                                       tmp_path / "azure-ad") as ad, \
            rest.BatchEndpoint(memory, tls=(str(ad.cert), str(ad.key)), authorized=deployer_token(ad)) as endpoint:
        write_endpoints(tmp_path, evaluation, endpoint.url, ad)
        now = datetime.now(timezone.utc)
        memory.add_job(rest.new_job({"id": JOB, "poolInfo": {"poolId": "gpu"}, "onAllTasksComplete": "noaction"},
                                    endpoint.url, now, "0x1"))
        memory.add_task(JOB, {**rest.new_task(f"{endpoint.url}/jobs/{JOB}", {"id": batch_spec.TASK_ID,
                                                                             "commandLine": "true"}, now, "0x2"),
                              "state": "running"})
        yield memory, endpoint, tmp_path
        # Every answer the test drew from the endpoint, against the Batch REST spec's schemas.
        assert batch_rest_spec.violations(endpoint.responses) == []


def verb(work, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "infra", *args, "--stack", "dev", "--rehearsal", str(work)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)


def test_the_endpoints_file_is_the_owners_only_and_holds_no_sas(local_azure):
    _, endpoint, work = local_azure
    file = work / REHEARSAL_FILE
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    values = json.loads(file.read_text())
    assert values["outputs"]["batchAccountEndpoint"] == endpoint.url and "sas" not in values["outputs"]
    assert "sig=" not in file.read_text()
    file.chmod(0o644)
    result = verb(work, "status")
    assert result.returncode == 1 and result.stderr.startswith(f"error: {file}: readable by others (-rw-r--r--)")


def test_status_reaches_the_endpoint_signed_in_as_the_deployer(local_azure):
    memory, endpoint, work = local_azure
    result = verb(work, "status")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:2] == [f"job {JOB}: active", "  task: running, retried 0 time(s)"]
    assert ("GET", f"/jobs/{JOB}/tasks/{batch_spec.TASK_ID}", "") in endpoint.requests


def test_a_token_the_rehearsals_azure_ad_did_not_issue_is_refused(local_azure):
    from azure.batch import BatchClient
    from azure.core.credentials import AccessToken
    from azure.core.exceptions import HttpResponseError

    _, endpoint, work = local_azure

    class Forged:
        def get_token(self, *scopes, **kwargs):
            return AccessToken("forged", 2**40)

    env = json.loads((work / REHEARSAL_FILE).read_text())["env"]
    with BatchClient(endpoint.url, Forged(), connection_verify=env["REQUESTS_CA_BUNDLE"]) as client:
        with pytest.raises(HttpResponseError) as refused:
            client.get_job(JOB)
    assert refused.value.status_code == 401


def test_errors_come_back_with_batchs_status_and_code(local_azure):
    """Each refusal the verbs handle, drawn through the real azure-batch client over HTTPS: the status and Batch
    error code of https://learn.microsoft.com/rest/api/batchservice/batch-status-and-error-codes, in the body the
    SDK receives; the fixture then checks every body against the spec's BatchError."""
    from azure.batch import models
    from azure.core.exceptions import HttpResponseError

    from devtools.rehearsal.identities import batch_client

    memory, endpoint, work = local_azure
    client = batch_client(endpoint.url, json.loads((work / REHEARSAL_FILE).read_text())["env"]).client
    memory.jobs["done"] = {**memory.jobs[JOB], "id": "done", "state": "completed"}
    cases = [(lambda: client.get_job("nope"), 404, "JobNotFound"),
             (lambda: client.get_task(JOB, "nope"), 404, "TaskNotFound"),
             (lambda: client.get_task_file_properties(JOB, batch_spec.TASK_ID, "none.txt"), 404, None),
             (lambda: b"".join(client.download_task_file(JOB, batch_spec.TASK_ID, "none.txt")), 404, "FileNotFound"),
             (lambda: client.create_job(models.BatchJobCreateOptions(id=JOB, pool_info=models.BatchPoolInfo(
                 pool_id="gpu"))), 409, "JobExists"),
             (lambda: client.begin_terminate_job("done", {"terminateReason": "UserTerminate"}).result(), 409,
              "JobCompleted"),
             (lambda: client.get_pool("other"), 404, "PoolNotFound")]
    for call, status, code in cases:
        with pytest.raises(HttpResponseError) as refused:
            call()
        # The SDK maps 404/409 to ResourceNotFoundError/ResourceExistsError without parsing the body: read its code
        # from the response the SDK holds. A HEAD answer has no body (HTTP), only the status.
        body = refused.value.response.read()  # (a streamed download's error body is read here)
        assert (refused.value.status_code, json.loads(body)["code"] if body else None) == (status, code)
    assert [(m, s) for m, _, s, _ in endpoint.responses] == [
        ("GET", 404), ("GET", 404), ("HEAD", 404), ("GET", 404), ("POST", 409), ("POST", 409), ("GET", 404)]


def test_logs_follow_prints_a_growing_stdout_once_and_ends_with_the_task(local_azure):
    """`infra logs --follow --rehearsal` while the task writes: each byte printed once, in order, and the verb
    returns once the task has completed."""
    memory, endpoint, work = local_azure
    path = f"/jobs/{JOB}/tasks/{batch_spec.TASK_ID}/files/stdout.txt"
    memory.files[(JOB, "stdout.txt")] = b"step 1\n"
    follow = subprocess.Popen([sys.executable, "-m", "infra", "logs", "--stack", "dev", "--job", JOB, "--follow",
                               "--rehearsal", str(work)], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)

    def reads() -> int:  # parts answered (not requests arrived: a part appended before its read is answered
        # would be read with it, and the test would race the verb on a loaded machine)
        return sum(1 for method, p, status, _ in endpoint.responses if method == "GET" and p == path and status < 300)

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 60
        while reads() < count:
            assert follow.poll() is None and time.monotonic() < deadline, follow.communicate()
            time.sleep(0.05)

    wait_for(1)
    with endpoint.lock:
        memory.files[(JOB, "stdout.txt")] += b"step 2\n"
    wait_for(2)
    with endpoint.lock:
        memory.files[(JOB, "stdout.txt")] += b"step 3\ndone\n"
        memory.tasks[JOB]["state"] = "completed"
    out, err = follow.communicate(timeout=60)
    assert follow.returncode == 0, err
    assert out == "step 1\nstep 2\nstep 3\ndone\n"
    ranges = [r for method, p, r in endpoint.requests if method == "GET" and p == path]
    assert ranges[0] == "bytes=0-" and len(ranges) == len(set(ranges)) == 3  # each part read once, from its offset


def test_the_verbs_ride_out_batch_answering_503_for_a_while(local_azure):
    """Batch busy (503 ServerBusy, https://learn.microsoft.com/rest/api/batchservice/batch-status-and-error-codes):
    azure-core's retry policy, with the client options the verbs use (infra/backends/batch/service.py
    CLIENT_OPTIONS: 3 retries), asks again and the verb succeeds."""
    _, endpoint, work = local_azure
    endpoint.refuse, endpoint.refusals_left = (503, "ServerBusy", "The server is currently unable to receive "
                                                                  "requests. Please retry your request."), 2
    result = verb(work, "status")
    assert result.returncode == 0 and result.stdout.startswith(f"job {JOB}: active"), result.stderr
    # The newest job is looked up first (GET /jobs): refused twice, answered the third time.
    assert [r[:2] for r in endpoint.requests[:4]] == [("GET", "/jobs")] * 3 + [("GET", f"/jobs/{JOB}")]
    assert endpoint.refusals_left == 0


def test_the_spec_check_refuses_an_answer_batch_would_not_give():
    """The check the fixture applies can fail: a task without requeueCount (required in BatchTaskExecutionInfo), a
    key of the SDK's naming instead of the wire's, a failure category outside the spec's enum, an error whose
    message is a bare string."""
    now = datetime.now(timezone.utc)
    task = rest.new_task(f"https://127.0.0.1:1/jobs/{JOB}", {"id": "train", "commandLine": "true"}, now, "0x2")
    assert batch_rest_spec.violations([("GET", f"/jobs/{JOB}/tasks/train", 200, json.dumps(task).encode())]) == []
    wrong = {**task, "executionInfo": {"retryCount": 0, "failureInfo": {"category": "UserError"}},
             "terminationReason": "x"}
    error = {"code": "JobNotFound", "message": "The specified job does not exist."}
    found = batch_rest_spec.violations([("GET", f"/jobs/{JOB}/tasks/train", 200, json.dumps(wrong).encode()),
                                        ("GET", "/jobs/nope", 404, json.dumps(error).encode())])
    assert len(found) == 4, found
    assert any("'requeueCount' is a required property" in line for line in found)
    assert any("'UserError' is not one of ['usererror', 'servererror']" in line for line in found)
