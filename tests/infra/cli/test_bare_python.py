"""`python -m infra ...` from a Python without the deployer's environment (the bare `python` of every --help
example) ends in one line naming the install, not a ModuleNotFoundError traceback."""
import subprocess
import sys

import pytest

from infra import REPO_ROOT

# Runs `python -m infra ARGV` as a Python that lacks MODULE would (an import of it raises ModuleNotFoundError).
WITHOUT = "import runpy, sys; sys.modules[sys.argv[1]] = None; sys.argv = ['infra', *sys.argv[2:]]; " \
          "runpy.run_module('infra', run_name='__main__', alter_sys=True)"


@pytest.mark.parametrize("module,argv", [("pulumi", ["plan"]), ("urllib3", ["--help"])])
def test_without_the_deployer_environment_one_line_names_the_install(module, argv):
    result = subprocess.run([sys.executable, "-c", WITHOUT, module, *argv], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == "", result.stdout
    last = result.stderr.splitlines()[-1]  # after plan's notes on the stack file, if any
    assert "Traceback" not in result.stderr and last.startswith("error: python -m infra needs"), result.stderr
    assert f"has no module '{module}'" in last and "pip install -r requirements.txt" in last
