"""`python -m infra changed-stacks`: which team stacks a change touches, for the fleet's pipeline
(.github/workflows/fleet-plan.yml plans them on a pull request, fleet-deploy.yml runs `pulumi up` of just those on
merge; docs/ci.md).

The selection is a pure function of `git diff --name-status` between two commits (`select`): a stack file
`Pulumi.<stack>.yaml` added or modified at the top of the project is that stack's change; a stack file deleted is
listed apart and never destroyed by the pipeline (a `pulumi destroy` deletes a team's data: a person runs it,
docs/deploying.md); a change to what every stack deploys (Pulumi.yaml, infra/, images/, training/, the
requirements) is fleet-wide: the pull request plans every stack, and the merge deploys none of them on its own (a
fleet moves forward one stack at a time, docs/upgrade.md: the manual run of fleet-deploy.yml names the stacks).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from infra import REPO_ROOT
from infra.core.config.stack import stack_names

# A stack file at the project's top (Pulumi's own naming: Pulumi.<stack>.yaml beside Pulumi.yaml). Only the
# characters Pulumi allows in a stack name ("alphanumeric characters, hyphens, underscores, or periods",
# https://www.pulumi.com/docs/iac/concepts/stacks/): a file name a pull request chooses reaches the workflows'
# commands, so anything else (a quote, `$(...)`) is no stack here.
STACK_FILE = re.compile(r"Pulumi\.(?P<stack>[A-Za-z0-9_.-]+)\.yaml")
# What every stack's `pulumi up` deploys: the project file, the program, the images and what runs in them.
FLEET_WIDE = ("Pulumi.yaml", "infra/", "images/", "training/", "requirements.txt", "requirements-")


@dataclass(frozen=True)
class Selection:
    stacks: tuple[str, ...]  # stack files added or changed: plan them on a pull request, `pulumi up` them on merge
    removed: tuple[str, ...]  # stack files deleted: their stacks are destroyed by a person, never by the pipeline
    fleet_wide: tuple[str, ...]  # changed paths every stack deploys: plan all; roll out stack by stack by hand
    refused: tuple[str, ...] = ()  # top-level Pulumi.*.yaml whose name is no Pulumi stack name

    def as_json(self) -> dict:
        return {"stacks": list(self.stacks), "removed": list(self.removed), "fleetWide": list(self.fleet_wide)}


def parse_name_status(text: str) -> list[tuple[str, str]]:
    """`git diff --name-status --no-renames -z` as (status letter, path) pairs."""
    fields = [f for f in text.split("\0") if f]
    return [(fields[i][0], fields[i + 1]) for i in range(0, len(fields) - 1, 2)]


def select(entries: Iterable[tuple[str, str]]) -> Selection:
    """The stacks a diff touches. `entries`: (status, path) with git's letters (A added, M modified, D deleted, T
    type changed; renames given as D + A, `--no-renames`)."""
    stacks, removed, wide, refused = set(), set(), set(), set()
    for status, path in entries:
        match = STACK_FILE.fullmatch(path)
        if match:
            (removed if status == "D" else stacks).add(match["stack"])
        elif path.startswith("Pulumi.") and path.endswith(".yaml") and "/" not in path and path != "Pulumi.yaml":
            refused.add(path)
        elif path.startswith(FLEET_WIDE):
            wide.add(path)
    return Selection(tuple(sorted(stacks - removed)), tuple(sorted(removed - stacks)), tuple(sorted(wide)),
                     tuple(sorted(refused)))


def named(stacks: Iterable[str], root: Path) -> Selection:
    """The manual run's stacks (fleet-deploy.yml's `stacks` input), each refused unless its stack file is here."""
    chosen = tuple(dict.fromkeys(stacks))
    missing = [s for s in chosen if not STACK_FILE.fullmatch(f"Pulumi.{s}.yaml")
               or not (root / f"Pulumi.{s}.yaml").is_file()]
    if missing:
        raise ValueError(f"--stacks: no Pulumi.{missing[0]}.yaml in {root}; stacks here: "
                         f"{', '.join(stack_names(root)) or 'none'}")
    return Selection(chosen, (), ())


def _diff(base: str, head: str, root: Path) -> str:
    result = subprocess.run(["git", "diff", "--name-status", "--no-renames", "-z", base, head, "--"], cwd=root,
                            capture_output=True, text=True)
    if result.returncode != 0:
        why = (result.stderr.strip().splitlines() or ["git failed"])[0]
        raise ValueError(f"--base {base} --head {head}: {why} (fetch both commits: actions/checkout's "
                         "fetch-depth: 0)")
    return result.stdout


def add_parser(commands) -> None:
    verb = commands.add_parser(
        "changed-stacks", help="for CI: the stack files a change adds, changes or removes, and whether it changes "
                               "what every stack deploys (JSON)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verb.add_argument("--base", metavar="REF", help="the commit the change starts from (a pull request's base)")
    verb.add_argument("--head", metavar="REF", default="HEAD", help="the commit it ends at (default: HEAD)")
    verb.add_argument("--stacks", metavar="NAMES", help="instead of a diff: these stacks (space- or comma-separated)")
    verb.add_argument("--github-output", type=Path, metavar="FILE",
                      help="also append stacks=<JSON list>, any=true|false and fleet_wide=true|false to FILE "
                           "(GitHub Actions' $GITHUB_OUTPUT)")
    verb.add_argument("--project-dir", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    verb.set_defaults(run=command)


def command(args: argparse.Namespace) -> int:
    try:
        if args.stacks is not None:
            selection = named(re.split(r"[\s,]+", args.stacks.strip()) if args.stacks.strip() else [],
                              args.project_dir)
        elif args.base:
            selection = select(parse_name_status(_diff(args.base, args.head, args.project_dir)))
            if selection.refused:
                raise ValueError(f"{selection.refused[0]}: not a stack file name (Pulumi.<stack>.yaml, the stack "
                                 "of letters, digits, '-', '_' or '.'); rename it")
        else:
            raise ValueError("give --base REF (a diff's start) or --stacks NAMES")
    except ValueError as err:
        print(f"error: changed-stacks {err}", file=sys.stderr)
        return 2
    print(json.dumps(selection.as_json()))
    if args.github_output:
        with args.github_output.open("a") as out:
            out.write(f"stacks={json.dumps(list(selection.stacks))}\n"
                      f"any={'true' if selection.stacks else 'false'}\n"
                      f"fleet_wide={'true' if selection.fleet_wide else 'false'}\n")
    return 0

