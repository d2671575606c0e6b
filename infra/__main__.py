"""Deployer-side command line: `python -m infra COMMAND --help`.

Commands:
  plan    what a stack would deploy, its cost per hour and its security verdicts, offline (no Azure access)

Examples:
  python -m infra plan                  # the dev stack (Pulumi.dev.yaml)
  python -m infra plan --stack vision   # another team's stack file, e.g. while reviewing its pull request
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _plan(args: argparse.Namespace) -> int:
    from infra import config

    started = time.monotonic()
    try:
        stack_config = config.from_stack_file(args.stack, args.project_dir)
    except config.ConfigError as err:
        print(f"error: Pulumi.{args.stack}.yaml: {err}", file=sys.stderr)
        return 2
    from infra import offline, plan

    text, secure = plan.render(offline.evaluate(stack_config))
    print(text)
    print(f"\nPlanned in {time.monotonic() - started:.1f} s.")
    if not secure:
        print("error: security checks failed (see FAIL above)", file=sys.stderr)
    return 0 if secure else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    plan = commands.add_parser(
        "plan", help="show a stack's resources, cost and security verdicts, offline",
        description="Evaluate the Pulumi program for one stack file with Pulumi's mocks (no Azure, no Pulumi CLI) "
                    "and print the resource tree, the hourly cost at min and max nodes and each security check. "
                    "Exit status: 0 all checks pass, 1 a security check fails, 2 the stack config is refused.")
    plan.add_argument("--stack", default="dev", help="stack name: reads Pulumi.<STACK>.yaml (default: dev)")
    plan.add_argument("--project-dir", type=Path, default=REPO_ROOT,
                      help="folder with Pulumi.yaml and the stack files (default: this checkout)")
    plan.set_defaults(run=_plan)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
