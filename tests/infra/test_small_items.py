"""Issue 49's small items, each one line with a suggestion: a Python older than 3.11 for the deployer, a stack given
as its file name, a team name over 12 characters, a GPU size in another case or misspelt."""
import subprocess
import sys

import pytest

from infra import REPO_ROOT
from infra.cli.main import main, stack_of_file_name
from infra.core import skus
from infra.core.config import stack as config
from infra.core.config.schema import ConfigError


def _infra_under(version: tuple, *argv: str) -> subprocess.CompletedProcess:
    """`python -m infra ARGV` as a Python reporting `version` would run it (sys.version_info replaced first)."""
    code = (f"import runpy, sys; sys.version_info = {version!r}; sys.argv = ['infra', *{list(argv)!r}]; "
            "runpy.run_module('infra', run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)


def test_an_old_python_is_named_once_with_what_to_install():
    ran = _infra_under((3, 10, 12, "final", 0), "plan", "--stack", "trial")
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr.count("\n") == 1, ran.stderr
    assert "needs Python 3.11 or newer; this is 3.10.12" in ran.stderr
    assert "python3.11 -m venv .venv" in ran.stderr and "Traceback" not in ran.stderr


def test_a_new_enough_python_goes_on():
    ran = _infra_under((3, 11, 0, "final", 0), "new-team", "Bad-Name")
    assert ran.returncode == 2 and "needs Python" not in ran.stderr and "try 'badname'" in ran.stderr


@pytest.mark.parametrize("given,stack", [("Pulumi.speech.yaml", "speech"), ("./Pulumi.speech.yaml", "speech"),
                                         ("speech", "speech"), ("Pulumi.yaml", "Pulumi.yaml")])
def test_stack_given_as_its_file_name(given, stack):
    assert stack_of_file_name(given) == stack


def test_plan_takes_the_stack_files_name(capsys):
    assert main(["changed-stacks", "--stacks", "trial"]) == 0  # a verb reading --stacks, not --stack: untouched
    capsys.readouterr()
    assert main(["plan", "--stack", "Pulumi.nosuch.yaml"]) == 2
    err = capsys.readouterr().err
    assert "no Pulumi.nosuch.yaml in" in err and "Pulumi.Pulumi" not in err


@pytest.mark.parametrize("name,fit", [("computervision", "computervisi"), ("Speech-Team", "speechteam"),
                                      ("2d_vision", "dvision")])
def test_a_team_name_it_refuses_comes_with_one_that_passes(name, fit):
    with pytest.raises(ConfigError, match=rf"; try '{fit}'$") as refused:
        config.check_team(name)
    assert "\n" not in str(refused.value)
    assert config.check_team(fit) == fit


def test_no_suggestion_when_nothing_would_pass():
    with pytest.raises(ConfigError) as refused:
        config.check_team("9")
    assert "; try" not in str(refused.value)


@pytest.mark.parametrize("given", ["standard_nd96asr_v4", "STANDARD_ND96ASR_V4", "ND96asr_v4", " nd96asr_v4 "])
def test_gpu_sizes_match_without_case_and_take_the_catalogs_spelling(given):
    assert skus.find(given).name == "Standard_ND96asr_v4"


def test_a_stack_with_a_lowercase_size_plans_with_the_catalogs_name(tmp_path):
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    text = (REPO_ROOT / "Pulumi.trial.yaml").read_text()
    (tmp_path / "Pulumi.trial.yaml").write_text(text.replace("Standard_NC4as_T4_v3", "standard_nc4as_t4_v3"))
    assert config.from_stack_file("trial", tmp_path).nodes.gpu_sku == "Standard_NC4as_T4_v3"


@pytest.mark.parametrize("given,meant", [("Standard_ND96asr_v5", "Standard_ND96asr_v4"),
                                         ("Standard_NC4as_T4", "Standard_NC4as_T4_v3"),
                                         ("nd96isr_h100", "Standard_ND96isr_H100_v5")])
def test_a_misspelt_size_says_did_you_mean(given, meant):
    line = skus.unknown_size(given)
    assert line.startswith(f"unknown size {given!r}; did you mean {meant}") and "\n" not in line


def test_a_size_like_none_names_no_guess():
    assert "did you mean" not in skus.unknown_size("banana")
