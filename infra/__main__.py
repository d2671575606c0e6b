"""`python -m infra`: the deployer's command line (infra/cli/main.py). It needs the deployer's environment
(requirements.txt); run from a Python without it, it says so in one line instead of a traceback."""
import sys

# The install that gives any OS what `python -m infra` imports (no `make setup`: that also builds Horovod and the
# training environments, which a deployer does not need).
INSTALL = ("python -m venv .venv && .venv/bin/pip install -r requirements.txt (Windows: .venv\\Scripts\\pip), "
           "then run .venv/bin/python -m infra ... (or activate .venv first)")
OWN_PACKAGES = ("infra", "training", "devtools")  # a module of this project missing is a bug, not an install


def run(argv: list[str]) -> int:
    try:
        from infra.cli.main import main

        return main(argv)
    except ModuleNotFoundError as err:
        if not err.name or err.name.split(".")[0] in OWN_PACKAGES:
            raise
        print(f"error: python -m infra needs the deployer's environment, and this Python ({sys.executable}) has no "
              f"module {err.name!r}: {INSTALL}", file=sys.stderr)
        return 2


sys.exit(run(sys.argv[1:]))
