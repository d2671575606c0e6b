"""The fleet offline (issues 45 and 49): `teams` ends with the fleet's totals and flags a (subscription, region)
group over the default Batch account or GPU vCPU quotas; `new-team` says the same for the group it joins and can
put a stack in another subscription or region. Over the repo's stack files and stacks new-team generates."""
import json
import shutil

import pytest

from infra import REPO_ROOT
from infra.cli import teams
from infra.cli.new_team import member, new_team
from infra.cli.main import main
from infra.core import fleet_limits
from infra.core.config import stack as config
from infra.core.fleet_limits import Member

OTHER_SUB = "11111111-2222-3333-4444-555555555555"


@pytest.fixture
def project(tmp_path):
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path)
    for stack in config.stack_names():
        shutil.copy(REPO_ROOT / f"Pulumi.{stack}.yaml", tmp_path)
    return tmp_path


def _member(stack, backend="batch", sku="Standard_ND96isr_H100_v5", max_nodes=8, sub=None, region="eastus",
            budget=None, spot=False):
    return Member(stack, sub, region, backend, sku, max_nodes, 1.0, 10.0, 730.0, budget, spot)


@pytest.fixture(scope="module")
def repo_rows():
    """`teams --json`'s rows for the repo's stack files, without evaluating the program (the totals and limits
    read the configs' figures, not the checks; test_teams.py evaluates them)."""
    from infra.cli import plan
    from infra.preview import offline

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(offline, "evaluate", lambda cfg, *a, **k: None)
        patch.setattr(plan, "verdicts", lambda evaluation: [])
        patch.setattr(plan, "service_verdicts", lambda evaluation: [])
        return teams.team_rows(REPO_ROOT)


def test_totals_sum_the_rows_of_the_repos_stacks(repo_rows):
    rows = [r for r in json.loads(json.dumps(repo_rows)) if not r["error"]]
    assert rows and all("subscription" in r for r in rows)
    t = fleet_limits.totals(fleet_limits.member_of_row(r) for r in rows)
    assert t.usd_per_month_idle == pytest.approx(sum(r["usdPerMonthAtMin"] for r in rows))
    assert t.usd_per_hour_full == pytest.approx(sum(r["usdPerHourAtMax"] for r in rows))
    assert t.budgets_usd == sum(r["monthlyBudgetUsd"] or 0 for r in rows)
    assert sum(t.gpus_by_group.values()) == sum(gpus for _, gpus, _ in t.by_family.values()) + t.spot[0]
    assert t.spot[0] == sum(r["maxNodes"] * 8 for r in rows if r["spot"] and r["gpuSku"].startswith("Standard_ND96")) \
        + sum(r["maxNodes"] for r in rows if r["spot"] and r["gpuSku"] == "Standard_NC4as_T4_v3")
    out = teams.table(repo_rows)
    assert f"Fleet ({len(rows)} stack(s)): idle (minNodes) {t.usd_per_month_idle:,.0f} USD a month" in out
    assert f"monthly budgets {t.budgets_usd:,.0f} USD" in out


def test_repo_flags_its_eastus_batch_accounts(repo_rows):
    """trial and vision are both Batch stacks in eastus with no subscription set: two accounts, one group."""
    out = teams.table(repo_rows)
    line = next(line for line in out.splitlines() if "Batch accounts (" in line)
    assert "subscription unset, eastus: 2 Batch accounts (trial, vision) may exceed" in line
    assert fleet_limits.BATCH_QUOTA_DOC in line


def test_generated_stacks_over_three_accounts_exceed_and_another_subscription_is_its_own_group(project):
    for name in ("team1", "team2"):
        new_team(name, "trial", None, project)
    result = new_team("team3", "trial", None, project)  # trial, vision, team1..3: five accounts in eastus
    assert any("5 Batch accounts" in line and "exceeds the default" in line for line in result.quota_lines)
    apart = new_team("team4", "trial", None, project, OTHER_SUB, "westus3")
    assert apart.quota_lines == ()
    assert apart.config.subscription_id == OTHER_SUB and apart.config.location == "westus3"
    # teams' fleet lines over the configs (the same figures as its rows, without evaluating the program again).
    fleet = teams.Fleet(project)
    members = [member(fleet.config(stack)) for stack in fleet.engines]
    out = "\n".join(fleet_limits.limit_warnings(members) +
                    fleet_limits.totals_lines(fleet_limits.totals(members), 730))
    assert "subscription unset, eastus: 5 Batch accounts" in out
    assert f"subscription {OTHER_SUB}, westus3: 1" in out  # its GPUs, its own group
    assert f"subscription {OTHER_SUB}, westus3: 1 Batch" not in out


def test_new_team_says_which_group_it_joins(project, capsys):
    assert main(["new-team", "speech", "--project-dir", str(project)]) == 0
    out = capsys.readouterr().out
    assert "joins subscription unset, eastus: over a default quota:" in out
    assert main(["new-team", "audio", "--subscription", OTHER_SUB.upper(), "--location", "westus3",
                 "--project-dir", str(project)]) == 0
    out = capsys.readouterr().out
    assert f"joins subscription {OTHER_SUB}, westus3: within the documented default quotas" in out
    text = (project / "Pulumi.audio.yaml").read_text()
    assert f"azure-native:subscriptionId: {OTHER_SUB}\n" in text


def test_new_team_replaces_the_templates_subscription_and_refuses_a_bad_one(project, capsys):
    trial = project / "Pulumi.trial.yaml"
    trial.write_text(trial.read_text().replace("config:\n", "config:\n  azure-native:subscriptionId: "
                                               "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee\n", 1))
    inherited = new_team("same", "trial", None, project)
    assert inherited.config.subscription_id == "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    moved = new_team("moved", "trial", None, project, OTHER_SUB)
    assert (project / "Pulumi.moved.yaml").read_text().count("azure-native:subscriptionId") == 1
    assert moved.config.subscription_id == OTHER_SUB
    before = sorted(p.name for p in project.iterdir())
    assert main(["new-team", "bad", "--subscription", "nope", "--project-dir", str(project)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'nope' is not a subscription ID" in err
    assert main(["new-team", "bad", "--location", "mars", "--project-dir", str(project)]) == 2
    assert "'mars' is not an Azure region" in capsys.readouterr().err
    assert sorted(p.name for p in project.iterdir()) == before


def test_gpu_vcpus_over_the_usual_quota_per_group_not_across_groups():
    one = [_member("a"), _member("b")]  # 2 x 8 nodes x 96 vCPUs = 1536 in one group
    lines = fleet_limits.limit_warnings(one)
    assert any("1536 GPU vCPUs at maxNodes" in line and "a 768" in line for line in lines), lines
    apart = [_member("a"), _member("b", sub=OTHER_SUB)]
    assert not any("GPU vCPUs" in line for line in fleet_limits.limit_warnings(apart))
    # Azure ML stacks count against the vCPU quota but hold no Batch account.
    aml = [_member(f"m{i}", backend="azureml", sku="Standard_NC4as_T4_v3", max_nodes=1) for i in range(5)]
    assert fleet_limits.limit_warnings(aml) == []
    assert fleet_limits.limit_warnings(one, only=(OTHER_SUB, "eastus")) == []


def test_totals_by_group_and_family():
    t = fleet_limits.totals([_member("a", budget=100.0), _member("b", sku="Standard_NC4as_T4_v3", max_nodes=2,
                                                                 sub=OTHER_SUB, region="westus3")])
    assert t.gpus_by_group == {(OTHER_SUB, "westus3"): 2, ("unset", "eastus"): 64}
    assert t.by_family[("unset", "eastus", "standardNDSH100v5Family")] == ("H100 80GB", 64, 768)
    assert t.by_family[(OTHER_SUB, "westus3", "StandardNCASv3_T4Family")] == ("T4 16GB", 2, 8)
    # a quota is per (subscription, region, family): the same family in two regions is two figures (issue 60)
    two = fleet_limits.totals([_member("a"), _member("b", region="westus3")])
    assert set(two.by_family) == {("unset", "eastus", "standardNDSH100v5Family"),
                                  ("unset", "westus3", "standardNDSH100v5Family")}
    assert "    subscription unset, westus3: standardNDSH100v5Family (H100 80GB): 64 GPUs, 768 vCPUs" in \
        fleet_limits.totals_lines(two, 730)
    assert (t.usd_per_month_idle, t.usd_per_hour_full, t.budgets_usd, t.without_budget) == (1460.0, 20.0, 100.0,
                                                                                            ("b",))


def test_spot_vcpus_are_kept_apart_from_the_dedicated_ones():
    spot = [_member("a", spot=True), _member("b", spot=True)]  # 1536 Spot vCPUs: not the dedicated quota
    lines = fleet_limits.limit_warnings(spot)
    assert not any("GPU vCPUs at maxNodes" in line for line in lines)
    assert any("1536 Spot vCPUs at maxNodes on Batch" in line and "100 low-priority cores" in line for line in lines)
    t = fleet_limits.totals(spot + [_member("c", sku="Standard_NC4as_T4_v3", max_nodes=1)])
    assert t.spot == (128, 1536) and t.by_family == {("unset", "eastus", "StandardNCASv3_T4Family"): ("T4 16GB", 1, 4)}
    assert "    subscription unset, eastus: Spot, every family (one quota): 128 GPUs, 1536 vCPUs" in \
        fleet_limits.totals_lines(t, 730)
    aml = [_member("m", backend="azureml", spot=True)]  # Azure ML holds no Batch account: no Batch figure applies
    assert fleet_limits.limit_warnings(aml) == []
