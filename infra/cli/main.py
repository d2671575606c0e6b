"""Deployer-side command line: `python -m infra COMMAND --help`.

The job and data verbs read the stack's outputs with `pulumi stack output --json --show-secrets`, or from
--outputs FILE: the stack's member file (`python -m infra member-file`, written once by the platform engineer: the
outputs the verbs read, no secret in it), so that a team member needs neither the Pulumi state nor its secrets.
Without --stack they follow the member file's stack, else the stack Pulumi has selected (`pulumi stack
--show-name`). They sign in to Azure with Azure AD (DefaultAzureCredential: `az login`, a managed identity...),
never keys.
With --rehearsal, status, logs, download and cancel reach the stack's rehearsal instead, by the same path: its
folder's endpoints file names the local Batch and storage endpoints and the sign-in there (no Azure needed).
"""
from __future__ import annotations

# After the commands in `--help`: argparse lists each command once, with its help line, in the order main() adds them.
EXAMPLES = """Examples:
  python -m infra plan                  # the stack Pulumi has selected (`pulumi stack select dev`)
  python -m infra plan --stack vision   # another team's stack file, e.g. while reviewing its pull request
  python -m infra preflight --stack vision   # before `pulumi up`: can the subscription run it?
  python -m infra leftovers --stack vision   # after `pulumi destroy`: what is left, and how to remove it
  python -m infra new-team speech      # writes Pulumi.speech.yaml from trial, with a free address space
  python -m infra new-team speech --ci   # the same, for the pipeline's deploy identity (docs/ci.md)
  python -m infra member-file --stack dev -o member-dev.json   # once per stack: what members need, no secret
  python -m infra upload --outputs member-dev.json ~/pets     # pets/train/<class>/*.jpg into the stack's data
  python -m infra upload --outputs member-dev.json --dataset pets ~/pets   # a dataset of its own
  python -m infra datasets --outputs member-dev.json   # the datasets: classes, images, size, format, uploader
  python -m infra shard --outputs member-dev.json --dataset pets   # a per-file dataset in data, as shards
  python -m infra teams                 # every stack file: backend, region, nodes, cost, failing checks
  python -m infra teams --live          # and, from Azure: nodes now, jobs running, spend this month
  python -m infra submit --stack dev --framework keras --nodes 1 --args "--epochs 1 --batch-size 128"
  python -m infra submit --outputs member-dev.json     # a member: the member file names the stack
  python -m infra submit --outputs member-dev.json --dataset pets   # trains on that dataset alone
  python -m infra logs --stack dev --follow
  python -m infra restage --stack dev --follow   # after an upload: stage it now, not at the next check
  python -m infra download --stack dev --dest results/
  sudo python -m infra rehearse --stack dev          # then, from another shell while it runs:
  python -m infra logs --stack dev --rehearsal --follow
  python -m infra download --stack dev --rehearsal --dest results/
  sudo python -m devtools rehearse --stack dev --serve   # once it has ended: serve what it left, for the verbs
"""

import argparse
import functools
import os
import subprocess
import sys
import time
from pathlib import Path

from infra import REPO_ROOT


def stack_of_file_name(stack: str) -> str:
    """The stack a --stack value names: `Pulumi.speech.yaml` or `./Pulumi.speech.yaml` is `speech` (Pulumi's stack
    file name for it); anything else is a stack name as given."""
    name = stack[2:] if stack.startswith(("./", ".\\")) else stack
    if name.startswith("Pulumi.") and name.endswith(".yaml") and len(name) > len("Pulumi..yaml"):
        return name[len("Pulumi."):-len(".yaml")]
    return stack


STACK_HELP = ("stack name: reads Pulumi.<STACK>.yaml (default: the stack Pulumi has selected, `pulumi stack "
              "--show-name`)")


def _plan(args: argparse.Namespace) -> int:
    from infra.core.config.schema import ConfigError

    from infra.cli import teams

    started = time.monotonic()
    try:
        stack_config = teams.stack_config(args.stack, args.project_dir)  # refuses overlapping stack files too
    except ConfigError as err:
        print(f"error: Pulumi.{args.stack}.yaml: {err}", file=sys.stderr)
        return 2
    from infra.core.security import deployer_identity

    signed_in = deployer_identity.from_provider_environment(os.environ)  # the pipeline's ARM_*: who runs `up`
    wrong = signed_in and deployer_identity.mismatch(stack_config.deployer_principal_type, *signed_in, args.stack)
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return 2
    for placeholder in stack_config.placeholders:
        print(f"note: {placeholder}", file=sys.stderr)
    from infra.cli import plan
    from infra.preview import offline

    text, secure = plan.render(offline.evaluate(stack_config))
    print(text)
    print(f"\nPlanned in {time.monotonic() - started:.1f} s.")
    if not secure:
        print("error: security checks failed (see FAIL above)", file=sys.stderr)
    return 0 if secure else 1


def _on_selected_stack(run):
    """plan, preflight and leftovers without --stack: the stack Pulumi has selected, as the job verbs follow it
    (infra.backends.shared.selected_stack), asked in the project's folder. The deployer's environment comes first
    (all three evaluate the program offline; without it, infra/__main__.py names the install in one line); no
    Pulumi CLI or no stack selected: one line asking for --stack."""
    def with_stack(args: argparse.Namespace) -> int:
        if args.stack is None:
            import infra.preview.offline  # noqa: F401 - the deployer's environment, before the stack

            from infra.backends.shared import JobError, selected_stack

            try:
                args.stack = selected_stack(functools.partial(subprocess.run, cwd=args.project_dir))
            except JobError as err:  # its alternative of a member file is the job verbs' own: not one of these
                print(f"error: {str(err).split(', or --outputs FILE', 1)[0]}", file=sys.stderr)
                return 2
        return run(args)
    return with_stack


def _new_team(args: argparse.Namespace) -> int:
    from infra.cli.new_team import new_team, new_team_lines
    from infra.core.config.schema import ConfigError

    try:
        result = new_team(args.name, args.template, args.backend, args.project_dir, args.subscription, args.location,
                          args.own_images, ci=args.ci)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(new_team_lines(result, args.template)))
    return 0


def _teams(args: argparse.Namespace, batch_factory=None, aml_factory=None, spend_factory=None) -> int:
    import json

    from infra.cli import teams

    if args.outputs_dir is not None and not args.live:
        print("error: --outputs-dir is read by --live only: add --live, or leave --outputs-dir out", file=sys.stderr)
        return 2
    rows = teams.team_rows(args.project_dir)  # each stack file read once (teams.Fleet)
    if args.live:
        from infra import jobs

        services = _services(batch_factory, None, aml_factory, spend_factory)
        sources = teams.LiveSources(outputs=lambda stack, required: _team_outputs(args, stack, required),
                                    connect={name: services.connect(name) for name in ("batch", "azureml")},
                                    spend=lambda outputs: jobs.spend(outputs, services))
        rows = [{**row, **teams.live(row, sources)} for row in rows]
    print(json.dumps(rows, indent=2) if args.json else
          teams.table(rows) + ("\n\n" + teams.live_table(rows) if args.live else ""))
    passed = all(not row["error"] and not row["failing"] and not row.get("liveError") for row in rows)
    return 0 if passed else 1


def _team_outputs(args: argparse.Namespace, stack: str, required: tuple[str, ...]):
    """A stack's outputs for `teams --live`: DIR/STACK.json with --outputs-dir, else `pulumi stack output` run in
    the project's folder (where its Pulumi.yaml is); those the spend query needs are required too."""
    from infra.backends.shared import JobError, load_outputs
    from infra.jobs import BUDGET_OUTPUTS

    file = None
    if args.outputs_dir is not None:
        file = args.outputs_dir / f"{stack}.json"
        if not file.is_file():
            raise JobError(f"--outputs-dir {args.outputs_dir}: no {stack}.json (the JSON of `pulumi stack output "
                           f"--json --show-secrets --stack {stack}`)")
    return load_outputs(stack, file, required + BUDGET_OUTPUTS,
                        run=functools.partial(subprocess.run, cwd=args.project_dir),
                        file_flag=f"--outputs-dir DIR (DIR/{stack}.json)")


def _services(batch_factory, staged, aml_factory, spend_factory):
    """How the verbs reach Azure (infra/jobs.py: Services), with the tests' own factories where they pass them."""
    from infra import jobs

    defaults = jobs.Services()
    return jobs.Services(batch=batch_factory or defaults.batch, aml=aml_factory or defaults.aml,
                         spend=spend_factory or defaults.spend, staged=staged or defaults.staged)


def _rehearse(argv: list[str]) -> int:
    """`python -m infra rehearse ...` is `python -m devtools rehearse ...`: the rehearsal is a developer's tool,
    which infra does not import (tests/infra/test_layout.py)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    os.execve(sys.executable, [sys.executable, "-m", "devtools", "rehearse", *argv], env)


def main(argv: list[str] | None = None, batch_factory=None, staged=None, aml_factory=None, spend_factory=None,
         preflight_services=None) -> int:
    """`batch_factory(endpoint) -> BatchService`, `staged(data_url, status_url) -> Readiness`,
    `aml_factory(outputs) -> AmlJobs`, `spend_factory() -> CostManagementSpend` and `preflight_services() -> (Arm,
    RetailPrices)` (preflight and leftovers, infra/backends/preflight.py): the tests pass their own;
    everyone else gets Azure Batch, the `data` and `status` containers (infra/backends/staging.py), Azure ML and
    Cost Management."""
    services = _services(batch_factory, staged, aml_factory, spend_factory)
    parser = argparse.ArgumentParser(prog="python -m infra", description=__doc__, epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")
    plan = commands.add_parser(
        "plan", help="show a stack's resources, cost and security verdicts, offline",
        description="Evaluate the Pulumi program for one stack file with Pulumi's mocks (no Azure, no Pulumi CLI) "
                    "and print the resource tree, the hourly cost at min and max nodes and each security check. "
                    "Exit status: 0 all checks pass, 1 a security check fails, 2 the stack config is refused.")
    plan.add_argument("--stack", help=STACK_HELP)
    plan.add_argument("--project-dir", type=Path, default=REPO_ROOT,
                      help="folder with Pulumi.yaml and the stack files (default: this checkout)")
    plan.set_defaults(run=_on_selected_stack(_plan))

    from infra.cli import preflight as preflight_cli

    preflight = commands.add_parser(
        "preflight", help="before `pulumi up`: ask the live subscription whether it can run the stack (providers, "
                          "size, quota, roles, Azure Policy, price), one line per check",
        description=preflight_cli.DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    preflight.add_argument("--stack", help=STACK_HELP)
    preflight.add_argument("--subscription", metavar="ID", help="the subscription `up` deploys to (default: the "
                           "stack file's azure-native:subscriptionId, AZURE_SUBSCRIPTION_ID, else the one your "
                           "sign-in sees)")
    preflight.add_argument("--project-dir", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    preflight.set_defaults(run=_on_selected_stack(lambda a: preflight_cli.command(a, preflight_services)))

    from infra.cli import leftovers as leftovers_cli

    leftovers = commands.add_parser(
        "leftovers", help="after `pulumi destroy`: what of the stack still exists, bills or holds a name, and the "
                          "command that removes it",
        description=leftovers_cli.DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    leftovers.add_argument("--stack", help=STACK_HELP)
    leftovers.add_argument("--subscription", metavar="ID", help="as preflight's --subscription")
    leftovers.add_argument("--project-dir", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    leftovers.set_defaults(run=_on_selected_stack(lambda a: leftovers_cli.command(a, preflight_services)))

    from infra.cli import changed_stacks

    changed_stacks.add_parser(commands)  # for CI (docs/ci.md)
    from infra.cli import ci_roles

    ci_roles.add_parser(commands)
    from infra.cli import images

    images.add_parser(commands)  # the platform's image build (docs/teams.md)

    from infra.cli.teams import JSON_KEYS, LIVE_JSON_KEYS
    from infra.core.backend_facts import BACKENDS
    from infra.core.config.schema import RANGES

    new_team = commands.add_parser(
        "new-team", help="write Pulumi.NAME.yaml for a new team, with an address space no other stack here uses",
        description="Write Pulumi.NAME.yaml from another stack's file (--from, default trial): the team key NAME, an "
                    "addressSpace (and its subnets) from the private ranges that overlaps no other stack file here "
                    "nor any range they reserve, those listed in reservedAddressSpaces; print the next steps. "
                    "Refuses a name the team key refuses, or an existing file (nothing written). Says whether the "
                    "(subscription, region) group it joins is over a default quota (--subscription, --location: "
                    "another group). Gives the new team the fleet's shared images (the sharedImages the stacks here use "
                    "most, for the images it runs; --own-images: build them at `up`). Exit status: 0 written, 2 "
                    "refused.")
    new_team.add_argument("name", metavar="NAME", help=f"the team's name, also its stack's: {RANGES['team']} lowercase "
                                                       "letters or digits, starting with a letter")
    # trial: one T4 node and Azure Files, the cheap start (dev is two 8x A100 nodes and an NFS VM).
    new_team.add_argument("--from", dest="template", default="trial", metavar="STACK",
                          help="the stack file to start from (default: trial, one small GPU node)")
    new_team.add_argument("--backend", choices=BACKENDS, help="default: the --from stack's backend")
    new_team.add_argument("--subscription", metavar="ID", help="the subscription the stack deploys to (writes "
                          "azure-native:subscriptionId; default: the --from stack's); docs/teams.md, layouts")
    new_team.add_argument("--location", metavar="REGION", help="the Azure region (default: the --from stack's)")
    new_team.add_argument("--own-images", action="store_true", help="build the training images at `up` instead of "
                          "importing the fleet's shared images (default: the sharedImages the stacks here use most; "
                          "docs/teams.md)")
    new_team.add_argument("--ci", action="store_true", help="the pipeline deploys it (docs/ci.md): writes "
                          "deployerPrincipalType: ServicePrincipal, for the deploy identity's role assignments, and "
                          "gives the pipeline's next steps")
    new_team.add_argument("--project-dir", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    new_team.set_defaults(run=_new_team)

    teams = commands.add_parser(
        "teams", help="every stack file at a glance: backend, region, GPU size, nodes, cost, budget, failing checks; "
                      "offline",
        description="One row per stack file (Pulumi.*.yaml), each evaluated offline as `plan` evaluates it:\n"
                    "backend, region, GPU size, min-max nodes, estimated USD per hour at min and max nodes and a\n"
                    "month at min nodes, the monthly budget, and the security checks and service rules that fail;\n"
                    "then the fleet's totals (idle a month, an hour at full size, the budgets' sum, GPUs at maxNodes\n"
                    "per (subscription, region) and per family) and each (subscription, region) group over the\n"
                    "default Batch account or GPU vCPU quota (docs/teams.md).\n"
                    "With --live (needs Azure), a second table: each deployed stack's GPU nodes now, its training\n"
                    "jobs running and this month's spend (against monthlyBudgetUsd), read with your Azure AD\n"
                    "sign-in from its outputs (`pulumi stack output`, or --outputs-dir); a stack that cannot be\n"
                    "read says why in one line and the others are still read.\n"
                    "Exit status: 0 every stack passes (and, with --live, every stack was read), 1 a stack is\n"
                    "refused or fails a check, or a live read failed.",
        epilog="--json prints a list, one object per stack file, with these keys:\n" + "\n".join(
            f"  {key}: {meaning}" for key, meaning in JSON_KEYS.items()) + "\nand with --live also:\n" + "\n".join(
            f"  {key}: {meaning}" for key, meaning in LIVE_JSON_KEYS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    teams.add_argument("--json", action="store_true", help="JSON for scripts (keys below)")
    teams.add_argument("--live", action="store_true",
                       help="also read each deployed stack from Azure: nodes now, jobs running, spend this month")
    teams.add_argument("--outputs-dir", type=Path, default=None, metavar="DIR",
                       help="with --live: DIR/STACK.json holds each stack's `pulumi stack output --json "
                            "--show-secrets` (default: run that command per stack)")
    teams.add_argument("--project-dir", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    teams.set_defaults(run=lambda a: _teams(a, batch_factory, aml_factory, spend_factory))

    from infra.cli import job_verbs

    job_verbs.add_parsers(commands, services)

    rehearse = commands.add_parser(
        "rehearse", add_help=False, help="run the stack's own job here as Azure would: Azurite as its storage, "
                                         "local nodes with their own IPs and SSH as its Batch pool (needs root)")
    rehearse.set_defaults(run=lambda a: _rehearse([]))

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["rehearse"]:  # its own parser (devtools/rehearsal/run.py) reads the rest
        return _rehearse(argv[1:])
    args = parser.parse_args(argv)
    if getattr(args, "stack", None):  # --stack Pulumi.speech.yaml (the file, as tab completion gives it): speech
        args.stack = stack_of_file_name(args.stack)
    refused = job_verbs.follow_stack(args)
    if refused is not None:
        return refused
    # Every verb: what a user causes (not signed in, refused, an account that cannot be reached) is one line.
    try:
        return job_verbs.job_verb_errors(args, args.run)
    except FileNotFoundError as err:
        if not str(err.filename or "").endswith("Pulumi.yaml"):
            raise
        print(f"error: no Pulumi.yaml in {Path(err.filename).parent}: run this from the project's folder (the checkout "
              "that holds Pulumi.yaml and the stack files)", file=sys.stderr)
        return 2

