"""plan, preflight and leftovers without --stack follow the stack Pulumi has selected (`pulumi stack --show-name`, in
the project's folder), as the job verbs do; with no Pulumi CLI, or no stack selected, one line asks for --stack."""
import pytest

from infra.cli.main import main

COMMANDS = ("plan", "preflight", "leftovers")


@pytest.fixture
def pulumi(tmp_path, monkeypatch):
    """A Pulumi CLI on an otherwise empty PATH that answers `pulumi stack --show-name` as told (and logs where it was
    asked); `pulumi(None)`: none installed."""
    bin_dir, log = tmp_path / "bin", tmp_path / "asked"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))

    def answer(name: str | None, code: int = 0) -> None:
        script = bin_dir / "pulumi"
        if name is None:
            script.unlink(missing_ok=True)
            return
        script.write_text(f'#!/bin/sh\necho "$PWD $*" >> {log}\n'
                          f'if [ "$*" = "stack --show-name" ] && [ {code} = 0 ]; then echo {name}; exit 0; fi\n'
                          'echo "error: no stack selected; please use \'pulumi stack select\'" >&2\nexit 255\n')
        script.chmod(0o755)
    answer.log = log
    return answer


def test_plan_plans_the_selected_stack(pulumi, capsys):
    from infra import REPO_ROOT

    pulumi("trial")
    assert main(["plan"]) == 0
    assert "Plan for stack 'trial'" in capsys.readouterr().out
    assert pulumi.log.read_text() == f"{REPO_ROOT} stack --show-name\n"  # asked in the project's folder


@pytest.mark.parametrize("command", COMMANDS)
def test_each_follows_the_selection_before_reading_the_stack_file(command, pulumi, capsys):
    pulumi("nope")  # no Pulumi.nope.yaml: the refusal names the file of the selected stack, before any Azure call
    assert main([command]) == 2
    err = capsys.readouterr().err
    assert "Pulumi.nope.yaml" in err and "dev" not in err.split("stacks here:")[0], err


@pytest.mark.parametrize("command", COMMANDS)
def test_without_the_pulumi_cli_one_line_asks_for_stack(command, pulumi, capsys):
    pulumi(None)
    assert main([command]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: no --stack given, and without the Pulumi CLI"), err
    assert err.rstrip().endswith("pass --stack NAME (the stack whose file is Pulumi.NAME.yaml)"), err
    assert "--outputs" not in err  # the member file is the job verbs' alternative, not one of these commands'


@pytest.mark.parametrize("command", COMMANDS)
def test_with_no_stack_selected_one_line_asks_for_stack_or_a_selection(command, pulumi, capsys):
    pulumi("unused", code=255)
    assert main([command]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Pulumi has no stack selected here" in err, err
    assert "pass --stack NAME" in err and "`pulumi stack select NAME`" in err and "--outputs" not in err


@pytest.mark.parametrize("command", COMMANDS)
def test_help_says_what_the_default_is(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: the stack Pulumi has selected, `pulumi stack --show-name`)" in text
    assert "default: dev" not in text
