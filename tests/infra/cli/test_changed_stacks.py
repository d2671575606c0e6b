"""The fleet pipeline's stack selection (infra/cli/changed_stacks.py): a pure function of `git diff --name-status`,
and the `changed-stacks` verb over a real git repository in a temp folder."""
import json
import shutil
import subprocess

import pytest

from infra import REPO_ROOT
from infra.cli.changed_stacks import Selection, named, parse_name_status, select
from infra.cli.main import main


def test_stack_files_added_or_changed_are_selected_and_deleted_ones_listed_apart():
    got = select([("M", "Pulumi.vision.yaml"), ("A", "Pulumi.speech.yaml"), ("D", "Pulumi.old.yaml"),
                  ("M", "docs/teams.md"), ("M", "tests/infra/test_layout.py")])
    assert got == Selection(("speech", "vision"), ("old",), ())


def test_a_rename_is_a_removal_and_an_addition():
    assert select([("D", "Pulumi.a.yaml"), ("A", "Pulumi.b.yaml")]) == Selection(("b",), ("a",), ())
    assert select([("T", "Pulumi.a.yaml")]).stacks == ("a",)  # type changed (a link became a file): still there


@pytest.mark.parametrize("path", ["Pulumi.yaml", "infra/stack.py", "images/pytorch.Dockerfile",
                                  "training/runner.py", "requirements.txt", "requirements-dev.txt"])
def test_what_every_stack_deploys_is_fleet_wide_not_a_stack(path):
    assert select([("M", path)]) == Selection((), (), (path,))


def test_only_top_level_stack_files_and_pulumi_stack_names():
    assert select([("M", "examples/Pulumi.x.yaml")]) == Selection((), (), ())
    got = select([("A", "Pulumi.$(curl evil).yaml"), ("A", "Pulumi.ok-1_2.b.yaml")])
    assert got.stacks == ("ok-1_2.b",) and got.refused == ("Pulumi.$(curl evil).yaml",)


def test_parse_name_status_reads_gits_z_format():
    assert parse_name_status("M\0Pulumi.a.yaml\0D\0infra/stack.py\0") == [("M", "Pulumi.a.yaml"), ("D", "infra/stack.py")]
    assert parse_name_status("") == []


def test_named_stacks_must_have_their_file(tmp_path):
    (tmp_path / "Pulumi.a.yaml").write_text("config: {}\n")
    assert named(["a", "a"], tmp_path).stacks == ("a",)
    with pytest.raises(ValueError, match=r"no Pulumi\.b\.yaml .* stacks here: a$"):
        named(["a", "b"], tmp_path)
    with pytest.raises(ValueError):
        named(["../a"], tmp_path)


def _git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@example.com", "HOME": str(root), "PATH": "/usr/bin:/bin"})


def test_the_verb_over_a_real_diff_writes_githubs_outputs(tmp_path, capsys):
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path)
    shutil.copy(REPO_ROOT / "Pulumi.trial.yaml", tmp_path)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "base")
    shutil.copy(REPO_ROOT / "Pulumi.vision.yaml", tmp_path)
    (tmp_path / "Pulumi.trial.yaml").unlink()
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "head")
    out_file = tmp_path / "github_output"
    assert main(["changed-stacks", "--base", "HEAD~1", "--github-output", str(out_file),
                 "--project-dir", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out) == {"stacks": ["vision"], "removed": ["trial"], "fleetWide": []}
    assert out_file.read_text() == 'stacks=["vision"]\nany=true\nfleet_wide=false\n'
    assert main(["changed-stacks", "--base", "nosuchref", "--project-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nosuchref" in err and "fetch-depth: 0" in err
    assert main(["changed-stacks", "--project-dir", str(tmp_path)]) == 2
    assert "give --base REF" in capsys.readouterr().err
