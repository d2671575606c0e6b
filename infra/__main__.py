"""`python -m infra`: the deployer's command line (infra/cli/main.py). It needs the deployer's environment
(requirements.txt); run from a Python without it, it says so in one line instead of a traceback."""
from __future__ import annotations  # this file must at least parse on an old Python, to say so

import sys

# The install that gives any OS what `python -m infra` imports (no `make setup`: that also builds Horovod and the
# training environments, which a deployer does not need).
INSTALL = ("python -m venv .venv && .venv/bin/pip install -r requirements.txt (Windows: .venv\\Scripts\\pip), "
           "then run .venv/bin/python -m infra ... (or activate .venv first)")
OWN_PACKAGES = ("infra", "training", "devtools")  # a module of this project missing is a bug, not an install
# The oldest Python the deployer's environment installs on: the pins in requirements.txt (and the code's own
# syntax) need 3.11. On an older one pip fails on the first pin and the install line above would fail the same
# way again, so an older Python is named first, once, with what to install instead.
MIN_PYTHON = (3, 11)


def too_old(version: tuple[int, ...] = tuple(sys.version_info[:3]), executable: str = sys.executable) -> str | None:
    """The one line for a Python older than MIN_PYTHON, or None."""
    if tuple(version[:2]) >= MIN_PYTHON:
        return None
    wanted = ".".join(map(str, MIN_PYTHON))
    return (f"error: python -m infra needs Python {wanted} or newer; this is {'.'.join(map(str, version))} "
            f"({executable}): install Python {wanted}+ (python.org, your package manager, or `uv python install "
            f"{wanted}`), then make .venv with it: python{wanted} -m venv .venv && .venv/bin/pip install -r "
            "requirements.txt")


def run(argv: list[str]) -> int:
    old = too_old()
    if old:
        print(old, file=sys.stderr)
        return 2
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
