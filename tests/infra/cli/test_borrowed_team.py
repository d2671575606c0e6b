"""A stack file copied by hand that keeps another team's `team` value is refused in one line (every tag, budget and
role of it would name the other team); a team's second stack (TEAM-something) keeps its team."""
import shutil

from infra import REPO_ROOT
from infra.cli.main import main
from infra.cli.teams import Fleet, borrowed_team
from infra.core.config import stack as config


def test_a_copied_stack_file_that_kept_another_teams_value_is_refused(tmp_path, capsys):
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path)
    for stack in config.stack_names():
        shutil.copy(REPO_ROOT / f"Pulumi.{stack}.yaml", tmp_path)
    shutil.copy(REPO_ROOT / "Pulumi.dev.yaml", tmp_path / "Pulumi.speech.yaml")  # by hand: team: dev stays
    assert main(["plan", "--stack", "speech", "--project-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "error: Pulumi.speech.yaml: config key 'team': 'dev' is the team of stack dev (Pulumi.dev.yaml), so this "
        "stack's tags, budget and roles would all name dev; set team: speech")
    fleet = Fleet(tmp_path)
    dev = fleet.parsed("dev")
    assert borrowed_team(dev, fleet.teams()) is None  # its own
    second = config.from_engine_config("dev-b", fleet.engine("dev"), fleet.project)  # vision-dev style: team dev
    assert borrowed_team(second, fleet.teams()) is None
