"""`new-team` starts from the cheap `trial` stack (one small GPU node, Azure Files) unless told otherwise, and the
next steps it prints are README's."""
import re
import shutil

from infra import REPO_ROOT
from infra.cli.main import main
from infra.core.config import stack as config


def test_new_team_starts_from_trial_and_its_next_steps_are_readmes(tmp_path, capsys):
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path)
    for stack in config.stack_names():
        shutil.copy(REPO_ROOT / f"Pulumi.{stack}.yaml", tmp_path)
    assert main(["new-team", "ml", "--project-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "the rest as in Pulumi.trial.yaml" in out
    written, trial = config.from_stack_file("ml", tmp_path), config.from_stack_file("trial", tmp_path)
    assert (written.nodes.sku, written.nodes.max_nodes, written.nfs.kind) == (
        trial.nodes.sku, trial.nodes.max_nodes, trial.nfs.kind)
    readme = REPO_ROOT.joinpath("README.md").read_text()
    steps = [re.sub(r"^\s+\d\. ", "", line).split("   #")[0].split("  #")[0].strip()
             for line in out.splitlines() if re.match(r"^\s+\d\. (python|pulumi)", line)]
    assert len(steps) == 5, out
    for step in steps:  # each command as README writes it, for a team called <team>
        assert re.sub(r"\bml\b", "<team>", step) in readme, step
