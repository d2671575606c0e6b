"""plan's `data path:` line for every shipped stack, and submit's first line when the data path falls short
(infra/core/data/path.py). In-process and offline: the plan of each stack from the cached evaluation, submit on a
copy of the vision stack whose outputs are not there, so nothing reaches Azure after its first line."""
import json
import shutil

import pytest

from infra import REPO_ROOT
from infra.cli import plan
from infra.cli.main import main
from tests.infra.conftest import STACKS, evaluation_for


@pytest.mark.parametrize("stack", STACKS)
def test_plan_prints_one_data_path_line_per_stack(stack):
    text, _ = plan.render(evaluation_for(stack))
    [line] = [line for line in text.splitlines() if line.startswith("data path:")]
    assert "img/s at maxNodes=" in line and " delivers " in line and "staging" in line


def test_the_vision_stacks_plan_says_it_is_fed():
    text, _ = plan.render(evaluation_for("vision"))
    [line] = [line for line in text.splitlines() if line.startswith("data path:")]
    assert "node-local delivers 457,600 img/s, slowest stage decode" in line and "1.33 of the need: fed" in line


def _vision_project(tmp_path, extra: str = ""):
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    keys = {line.split(":", 2)[1] for line in extra.splitlines() if line.strip()}  # extra's keys replace the file's
    kept = [line for line in (REPO_ROOT / "Pulumi.vision.yaml").read_text().splitlines()
            if not (line.startswith("  azure-dl-training:") and line.split(":", 2)[1] in keys)]
    stack = "\n".join(kept) + "\n" + extra
    (tmp_path / "Pulumi.vision.yaml").write_text(stack)
    (tmp_path / "outputs.json").write_text(json.dumps({}))  # no outputs: submit stops at them, after its first line
    return tmp_path


def _submit(project, capsys):
    code = main(["submit", "--stack", "vision", "--outputs", str(project / "outputs.json"),
                 "--project-dir", str(project)])
    out, err = capsys.readouterr()
    return code, out, err


def test_submit_warns_first_when_the_data_path_falls_short(tmp_path, capsys):
    project = _vision_project(tmp_path, "  azure-dl-training:dataTier: nfs\n")
    code, out, err = _submit(project, capsys)
    first = out.splitlines()[0]
    assert first.startswith("warning: data path: the nfs data path delivers 5,197 img/s (source)")
    assert "of the 343,232 img/s the GPUs need at maxNodes=8" in first and "fix: set dataTier node-local" in first
    assert code != 0 and err.startswith("error: ")  # then it goes on, and stops at the missing outputs


def test_submit_says_nothing_of_a_data_path_that_feeds_the_gpus(tmp_path, capsys):
    code, out, err = _submit(_vision_project(tmp_path), capsys)
    assert "data path" not in out + err and code != 0
