"""The fleet at scale (issue 40): `plan`, `teams` and `new-team` read each stack file and Pulumi.yaml once, however
many stack files the folder holds, and `teams` evaluates the program once per distinct config, not once per stack.
Counted, not timed: file opens as Python's audit hook sees them (every `open`, whoever calls it), in a temp folder
of N stack files written by `new-team`. The times are `python -m devtools.fleet_benchmark`'s."""
import json
import re
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

from infra import REPO_ROOT
from infra.cli import plan, teams
from infra.cli.new_team import new_team
from infra.cli.main import main
from infra.core.config import stack as config
from infra.preview import offline

_OPENS: list[Counter] = []  # the counters of the tests running now; the hook cannot be removed, so it is gated
STACK_FILE = re.compile(r"Pulumi\.(?P<stack>[^/\\]+)\.yaml")


def _audit(event, args):
    if event == "open" and _OPENS and isinstance(args[0], (str, bytes, Path)):
        name = Path(str(args[0], "utf-8") if isinstance(args[0], bytes) else args[0]).name
        if name == "Pulumi.yaml" or STACK_FILE.fullmatch(name):
            _OPENS[-1][name] += 1


sys.addaudithook(_audit)


class counting_opens:
    def __enter__(self):
        _OPENS.append(Counter())
        return _OPENS[-1]

    def __exit__(self, *exc):
        _OPENS.pop()


N = 10  # stack files in the folder: the dev stack and N - 1 written from it


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    shutil.copy(REPO_ROOT / "Pulumi.yaml", root)
    shutil.copy(REPO_ROOT / "Pulumi.dev.yaml", root)
    for i in range(1, N):
        new_team(f"team{i}", "dev", None, root)
    assert len(config.stack_names(root)) == N
    return root


def _stack_file_opens(opens: Counter) -> int:
    return sum(count for name, count in opens.items() if name != "Pulumi.yaml")


def test_teams_reads_each_stack_file_once_and_evaluates_each_distinct_config_once(fleet, capsys, monkeypatch):
    evaluated = []
    real = offline.evaluate
    monkeypatch.setattr(offline, "evaluate", lambda cfg, *a, **k: evaluated.append(cfg.stack) or real(cfg, *a, **k))
    with counting_opens() as opens:
        assert main(["teams", "--json", "--project-dir", str(fleet)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["stack"] for row in rows] == config.stack_names(fleet)
    assert all(row["failing"] == [] and row["error"] is None for row in rows)
    assert _stack_file_opens(opens) <= N, opens  # once each (today's code: N + N * (N - 1))
    assert opens["Pulumi.yaml"] <= 1, opens
    # The N stacks differ only in team and addresses (new-team's own keys): one evaluation serves them all.
    assert len(evaluated) == 1, evaluated


def test_plan_reads_each_stack_file_once(fleet):
    with counting_opens() as opens:
        cfg = teams.stack_config("team3", fleet)
    assert cfg.team == "team3"
    assert _stack_file_opens(opens) <= N and opens["Pulumi.yaml"] <= 1, opens


def test_new_team_reads_each_stack_file_once(fleet):
    with counting_opens() as opens:
        result = new_team("extra", "dev", None, fleet)
    try:
        assert result.config.team == "extra"
        # Every other stack file once; the template for its config, its text and its own keys; the new file
        # written to a scratch folder, read back to check it, then written here.
        others = {name: count for name, count in opens.items()
                  if name not in ("Pulumi.yaml", "Pulumi.dev.yaml", "Pulumi.extra.yaml")}
        assert len(others) == N - 1 and set(others.values()) == {1}, opens
        assert opens["Pulumi.dev.yaml"] <= 3 and opens["Pulumi.extra.yaml"] <= 3, opens
        assert opens["Pulumi.yaml"] <= 1, opens
    finally:
        result.path.unlink()


def test_one_evaluation_per_distinct_config_gives_each_stack_the_verdicts_its_own_evaluation_gives(fleet):
    """What the grouping rests on: stacks that differ only in team and addresses (teams.IDENTITY_KEYS) declare the
    same resources but for names and addresses, so each check passes or fails alike for all of them."""
    def failing(cfg):
        evaluation = offline.evaluate(cfg)
        return sorted(name for verdict, name, _ in plan.verdicts(evaluation) + plan.service_verdicts(evaluation)
                      if verdict == "FAIL"), sorted(name for _, name, _ in plan.verdicts(evaluation))

    dev, other = config.from_stack_file("dev", fleet), config.from_stack_file(f"team{N - 1}", fleet)
    assert teams.shape(config.engine_config("dev", fleet)) == teams.shape(config.engine_config(f"team{N - 1}", fleet))
    assert failing(dev) == failing(other)
    assert dev.network.address_space != other.network.address_space and dev.team != other.team


def test_a_stack_that_differs_in_more_than_team_and_addresses_gets_its_own_evaluation(fleet, tmp_path, capsys,
                                                                                       monkeypatch):
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml", "Pulumi.team1.yaml", "Pulumi.team2.yaml"):
        shutil.copy(fleet / name, tmp_path)
    text = (tmp_path / "Pulumi.team2.yaml").read_text()
    assert "azure-dl-training:maxNodes: 2\n" in text
    (tmp_path / "Pulumi.team2.yaml").write_text(text.replace("maxNodes: 2\n", "maxNodes: 1\n"))
    evaluated = []
    real = offline.evaluate
    monkeypatch.setattr(offline, "evaluate", lambda cfg, *a, **k: evaluated.append(cfg.stack) or real(cfg, *a, **k))
    assert main(["teams", "--json", "--project-dir", str(tmp_path)]) == 0
    rows = {row["stack"]: row for row in json.loads(capsys.readouterr().out)}
    assert evaluated == ["dev", "team2"]  # team1 shares dev's
    assert (rows["dev"]["maxNodes"], rows["team1"]["maxNodes"], rows["team2"]["maxNodes"]) == (2, 2, 1)
