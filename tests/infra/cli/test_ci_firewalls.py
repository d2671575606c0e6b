"""The fleet's deploy passes the stacks' IP firewalls (docs/ci.md, "Through the firewalls"): `pulumi up` runs only on
the self-hosted runner whose static egress address the stacks admit, never on a hosted runner (an Azure address, new
on each run, that no allowedIpRanges holds), and only after a preflight whose caller check can stop it; the pull
request's preflight checks the runner's address against the changed stack."""
import re

from infra import REPO_ROOT
from infra.backends import caller_address
from tests.infra.cli.test_ci_workflows import _load

WORKFLOWS = REPO_ROOT / ".github" / "workflows"
RUNNER = ["self-hosted", "linux", "x64", "dltrain-fleet"]


def _jobs_running(command: str):
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for name, job in _load(path)["jobs"].items():
            if any(command in step.get("run", "") for step in job.get("steps", [])):
                yield path.name, name, job


def test_pulumi_up_runs_only_on_the_fleets_self_hosted_runner():
    found = list(_jobs_running("pulumi up"))
    assert [(w, j) for w, j, _ in found] == [("fleet-deploy.yml", "up")]
    for _, _, job in found:
        assert job["runs-on"] == RUNNER, job["runs-on"]
    # Jobs that write to no data plane stay on hosted runners (no need for the firewalls' admission).
    deploy = _load(WORKFLOWS / "fleet-deploy.yml")
    assert deploy["jobs"]["select"]["runs-on"].startswith("ubuntu-")
    assert all(str(job["runs-on"]).startswith("ubuntu-") for job in _load(WORKFLOWS / "fleet-plan.yml")["jobs"].values())


def test_a_gating_preflight_runs_on_the_runner_before_pulumi_up():
    steps = _load(WORKFLOWS / "fleet-deploy.yml")["jobs"]["up"]["steps"]
    runs = [step.get("run", "") for step in steps]
    preflight = next(i for i, run in enumerate(runs) if re.search(r"python -m infra preflight\b", run))
    up = next(i for i, run in enumerate(runs) if run.startswith("pulumi up"))
    assert preflight < up and not steps[preflight].get("continue-on-error")
    # On the runner the address is discovered, not given: what the firewalls will see.
    assert caller_address.ENV not in (steps[preflight].get("env") or {})


def test_the_pull_requests_preflight_checks_the_runners_address_against_the_stack():
    steps = _load(WORKFLOWS / "fleet-plan.yml")["jobs"]["plan"]["steps"]
    preflight = next(step for step in steps if "python -m infra preflight" in step.get("run", ""))
    assert preflight["env"][caller_address.ENV] == "${{ vars.FLEET_RUNNER_ADDRESS }}"


def test_docs_say_how_the_deploy_passes_the_firewalls():
    text = (REPO_ROOT / "docs" / "ci.md").read_text()
    assert "## Through the firewalls: the fleet's self-hosted runner" in text
    for needed in ("dltrain-fleet", "FLEET_RUNNER_ADDRESS", "allowedIpRanges", "caller address", "NAT gateway"):
        assert needed in text, needed
