"""`python -m infra new-team` and `python -m infra teams`, and plan's refusal of two stack files whose address
spaces overlap: in a temp copy of the repo's stack files, no cloud."""
import ipaddress
import json
import shutil
import subprocess
import sys

import pytest

from infra import REPO_ROOT
from infra.cli import teams
from infra.cli.new_team import TEAM_OWN_KEYS
from infra.cli.main import main
from infra.core import cost
from infra.core.config import stack as config, schema as config_schema
from infra.core.backend_facts import BACKEND_ONLY_KEYS


@pytest.fixture
def project(tmp_path):
    """Pulumi.yaml and the repo's stack files (three or more), copied."""
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path)
    for stack in config.stack_names():
        shutil.copy(REPO_ROOT / f"Pulumi.{stack}.yaml", tmp_path)
    assert len(config.stack_names(tmp_path)) >= 3
    return tmp_path


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _spaces(root, skip):
    """Every other stack file's addressSpace and reserved ranges, read by the engine's merge (not new-team's code)."""
    ranges = {}
    for stack in config.stack_names(root):
        if stack != skip:
            cfg = config.from_stack_file(stack, root)
            ranges[stack] = (cfg.network.address_space, cfg.network.reserved_address_spaces)
    return ranges


def _plan(root, stack):
    return subprocess.run([sys.executable, "-m", "infra", "plan", "--stack", stack, "--project-dir", str(root)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


def test_new_team_picks_a_space_no_other_stack_uses_and_plan_accepts_it(project, capsys):
    assert main(["new-team", "ml", "--project-dir", str(project)]) == 0
    out = capsys.readouterr().out
    cfg = config.from_stack_file("ml", project)
    assert cfg.team == "ml" and cfg.backend == config.from_stack_file("dev", project).backend
    others = _spaces(project, skip="ml")
    for stack, (space, reserved) in others.items():
        assert not cfg.network.address_space.overlaps(space), stack
        assert not any(cfg.network.address_space.overlaps(r) for r in reserved), stack
        assert space in cfg.network.reserved_address_spaces, stack  # the others' spaces listed
    assert cfg.network.address_space.subnet_of(ipaddress.IPv4Network("10.0.0.0/8"))
    assert cfg.network.compute_subnet.subnet_of(cfg.network.address_space)
    assert cfg.network.storage_subnet.subnet_of(cfg.network.address_space)
    for step in ("wrote Pulumi.ml.yaml", "python -m infra plan --stack ml", "pulumi stack init ml",
                 "pulumi up --stack ml"):
        assert step in out, step
    # A second team avoids the first one too.
    assert main(["new-team", "cv", "--project-dir", str(project)]) == 0
    second = config.from_stack_file("cv", project).network.address_space
    assert not second.overlaps(cfg.network.address_space)
    assert cfg.network.address_space in config.from_stack_file("cv", project).network.reserved_address_spaces
    # The file as written passes plan (a real subprocess, as a reviewer runs it), overlap check included.
    result = _plan(project, "ml")
    assert result.returncode == 0, result.stderr
    assert "Plan for stack 'ml' (team ml" in result.stdout


def test_new_team_from_another_backend_drops_the_keys_it_would_refuse(project, capsys):
    aml = [s for s in config.stack_names(project) if config.from_stack_file(s, project).backend == "azureml"]
    assert aml, "the repo has an azureml stack to start from"
    assert main(["new-team", "speech", "--from", aml[0], "--backend", "batch", "--project-dir", str(project)]) == 0
    cfg = config.from_stack_file("speech", project)
    assert cfg.backend == "batch" and cfg.team == "speech"
    text = (project / "Pulumi.speech.yaml").read_text()
    for key in BACKEND_ONLY_KEYS["azureml"]:
        assert f":{key}:" not in text, key


def test_new_team_refuses_an_existing_stack_and_writes_nothing(project, capsys):
    before = _files(project)
    assert main(["new-team", "dev", "--project-dir", str(project)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: new-team dev: Pulumi.dev.yaml exists already; pick another name, or edit that file "
                   "(nothing written)"]
    assert _files(project) == before


@pytest.mark.parametrize("name", ["Bad_x", "9lives", "a", "../escape"])
def test_new_team_refuses_a_bad_name_in_the_team_keys_words(project, capsys, name):
    before = _files(project)
    assert main(["new-team", name, "--project-dir", str(project)]) == 2
    with pytest.raises(config_schema.ConfigError) as refused:  # the team key's own validator, the same line
        config.check_team(name)
    assert capsys.readouterr().err.splitlines() == [f"error: {refused.value}"]
    assert "lowercase letters or digits" in str(refused.value)
    assert _files(project) == before and not list(project.parent.glob("Pulumi.*"))  # nothing, here or beside


def test_plan_refuses_two_stack_files_whose_address_spaces_overlap(project):
    dev = (project / "Pulumi.dev.yaml").read_text()
    space = str(config.from_stack_file("dev", project).network.address_space)
    (project / "Pulumi.twin.yaml").write_text(dev.replace("team: dev", "team: twin"))
    assert space in (project / "Pulumi.twin.yaml").read_text()
    result = _plan(project, "twin")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"error: Pulumi.twin.yaml: config key 'addressSpace': {space} (stack twin) overlaps {space} of stack dev "
        "(Pulumi.dev.yaml); give each stack in this folder its own range (`python -m infra new-team` picks a free "
        "one) and list the others' in reservedAddressSpaces"]


def _expected(stack):
    cfg = config.from_stack_file(stack)
    estimate = cost.estimate(cfg)
    return cfg, estimate.at(cfg.nodes.min_nodes), estimate.at(cfg.nodes.max_nodes)


def test_teams_json_has_one_object_per_stack_file_with_stable_keys(capsys):
    assert main(["teams", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["stack"] for row in rows] == config.stack_names()
    for row in rows:
        assert list(row) == list(teams.JSON_KEYS)
        cfg, at_min, at_max = _expected(row["stack"])
        assert row == {**row, "team": cfg.team, "backend": cfg.backend, "location": cfg.location,
                       "gpuSku": cfg.nodes.gpu_sku, "minNodes": cfg.nodes.min_nodes, "maxNodes": cfg.nodes.max_nodes,
                       "usdPerHourAtMin": round(at_min, 2), "usdPerHourAtMax": round(at_max, 2),
                       "usdPerMonthAtMin": round(at_min * 730, 2), "monthlyBudgetUsd": cfg.budget.monthly_usd,
                       "budgetHoursAtMax": None if cfg.budget.monthly_usd is None else round(
                           cfg.budget.monthly_usd / at_max, 1), "priceRegion": "eastus", "failing": [],
                       "error": None}
        assert row["placeholders"] == list(cfg.placeholders)


def test_teams_table_has_one_row_per_stack_file(capsys):
    assert main(["teams"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["STACK", "BACKEND", "REGION"]
    for stack in config.stack_names():
        cfg, at_min, at_max = _expected(stack)
        row = next(line for line in lines if line.split()[0] == stack).split()
        assert row == [stack, cfg.backend, cfg.location, cfg.nodes.gpu_sku,
                       f"{cfg.nodes.min_nodes}-{cfg.nodes.max_nodes}", f"{at_min:.2f}", f"{at_max:.2f}",
                       f"{at_min * 730:.0f}", "-" if cfg.budget.monthly_usd is None else f"{cfg.budget.monthly_usd:.0f}",
                       "0"]
    assert any("East US list prices" in line for line in lines)


def test_teams_shows_a_refused_stack_and_fails(project, capsys):
    (project / "Pulumi.broken.yaml").write_text("config:\n  azure-dl-training:team: Broken\n")
    assert main(["teams", "--json", "--project-dir", str(project)]) == 1
    rows = {row["stack"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["broken"]["error"].startswith("Pulumi.broken.yaml: config key 'team': 'Broken' must be")
    assert rows["broken"]["backend"] is None


def test_new_team_rewrites_a_template_written_with_block_lists(project, capsys):
    dev = config.from_stack_file("dev", project)
    text = (project / "Pulumi.dev.yaml").read_text()
    flow = next(line for line in text.splitlines() if "reservedAddressSpaces:" in line)
    block = flow.split("[")[0] + "\n" + "".join(f"    - {cidr}\n" for cidr in dev.network.reserved_address_spaces)
    (project / "Pulumi.dev.yaml").write_text(text.replace(flow + "\n", block))
    assert config.from_stack_file("dev", project) == dev  # the same config, written as a block list
    assert main(["new-team", "ml", "--project-dir", str(project)]) == 0
    cfg = config.from_stack_file("ml", project)
    assert dev.network.address_space in cfg.network.reserved_address_spaces
    assert "    - " not in (project / "Pulumi.ml.yaml").read_text()


@pytest.mark.skipif("teamAdmins" not in config.load_schema() or "tags" not in config.load_schema(),
                    reason="the team access and tags keys (issue 24) are not in Pulumi.yaml yet")
def test_new_team_does_not_copy_the_template_teams_groups_nor_tags(project, capsys):
    group = "0b1c2d3e-4f50-4617-8283-94a5b6c7d8e9"
    with (project / "Pulumi.dev.yaml").open("a") as out:
        out.write(f"  azure-dl-training:teamAdmins: [{group}]\n  azure-dl-training:tags:\n"
                  "    owner: dev-team\n    costCenter: '1234'\n")
    assert config.read_stack_file("dev", project)["teamAdmins"] == [group]
    assert main(["new-team", "ml", "--from", "dev", "--project-dir", str(project)]) == 0
    assert "not copied from Pulumi.dev.yaml (the dev team's own): teamAdmins, tags" in capsys.readouterr().out
    written = (project / "Pulumi.ml.yaml").read_text()
    assert group not in written and "owner" not in written and "1234" not in written
    assert set(config.read_stack_file("ml", project)).isdisjoint(TEAM_OWN_KEYS)


def test_new_team_from_a_stack_that_is_not_here_names_the_ones_that_are(project, capsys):
    before = _files(project)
    assert main(["new-team", "ml", "--from", "nope", "--project-dir", str(project)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: --from nope: no Pulumi.nope.yaml in {project}; stacks here: {', '.join(config.stack_names(project))}"]
    assert _files(project) == before
