"""Every job and data verb, walked through what a user meets first: an account that cannot be reached (signed in),
nobody signed in, a sign-in that Azure refuses, and arguments that are wrong whatever Azure says. Each ends in one
`error:` line naming the fix and a non-zero exit, never a traceback; wrong arguments are refused before the outputs
are used, anyone signs in or a request goes out.

Sign-in is the real DefaultAzureCredential (training.data.transfer.AzureCredential): signed in, it gets its token
from an App Service-style managed identity endpoint here (IDENTITY_ENDPOINT/IDENTITY_HEADER, the path
devtools/rehearsal/azure_ad.py serves); refused, that endpoint answers 400 "Identity not found" as Azure's does for
an identity it does not know; nobody signed in, the process has no AZURE_* or IDENTITY_* variable, no az on PATH and
an empty HOME. The Batch account is the real azure-batch client at the local Batch endpoint (FakeBatch)."""
import contextlib
import io
import json
import shutil
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from PIL import Image

from infra import REPO_ROOT
from infra.cli.main import main
from tests.infra.backends.batch.fake_batch import FakeBatch
from tests.infra.backends.batch.test_operate import OUTPUTS
from training.data import transfer

CONTAINERS = ("data", "scripts", "outputs", "status")
# backend azureml: the outputs its verbs read (infra/backends/azureml/backend.py: required_outputs)
AML_OUTPUTS = {"backend": "azureml", "subscriptionId": "00000000-0000-0000-0000-000000000000",
               "resourceGroupName": "rg-nlp", "amlWorkspaceName": "mlw-nlp", "amlComputeName": "gpu",
               "amlEnvironments": {"pytorch": "azureml:pytorch:1"}, "pullIdentityClientId": "client-pull"}


def _verbs(tmp_path, stack="dev"):
    """Each job and data verb with the arguments that reach the network (argv after the verb's name)."""
    folder = tmp_path / "pets"
    for cls in ("cat", "dog"):
        (folder / "train" / cls).mkdir(parents=True, exist_ok=True)
        for i in range(2):
            colour = (i * 90, 60 if cls == "cat" else 200, 30)
            Image.new("RGB", (16, 16), colour).save(folder / "train" / cls / f"{i}.jpg")
    if stack == "nlp":
        return [["status"], ["submit"], ["logs"], ["download", "--dest", str(tmp_path / "r")], ["cancel"],
                ["register-model", "--dest", str(tmp_path / "r")]]
    return [["upload", str(folder)], ["upload", "--dataset", "pets", str(folder)], ["datasets"],
            ["datasets", "--remove", "pets"], ["shard", "--dataset", "pets"], ["submit"], ["submit", "--dataset", "pets"], ["status"],
            ["logs"], ["download", "--dest", str(tmp_path / "r")], ["cancel"], ["restage"]]


@pytest.fixture
def batch():
    service = FakeBatch()
    yield service
    service.close()


@pytest.fixture
def project(tmp_path):
    """A project folder whose dev stack stages through the NFS server (dataTier nfs), so that restage applies."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(REPO_ROOT / "Pulumi.yaml", root)
    for stack in ("dev", "nlp"):
        shutil.copy(REPO_ROOT / f"Pulumi.{stack}.yaml", root)
    with open(root / "Pulumi.dev.yaml", "a") as f:
        f.write("  azure-dl-training:dataTier: nfs\n")
    return root


class _TokenEndpoint:
    """An App Service-style managed identity endpoint that hands out tokens, or refuses (400) when `refuse`."""

    def __init__(self, refuse=False):
        outer = self
        self.asked = 0

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                outer.asked += 1
                body, code = (b'{"error": "invalid_request", "error_description": "Identity not found"}', 400) \
                    if refuse else (json.dumps({"access_token": "t", "expires_on": str(int(time.time()) + 3600),
                                                "resource": "r", "token_type": "Bearer"}).encode(), 200)
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/msi/token"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sign_in(monkeypatch, tmp_path):
    """`sign_in(None)`: nobody signed in; `sign_in("ok")` / `sign_in("refused")`: the identity endpoint's answer."""
    endpoints = []
    home = tmp_path / "home"
    home.mkdir()

    def environment(answer):
        for name in [n for n in __import__("os").environ if n.startswith(("AZURE_", "IDENTITY_", "MSI_"))]:
            monkeypatch.delenv(name)
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no az, azd or pwsh of this machine's
        if answer is None:
            return None
        endpoint = _TokenEndpoint(refuse=answer == "refused")
        endpoints.append(endpoint)
        monkeypatch.setenv("IDENTITY_ENDPOINT", endpoint.url)
        monkeypatch.setenv("IDENTITY_HEADER", "secret")
        return endpoint

    yield environment
    for endpoint in endpoints:
        endpoint.close()


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once closed: connections are refused


def _run(argv, stack, outputs, project, tmp_path):
    file = tmp_path / f"outputs-{stack}.json"
    file.write_text(json.dumps(outputs))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([argv[0], "--stack", stack, "--outputs", str(file), "--project-dir", str(project), *argv[1:]])
    return code, out.getvalue(), err.getvalue()


def _one_line(argv, code, err):
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code != 0 and len(errors) == 1 and err.rstrip().splitlines()[-1] == errors[0], (argv, code, err)
    assert "Traceback" not in err, (argv, err)
    return errors[0]


def test_every_verb_with_an_unreachable_account_is_one_line(sign_in, project, tmp_path):
    sign_in("ok")
    port = _closed_port()
    outputs = {**OUTPUTS, "batchAccountEndpoint": f"127.0.0.1:{port}",
               "containerUrls": {c: f"https://127.0.0.1:{port}/st/{c}" for c in CONTAINERS}}
    for argv in _verbs(tmp_path):
        code, out, err = _run(argv, "dev", outputs, project, tmp_path)
        line = _one_line(argv, code, err)
        assert "cannot reach" in line and ("allowedIpRanges" in line or "network" in line), (argv, line)


@pytest.mark.parametrize("answer", [None, "refused"])
def test_every_verb_without_a_sign_in_is_one_line_and_asks_nothing(answer, sign_in, batch, project, tmp_path):
    endpoint = sign_in(answer)
    reachable = {**OUTPUTS, "batchAccountEndpoint": batch.endpoint.url,
                 "containerUrls": {c: f"{batch.endpoint.url}/st/{c}" for c in CONTAINERS}}
    aml = {**AML_OUTPUTS, "containerUrls": reachable["containerUrls"]}
    for stack, outputs in (("dev", reachable), ("nlp", aml)):
        for argv in _verbs(tmp_path, stack):
            if argv[0] == "submit" and "--dataset" not in argv:
                argv = [*argv, "--skip-data-check"]  # its data check signs in to storage; here the job service
            code, out, err = _run(argv, stack, outputs, project, tmp_path)
            line = _one_line([stack, *argv], code, err)
            assert transfer.NOT_SIGNED_IN in line, (stack, argv, line)
    assert batch.requests == []  # nothing reached the Batch account (nor storage: the same endpoint)
    if endpoint is not None:
        assert endpoint.asked > 0  # the refusal came from the identity endpoint, not from a missing variable


@pytest.mark.parametrize("argv,named", [
    (["submit", "--nodes", "0"], "--nodes 0: give 1 to 2"),
    (["submit", "--nodes=-2"], "--nodes -2: give 1 to 2"),
    (["submit", "--nodes", "3"], "--nodes 3: give 1 to 2 (maxNodes in Pulumi.dev.yaml"),
    (["submit", "--args=--epochs 1; rm -rf /"], "';' is a shell operator"),
    (["submit", "--args=--epochs 1 $(id)"], "'(' is a shell operator"),
    (["submit", "--args=--epochs 1 `id`"], "'`' is a shell operator"),
    (["submit", "--args=--epochs 1 --no-such-flag"], "--args: unrecognized arguments: --no-such-flag"),
    (["submit", "--dataset", "Pets!"], "--dataset 'Pets!': give 1 to 32"),
    (["shard", "--dataset", "Pets!"], "--dataset 'Pets!': give 1 to 32"),
    (["shard", "--workers", "0"], "--workers must be at least 1"),
])
def test_arguments_wrong_whatever_azure_says_are_refused_before_any_sign_in_or_request(argv, named, sign_in, batch,
                                                                                        project, tmp_path):
    endpoint = sign_in("ok")
    outputs = {**OUTPUTS, "batchAccountEndpoint": batch.endpoint.url,
               "containerUrls": {c: f"{batch.endpoint.url}/st/{c}" for c in CONTAINERS}}
    code, out, err = _run(argv, "dev", outputs, project, tmp_path)
    line = _one_line(argv, code, err)
    assert named in line, line
    assert endpoint.asked == 0 and batch.requests == []  # no sign-in, no request
