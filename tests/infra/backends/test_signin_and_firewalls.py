"""What the job verbs and `pulumi destroy` say when Azure will not let them in: nobody signed in (one line, at
once, from a process that has no Azure credential at all), or an account's firewall that no longer admits this
machine's address (one line with the fix, no hang)."""
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from infra import REPO_ROOT
from infra.backends.azureml.training_job import AmlTrainingJobProvider
from infra.backends.batch.training_job import TrainingJobProvider
from infra.backends.batch import spec as batch_spec
from infra.backends.shared import JobError
from infra.backends.azureml.service import AzureMlJobs
from infra.backends.shared import StackOutputs
from tests.infra.conftest import evaluation_for
from tests.infra.backends.batch.test_spec import inputs
from tests.infra.backends.batch.test_operate import OUTPUTS
from training.data import transfer
from training.data.blob_reader import BlobHttpError

# What a verb may take to say "not signed in", measured at 0.3-0.5 s here (imports included); the slowest part
# DefaultAzureCredential can add is its managed identity probe of IMDS, 1 s at most (azure-identity's
# ImdsCredential: connection_timeout=1, retry_total=0 inside DefaultAzureCredential), plus the start of an `az`
# or `pwsh` found on PATH.
NO_LOGIN_BOUND_S = 5.0
# "This request is not authorized to perform this operation." is what Azure's data planes answer a firewall's
# refusal with (storage: https://learn.microsoft.com/rest/api/storageservices/common-rest-api-error-codes;
# a Batch account endpoint: Azure/BatchExplorer#2203).
NOT_AUTHORIZED = ("AuthorizationFailure", "This request is not authorized to perform this operation.\n"
                                          "RequestId:6a0e1c2e-0000-0000-0000-000000000000\nTime:2026-11-23T10:00:00Z")


def no_azure_environment(home):
    """A process on a machine where nobody signed in to Azure: no AZURE_* or managed identity endpoint variables,
    a HOME without an az CLI token cache, PATH without az, azd or pwsh (unless installed in /usr/bin). A host
    whose IMDS hands out a managed identity's token (an Azure VM with an identity) would sign in here."""
    return {"PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
            "PYTHONPATH": str(REPO_ROOT)}


@pytest.mark.parametrize("stack,argv", [
    ("dev", ["status"]), ("dev", ["submit", "--nodes", "1"]), ("dev", ["logs", "--follow"]),
    ("dev", ["cancel", "--job", "train-dev-1"]), ("dev", ["download", "--job", "train-dev-1"]),
    ("nlp", ["status"]), ("nlp", ["submit"]), ("nlp", ["cancel", "--job", "train-nlp-1"]),
])
def test_a_verb_without_azure_sign_in_says_so_in_one_line_at_once(stack, argv, batch, tmp_path):
    outputs = OUTPUTS if stack == "dev" else evaluation_for(stack).outputs
    if argv[0] == "download":  # the outputs container, read with Azure AD: an https endpoint that answers TLS
        urls = {**outputs["containerUrls"], "outputs": f"{batch.endpoint.url}/st/outputs"}
        outputs = {**outputs, "containerUrls": urls}
    (tmp_path / "outputs.json").write_text(json.dumps(outputs))
    (tmp_path / "home").mkdir()
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "infra", argv[0], "--stack", stack, "--outputs",
                             str(tmp_path / "outputs.json"), *argv[1:], *(["--dest", str(tmp_path / "r")]
                                                                         if argv[0] == "download" else [])],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                            env=no_azure_environment(tmp_path / "home"))
    elapsed = time.monotonic() - started
    assert result.returncode != 0 and result.stdout == "", result.stdout
    assert result.stderr.count("\n") == 1 and transfer.NOT_SIGNED_IN in result.stderr, result.stderr
    assert elapsed < NO_LOGIN_BOUND_S, f"{argv}: {elapsed:.1f} s"
    assert batch.requests == []  # nothing was asked of the service


def test_a_failed_sign_in_is_asked_once_and_never_retried():
    class Refusing:
        calls = 0

        def get_token_info(self, *scopes, options=None):
            from azure.identity import CredentialUnavailableError

            Refusing.calls += 1
            raise CredentialUnavailableError("DefaultAzureCredential failed to retrieve a token from the included "
                                             "credentials.\nAttempted credentials:\n\tEnvironmentCredential: ...")

    credential = transfer.AzureCredential()
    credential._credential = Refusing()
    for ask in (lambda: credential.get_token("https://storage.azure.com/.default"),
                lambda: credential.get_token_info("https://batch.core.windows.net/.default")):
        with pytest.raises(transfer.NotSignedIn, match="not signed in to Azure: run `az login`"):
            ask()
    assert Refusing.calls == 1
    # Not an AzureError: the SDKs' retry policies (storage retries any AzureError, 15 s and more apart) let it by.
    from azure.core.exceptions import AzureError

    assert not issubclass(transfer.NotSignedIn, AzureError)


def test_a_token_is_fetched_once_per_scope_for_both_token_protocols():
    from azure.core.credentials import AccessTokenInfo

    fetched = []

    class Signed:
        def get_token_info(self, *scopes, options=None):
            fetched.append(scopes)
            return AccessTokenInfo(f"token-{len(fetched)}", int(time.time()) + 3600)

    credential = transfer.AzureCredential()
    credential._credential = Signed()
    scope = "https://batch.core.windows.net/.default"
    assert credential.get_token_info(scope).token == "token-1"  # the probe
    assert credential.get_token(scope).token == "token-1"  # the client's first request: no second sign-in
    assert credential.get_token("https://storage.azure.com/.default").token == "token-2"
    assert fetched == [(scope,), ("https://storage.azure.com/.default",)]


def test_destroy_through_a_batch_firewall_that_no_longer_admits_us_is_one_line(batch):
    spec = inputs()
    job = batch_spec.job_id(spec)
    batch.submit(batch_spec.job_spec(spec, job), batch_spec.task_spec(spec, job))
    batch.endpoint.refuse = (403, *NOT_AUTHORIZED)
    started = time.monotonic()
    with pytest.raises(JobError) as refused:
        TrainingJobProvider(batch).delete(job, {"batch_endpoint": batch.endpoint.url})
    line = str(refused.value)
    assert time.monotonic() - started < 5 and "\n" not in line
    assert line.startswith(f"the Batch account refused deleting job {job} (403 AuthorizationFailure)")
    assert "allowedIpRanges" in line and "`pulumi up`" in line
    assert job in batch.jobs  # nothing was deleted behind the refusal


def test_job_verbs_through_a_batch_firewall_are_one_line(batch, tmp_path, capsys):
    from infra.cli.main import main

    (tmp_path / "outputs.json").write_text(json.dumps(OUTPUTS))
    batch.endpoint.refuse = (403, *NOT_AUTHORIZED)
    code = main(["status", "--stack", "dev", "--outputs", str(tmp_path / "outputs.json")],
                batch_factory=lambda endpoint: batch)
    _, err = capsys.readouterr()
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("error: the Batch account refused listing jobs (403 AuthorizationFailure)")
    assert "allowedIpRanges in Pulumi.dev.yaml: ask the stack's platform team" in err


def test_storage_firewall_refusal_names_the_fix():
    refused = transfer.classify(BlobHttpError(403, "AuthorizationFailure", NOT_AUTHORIZED[1]), "listing `outputs`")
    assert isinstance(refused, transfer.PermanentError) and "\n" not in str(refused)
    assert str(refused).startswith("the storage account refused listing `outputs` (403 AuthorizationFailure)")
    assert "allowedIpRanges" in str(refused) and "`pulumi up`" in str(refused)


class _ArmRefusal(BaseHTTPRequestHandler):
    """An Azure Resource Manager-style 403, as Azure ML's REST API answers (its error format is ARM's)."""

    def do_GET(self):
        body = json.dumps({"error": {"code": "AuthorizationFailure", "message": NOT_AUTHORIZED[1]}}).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _arm_403():
    """The HttpResponseError azure-core raises for that response, as Azure ML's generated clients raise it."""
    from azure.core import PipelineClient
    from azure.core.exceptions import HttpResponseError
    from azure.core.rest import HttpRequest
    from azure.mgmt.core.exceptions import ARMErrorFormat

    server = ThreadingHTTPServer(("127.0.0.1", 0), _ArmRefusal)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/jobs/train-nlp-1"
        with PipelineClient(url) as client:
            response = client.send_request(HttpRequest("GET", url))
            response.read()
        return HttpResponseError(response=response, error_format=ARMErrorFormat)
    finally:
        server.shutdown()
        server.server_close()


def test_destroy_through_the_workspace_network_rules_is_one_line():
    error = _arm_403()

    class Jobs:  # MLClient.jobs, refused as the workspace refuses an address it does not admit
        def get(self, name):
            raise error

    client = type("MLClient", (), {"jobs": Jobs()})()
    provider = AmlTrainingJobProvider(AzureMlJobs("sub", "rg", "ws", client=client))
    with pytest.raises(JobError) as refused:
        provider.delete("train-nlp-1", {"job_name": "train-nlp-1"})
    line = str(refused.value)
    assert "\n" not in line and line.startswith("Azure ML refused reading job train-nlp-1 (403 AuthorizationFailure)")
    assert "allowedIpRanges" in line


def test_azure_ml_experimental_warnings_are_not_printed(tmp_path):
    """azure-ai-ml logs "Class X: This is an experimental class..." for schema classes a job dump touches; the
    real MLClient's create_or_update runs here up to its first request (a credential that refuses stops it)."""
    (tmp_path / "outputs.json").write_text(json.dumps(evaluation_for("nlp").outputs))
    script = f"""
import json, tempfile
from pathlib import Path
from infra.core.config import stack as config
from infra.backends.azureml import job as aml_job
from infra.backends.azureml.service import AzureMlJobs
from infra.backends.shared import StackOutputs

class NoToken:
    def get_token(self, *scopes, **kwargs):
        raise RuntimeError("no request leaves this test")

outputs = json.loads(Path({str(tmp_path / 'outputs.json')!r}).read_text())
inputs = aml_job.aml_job_inputs(config.from_stack_file("nlp"), StackOutputs.from_json(outputs))
service = AzureMlJobs("00000000-0000-0000-0000-000000000000", "rg", "ws", credential=NoToken())
with tempfile.TemporaryDirectory() as tmp:
    try:
        service.submit(aml_job.build_job(inputs, "train-nlp-x", aml_job.code_snapshot(Path(tmp) / "code")))
    except Exception as err:
        assert "no request leaves this test" in str(err), err
        print("stopped at the first request")
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert result.stdout == "stopped at the first request\n", result.stdout + result.stderr
    assert "experimental" not in result.stderr and result.stderr == "", result.stderr
