"""`python -m devtools fleet-benchmark`: `teams`, `plan --stack` and `new-team` over a fleet of stack files, timed
side by side with the repo's own stacks.

In a temporary folder (never the repo), Pulumi.yaml and the repo's stack files are copied, then teams are added with
`new-team` (the library call, from the dev stack with a /20 address space) up to each size asked for (default 100
and 300). For the repo's
stacks and each size, in one run on one machine, each command runs as a user runs it (`python -m infra ...
--project-dir DIR`, a fresh process: imports included) and its wall time is printed, with its ratio to the repo's
stacks. `--against REF` runs the same commands with the code of git commit REF too (extracted to a temporary folder),
on the same folders, for before/after figures; `--against-max N` leaves sizes above N to the current code only (the
code before issue 40 took minutes per hundred stacks).

Targets (issue 40): `teams` over 100 stacks in at most 15 s; `plan` of one stack at most 1.5x its time with the
repo's stacks.
"""
from __future__ import annotations

import argparse
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from infra import REPO_ROOT
from infra.cli.new_team import new_team
from infra.core.config import stack as config

TEMPLATE = "dev"  # the stack `plan` is timed on and the timed `new-team` copies
# The generated teams' template: dev with a /20 address space (dev's /16 would run out of private /16s, 273 in all,
# before 300 stacks), in a range the repo's stacks leave free.
GROWN = ("bench", {"addressSpace": "172.31.240.0/20", "computeSubnet": "172.31.240.0/21",
                   "storageSubnet": "172.31.248.0/24"})
TEAMS_TARGET_S, PLAN_TARGET_RATIO = 15.0, 1.5  # issue 40, at 100 stacks
COMMANDS = ("teams", "plan", "new-team")


def grow(root: Path, size: int) -> None:
    """Add teams to the folder (new-team from the GROWN template, written first) until it holds `size` stack
    files."""
    name, spaces = GROWN
    if not (root / f"Pulumi.{name}.yaml").exists():
        text = (root / f"Pulumi.{TEMPLATE}.yaml").read_text()
        for key, value in spaces.items():
            text = re.sub(rf"(?m)^(\s+{config.PROJECT}:{key}:).*$", rf"\g<1> {value}", text)
        (root / f"Pulumi.{name}.yaml").write_text(text.replace(f"{config.PROJECT}:team: {TEMPLATE}",
                                                               f"{config.PROJECT}:team: {name}"))
        assert str(config.from_stack_file(name, root).network.address_space) == spaces["addressSpace"]
    have = config.stack_names(root)
    n = 0
    while len(have) < size:
        n += 1
        team = f"bench{n:04d}"
        if team not in have:
            new_team(team, name, None, root)
            have.append(team)


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(code: Path, args: list[str], root: Path) -> tuple[float, float]:
    """Wall and CPU seconds of `python -m infra ARGS --project-dir ROOT` run from `code` (whose infra package
    runs). CPU is the process's own: on a machine others share, it moves less than the wall time."""
    cpu, started = _cpu_of_children(), time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "infra", *args, "--project-dir", str(root)], cwd=code,
                            capture_output=True, text=True)
    elapsed, cpu = time.perf_counter() - started, _cpu_of_children() - cpu
    if result.returncode not in (0, 1):  # 1: a failing check or placeholder, still a full run
        raise SystemExit(f"error: `infra {' '.join(args)}` in {root} exited {result.returncode}: "
                         f"{result.stderr.strip().splitlines()[-1:] or ''}")
    return elapsed, cpu


def measure(code: Path, root: Path) -> dict[str, tuple[float, float]]:
    """The three commands' (wall, CPU) seconds on the folder, leaving it as it was."""
    figures = {"teams": timed(code, ["teams", "--json"], root),
               "plan": timed(code, ["plan", "--stack", TEMPLATE], root),
               "new-team": timed(code, ["new-team", "benchnew", "--from", TEMPLATE], root)}
    (root / "Pulumi.benchnew.yaml").unlink()
    return figures


def _code_of(ref: str, into: Path) -> Path:
    """The tree of git commit `ref`, extracted to `into`."""
    into.mkdir()
    archive = subprocess.run(["git", "archive", ref], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools fleet-benchmark", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 300], help="stack files per fleet")
    parser.add_argument("--against", metavar="REF", help="also time the code of this git commit (e.g. HEAD~3)")
    parser.add_argument("--against-max", type=int, default=100, metavar="N",
                        help="time --against on fleets of at most N stacks (default 100)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fleet-") as scratch:
        root = Path(scratch, "project")
        root.mkdir()
        shutil.copy(REPO_ROOT / "Pulumi.yaml", root)
        for stack in config.stack_names(REPO_ROOT):
            shutil.copy(REPO_ROOT / f"Pulumi.{stack}.yaml", root)
        codes = {"now": REPO_ROOT}
        if args.against:
            codes[args.against] = _code_of(args.against, Path(scratch, "against"))
        sizes = [len(config.stack_names(root)), *sorted(set(args.sizes))]
        rows: list[tuple] = []
        base: dict[str, dict[str, float]] = {}
        for size in sizes:
            started = time.perf_counter()
            grow(root, size)
            print(f"{size} stack files ({time.perf_counter() - started:.0f} s to write)", file=sys.stderr, flush=True)
            for label, code in codes.items():
                if label != "now" and size > args.against_max and size != sizes[0]:
                    continue
                figures = measure(code, root)
                base.setdefault(label, figures)
                rows.append((label, size, figures, base[label]))
                print(f"  {label}: " + ", ".join(f"{k} {wall:.1f} s ({cpu:.1f} s CPU)"
                                                 for k, (wall, cpu) in figures.items()), file=sys.stderr, flush=True)
    print(f"{'code':<10} {'stacks':>6}  " + "  ".join(f"{k + ' s':>10} {'CPU s':>6} {'x':>5}" for k in COMMANDS))
    for label, size, figures, first in rows:
        print(f"{label:<10} {size:>6}  " + "  ".join(
            f"{figures[k][0]:>10.1f} {figures[k][1]:>6.1f} {figures[k][1] / first[k][1]:>5.2f}" for k in COMMANDS))
    print(f"\nWall seconds, CPU seconds of the command's process, and x: its CPU time over the same code's on the "
          f"repo's {sizes[0]} stacks (the commands run on one core: on an idle machine wall is about CPU; on a shared "
          f"one, wall varies with the others' load and CPU does not). Targets (issue 40): teams over 100 stacks <= {TEAMS_TARGET_S:.0f} s; plan of "
          f"one stack <= {PLAN_TARGET_RATIO}x. Each command is a fresh `python -m infra` process "
          f"({sys.executable}); compare figures only within one run on one machine.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
