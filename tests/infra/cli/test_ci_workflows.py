"""The fleet's pipeline files (.github/workflows, docs/ci.md): each parses and validates against GitHub's workflow
schema (SchemaStore's copy, tests/infra/cli/schemas/), names only `python -m infra` verbs that exist, signs in to
Azure with workload identity federation and never with a secret, keeps what a pull request chooses (stack names)
out of its shell text, and pins the Pulumi CLI the requirements pin."""
import json
import re
import shlex

import jsonschema
import pytest
import yaml

from infra import REPO_ROOT
from infra.cli import changed_stacks
from infra.cli.main import main

WORKFLOWS = sorted((REPO_ROOT / ".github" / "workflows").glob("*.yml"))
SCHEMA = json.loads((REPO_ROOT / "tests" / "infra" / "cli" / "schemas" / "github-workflow.json").read_text())


def _load(path):
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def _steps(workflow):
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def test_the_fleet_has_its_two_workflows():
    assert {p.name for p in WORKFLOWS} >= {"fleet-plan.yml", "fleet-deploy.yml"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_each_workflow_validates_against_githubs_schema(path):
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:160]}"
              for e in jsonschema.Draft7Validator(SCHEMA).iter_errors(_load(path))]
    assert not errors, errors


def test_the_schema_check_can_fail():
    broken = _load(REPO_ROOT / ".github" / "workflows" / "fleet-plan.yml")
    broken["jobs"]["plan"]["steps"][0]["runs"] = "typo"
    assert list(jsonschema.Draft7Validator(SCHEMA).iter_errors(broken))


def _infra_verbs(run: str) -> list[str]:
    return re.findall(r"python -m infra ([a-z][a-z-]*)", run)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_each_infra_verb_and_its_flags_exist(path, capsys):
    runs = [step["run"] for step in _steps(_load(path)) if "run" in step]
    verbs = {verb for run in runs for verb in _infra_verbs(run)}
    assert verbs, "no python -m infra verb"
    for verb in sorted(verbs):
        with pytest.raises(SystemExit) as ended:
            main([verb, "--help"])
        assert ended.value.code == 0, f"{path.name}: python -m infra {verb} is not a verb"
        helped = capsys.readouterr().out
        for run in runs:
            for line in run.splitlines():
                if f"python -m infra {verb}" in line:
                    words = shlex.split(line.split(f"python -m infra {verb}", 1)[1])
                    for flag in (w for w in words if w.startswith("--")):
                        assert flag in helped, f"{path.name}: {verb} has no {flag}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_azure_sign_in_is_oidc_and_no_secret_is_named(path):
    text = path.read_text()
    assert "secrets." not in text and "client-secret" not in text and "creds:" not in text
    workflow = _load(path)
    assert workflow["permissions"] == {"contents": "read", "id-token": "write"}
    logins = [s for s in _steps(workflow) if str(s.get("uses", "")).startswith("azure/login@")]
    assert logins, "no azure/login step"
    for step in logins:
        assert set(step["with"]) == {"client-id", "tenant-id", "subscription-id"}
        assert all(value.startswith("${{ vars.") for value in step["with"].values())


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_expression_is_spliced_into_shell_text(path):
    """`${{ ... }}` inside `run:` is pasted into the script before the shell reads it: a stack file named by a
    pull request would become shell code. Values reach scripts through `env:` only."""
    runs = [step["run"] for step in _steps(_load(path)) if "run" in step]
    assert not [run for run in runs if "${{" in run]


def test_deploy_runs_one_stack_at_a_time_behind_an_environment_and_pins_the_cli():
    deploy = _load(REPO_ROOT / ".github" / "workflows" / "fleet-deploy.yml")
    assert deploy["on"]["push"] == {"branches": ["main"], "paths": ["Pulumi.*.yaml"]}
    up = deploy["jobs"]["up"]
    assert up["environment"] == "fleet" and up["strategy"]["max-parallel"] == 1
    assert deploy["concurrency"]["cancel-in-progress"] is False
    pin = re.search(r"^pulumi==(\S+)$", (REPO_ROOT / "requirements.txt").read_text(), re.M)[1]
    cli = next(s for s in up["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@"))
    assert cli["with"]["pulumi-version"] == pin
    ups = [s["run"] for s in up["steps"] if "pulumi up" in s.get("run", "")]
    assert ups == ['pulumi up --stack "$STACK" --yes --non-interactive --policy-pack infra/policy --diff']
    assert (REPO_ROOT / "infra" / "policy" / "PulumiPolicy.yaml").is_file()
    assert up["env"]["ARM_USE_OIDC"] == "true"


def test_the_plan_triggers_cover_what_changed_stacks_calls_fleet_wide():
    paths = _load(REPO_ROOT / ".github" / "workflows" / "fleet-plan.yml")["on"]["pull_request"]["paths"]
    assert "Pulumi.*.yaml" in paths
    for prefix in changed_stacks.FLEET_WIDE:
        probe = prefix + ("x" if prefix.endswith(("/", "-")) else "")
        probe = probe if not prefix.endswith("-") else prefix + "dev.txt"
        glob = [p for p in paths if re.fullmatch(p.replace(".", r"\.").replace("**", ".*").replace("*", "[^/]*"),
                                                 probe)]
        assert glob, f"a change to {probe} is fleet-wide but triggers no plan"


def test_the_platform_image_build_builds_each_image_of_the_table_once_and_prints_shared_images():
    """One image build for the fleet (docs/teams.md): the images workflow builds the Dockerfiles `up` would build
    (the frameworks table's), pushes them to the platform registry, and hands their digests to `shared-images`."""
    from training import frameworks

    workflow = _load(REPO_ROOT / ".github" / "workflows" / "platform-images.yml")
    assert set(workflow["on"]["push"]["paths"]) == {"images/**", "training/**"}
    steps = workflow["jobs"]["build"]["steps"]
    builds = {s["id"]: s["with"] for s in steps if str(s.get("uses", "")).startswith("docker/build-push-action@")}
    assert {name: spec["file"] for name, spec in builds.items()} == {
        image.name: image.dockerfile for image in frameworks.images()}
    for name, spec in builds.items():
        assert spec["context"] == "." and spec["platforms"] == "linux/amd64" and spec["push"] is True
        assert spec["tags"].endswith(f"/dltrain/{name}:${{{{ github.sha }}}}")
    (summary,) = [s for s in steps if "shared-images" in s.get("run", "")]
    for name in builds:
        assert summary["env"][f"{name.upper()}_DIGEST"] == f"${{{{ steps.{name}.outputs.digest }}}}"
        assert f'--image "{name}=dltrain/{name}@${name.upper()}_DIGEST"' in summary["run"]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_full_commit_sha(path):
    """A tag can be moved to other code; these jobs hold tokens that deploy the fleet or push its images. GitHub's
    hardening guide: "Pinning an action to a full length commit SHA is currently the only way to use an action as
    an immutable release" (https://docs.github.com/en/actions/security-for-github-actions/security-guides/security-hardening-for-github-actions#using-third-party-actions).
    The release each SHA was taken from stays beside it as a comment, for the upgrade path (docs/upgrade.md)."""
    lines = [line.strip() for line in path.read_text().splitlines() if re.match(r"\s*(- )?uses:", line)]
    assert lines
    unpinned = [line for line in lines if not re.fullmatch(r"(- )?uses: [\w.-]+/[\w.-]+@[0-9a-f]{40}  # v\d+(\.\d+)*",
                                                            line)]
    assert not unpinned, unpinned
