"""preflight says whether the stack's firewalls admit the machine that will run `pulumi up` (the fleet's CI deploy
runs on a self-hosted runner whose egress address is in allowedIpRanges: docs/ci.md): the address from
DLTRAIN_CALLER_ADDRESS or an echo service (here a local HTTPS one), compared with allowedIpRanges; a caller outside
them is a FAIL that names the address and the fix."""
import shutil
import socket

import pytest

from devtools.rehearsal.local_https import LocalHttps, QuietHandler
from infra import REPO_ROOT
from infra.backends import caller_address
from infra.cli.main import main
from infra.core.preflight import caller_access
from infra.core.preflight.check import FAIL, OK, WARN
from tests.infra.cli.test_preflight import arm, clients  # noqa: F401 - the local ARM endpoint fixture


@pytest.fixture
def project(tmp_path):
    """The dev stack with a real deployer range, 20.50.1.0/28, instead of the example's placeholder."""
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    text = (REPO_ROOT / "Pulumi.dev.yaml").read_text().replace("[203.0.113.0/24]", "[20.50.1.0/28, 20.60.0.9]")
    (tmp_path / "Pulumi.dev.yaml").write_text(text)
    return tmp_path


@pytest.mark.parametrize("address,verdict", [("20.50.1.7", OK), ("20.60.0.9", OK), ("20.50.1.16", FAIL),
                                              ("40.74.28.1", FAIL)])
def test_the_caller_is_admitted_only_inside_allowed_ranges(address, verdict):
    found = caller_access.check(address, ["20.50.1.0/28", "20.60.0.9"], "dev")
    assert found.verdict == verdict, found.line()
    if verdict == FAIL:
        assert f"{address} (this machine) is not in allowedIpRanges (20.50.1.0/28, 20.60.0.9)" in found.text
        assert "self-hosted runner" in found.text and "Pulumi.dev.yaml" in found.text
    assert caller_access.check(None, ["20.50.1.0/28"], "dev", "no network").verdict == WARN


def test_preflight_fails_a_caller_the_firewalls_refuse_and_passes_one_they_admit(arm, project, capsys, monkeypatch):
    argv = ["preflight", "--stack", "dev", "--project-dir", str(project)]
    monkeypatch.setenv(caller_address.ENV, "40.74.28.1")  # a hosted runner's address: in no stack's list
    assert main(argv, preflight_services=lambda: clients(arm)) == 1
    out = capsys.readouterr().out
    assert "\nFAIL caller address: 40.74.28.1 (this machine) is not in allowedIpRanges" in out
    assert "would stop `pulumi up` or the first job (caller address)" in out
    monkeypatch.setenv(caller_address.ENV, "20.50.1.3")  # the self-hosted runner's NAT address
    assert main(argv, preflight_services=lambda: clients(arm)) == 0
    assert "\nok   caller address: 20.50.1.3 is in allowedIpRanges" in capsys.readouterr().out


class Echo(QuietHandler):
    answer = b"20.50.1.3\n"

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(self.answer)))
        self.end_headers()
        self.wfile.write(self.answer)


def test_the_address_is_what_the_echo_service_answers_over_https():
    served = LocalHttps(Echo)
    try:
        assert caller_address.discover(f"{served.url}/ip", env={}, ca_file=served.ca_file) == ("20.50.1.3", "")
        Echo.answer = b"<html>blocked</html>"
        address, why = caller_address.discover(f"{served.url}/ip", env={}, ca_file=served.ca_file)
        assert address is None and "not an IPv4 address" in why
    finally:
        Echo.answer = b"20.50.1.3\n"
        served.close()
    with socket.socket() as free:  # a port nothing listens on: unknown, said, never raised
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    address, why = caller_address.discover(f"https://127.0.0.1:{port}/ip", env={}, timeout=2)
    assert address is None and "did not answer" in why and caller_address.ENV in why
    assert caller_address.discover(env={caller_address.ENV: "20.60.0.9"}) == ("20.60.0.9", "")
