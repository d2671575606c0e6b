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
  python -m infra member-file --stack dev -o member-dev.json   # once per stack: what members need, no secret
  python -m infra upload --outputs member-dev.json ~/pets     # pets/train/<class>/*.jpg into the stack's data
  python -m infra upload --outputs member-dev.json --dataset pets ~/pets   # a dataset of its own
  python -m infra datasets --outputs member-dev.json   # the datasets: classes, images, size, uploader
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
from training import frameworks


def stack_of_file_name(stack: str) -> str:
    """The stack a --stack value names: `Pulumi.speech.yaml` or `./Pulumi.speech.yaml` is `speech` (Pulumi's stack
    file name for it); anything else is a stack name as given."""
    name = stack[2:] if stack.startswith(("./", ".\\")) else stack
    if name.startswith("Pulumi.") and name.endswith(".yaml") and len(name) > len("Pulumi..yaml"):
        return name[len("Pulumi."):-len(".yaml")]
    return stack


STACK_HELP = ("stack name: reads Pulumi.<STACK>.yaml (default: the stack Pulumi has selected, `pulumi stack "
              "--show-name`)")
OUTPUTS_HELP = ("the stack's member file (`python -m infra member-file`), or the JSON of `pulumi stack output --json "
                "--show-secrets` (default: run that command)")


def _plan(args: argparse.Namespace) -> int:
    from infra.core.config_schema import ConfigError

    from infra.cli import teams

    started = time.monotonic()
    try:
        stack_config = teams.stack_config(args.stack, args.project_dir)  # refuses overlapping stack files too
    except ConfigError as err:
        print(f"error: Pulumi.{args.stack}.yaml: {err}", file=sys.stderr)
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
    from infra.cli import teams
    from infra.core.config_schema import ConfigError

    try:
        result = teams.new_team(args.name, args.template, args.backend, args.project_dir, args.subscription,
                                args.location, args.own_images)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(teams.new_team_lines(result, args.template)))
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
    import functools
    import subprocess

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


def _azure_error_line(err: Exception) -> str | None:
    """One line for an Azure SDK error a user causes (not signed in, no access, refused), or None."""
    try:
        from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
        from azure.identity import CredentialUnavailableError
    except ImportError:
        return None
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    if isinstance(err, (CredentialUnavailableError, ClientAuthenticationError)):
        return (f"cannot sign in to Azure ({first[:200]}): run `az login` (or set up a managed identity / "
                "AZURE_CLIENT_ID), then try again")
    if isinstance(err, HttpResponseError):
        return (f"Azure refused the request ({err.status_code}: {first[:200]}); check that you have the stack's "
                "role on its Batch account or workspace (the platform team grants it: teamMembers) and that this "
                "machine's public address (`curl -s https://ifconfig.me`) is in allowedIpRanges in "
                "Pulumi.<stack>.yaml (the platform team adds it and runs `pulumi up`)")
    return None


def _services(batch_factory, staged, aml_factory, spend_factory):
    """How the verbs reach Azure (infra/jobs.py: Services), with the tests' own factories where they pass them."""
    from infra import jobs

    defaults = jobs.Services()
    return jobs.Services(batch=batch_factory or defaults.batch, aml=aml_factory or defaults.aml,
                         spend=spend_factory or defaults.spend, staged=staged or defaults.staged)


def _stack(args: argparse.Namespace):
    """The stack a verb's flags name (infra/jobs.py: Stack)."""
    from infra import jobs

    rehearsal = getattr(args, "rehearsal", None)
    if rehearsal is not None:  # --rehearsal alone: the stack's default rehearsal folder
        rehearsal = Path(rehearsal) if rehearsal else REPO_ROOT / ".rehearsal" / args.stack
    return jobs.Stack(args.stack, outputs=getattr(args, "outputs", None), project_dir=args.project_dir,
                      rehearsal=rehearsal)


def _verb_inputs(args: argparse.Namespace):
    """A job verb's flags as its typed inputs (infra/backends/verbs.py)."""
    from infra.backends import verbs

    if args.command == "submit":
        return verbs.Submit(framework=args.framework, nodes=args.nodes, args=args.args,
                            skip_data_check=args.skip_data_check, dataset=args.dataset)
    if args.command == "status":
        return verbs.Status(job=args.job)
    if args.command == "logs":
        return verbs.Logs(job=args.job, follow=args.follow, stderr=args.stderr)
    if args.command == "download":
        return verbs.Download(job=args.job, dest=args.dest)
    if args.command == "cancel":
        return verbs.Cancel(job=args.job)
    return verbs.RegisterModel(job=args.job, dest=args.dest, name=args.name)


def _job_verb(args: argparse.Namespace, services) -> int:
    """A job verb through the SDK (infra/jobs.py); its errors as one line."""
    from infra import jobs
    from infra.backends.shared import JobError
    from infra.core.config_schema import ConfigError
    from training.errors import UsageError

    def verb(args: argparse.Namespace) -> int:
        try:
            jobs.run(_stack(args), _verb_inputs(args), services)
        except ConfigError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        except (JobError, UsageError) as err:
            _error(args, err)
            return 1
        return 0

    return _job_verb_errors(args, verb)


def _job_verb_errors(args: argparse.Namespace, verb) -> int:
    """Azure SDK errors a user causes (not signed in, no access) as one line."""
    try:
        return verb(args)
    except Exception as err:  # noqa: BLE001 - Azure SDK errors become one line; anything else stays a bug
        line = _azure_error_line(err)
        if line is None:
            raise
        from training.data.transfer import redact

        _error(args, redact(line))
        return 1


def _error(args: argparse.Namespace, line: object) -> None:
    """A verb's one error line, the stack's own file named where a fix says Pulumi.<stack>.yaml."""
    stack = getattr(args, "stack", None)
    text = str(line)
    print(f"error: {text.replace('Pulumi.<stack>.yaml', f'Pulumi.{stack}.yaml') if stack else text}", file=sys.stderr)


def _restage(args: argparse.Namespace) -> int:
    """Ask the NFS server to stage `data` again (infra/jobs.py: request_restage), then print its reports: the one
    there now, or with --follow each until it has served the request."""
    from infra import jobs
    from infra.backends.shared import JobError
    from infra.core.config_schema import ConfigError
    from training.errors import UsageError

    try:
        status_url = jobs.request_restage(_stack(args))
        print(f"asked the NFS server of stack {args.stack} to stage `data` again; its staging unit reads the "
              "request within a minute")
        for line in jobs.restage_reports(status_url, args.follow, args.poll_seconds):
            print(f"  {line}", flush=True)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (JobError, UsageError) as err:
        _error(args, err)
        return 1
    if not args.follow:
        print(f"  follow it: python -m infra restage {jobs.stack_flags(_stack(args))} --follow (asks again, "
              "harmlessly)")
    return 0


def _member_file(args: argparse.Namespace) -> int:
    """Write the stack's member file: its outputs (`pulumi stack output --json`, without --show-secrets; or
    --outputs FILE) less every secret value, checked to hold what the verbs of its backend read."""
    import json
    import subprocess

    from infra.backends import BACKENDS
    from infra.backends.shared import JobError, StackOutputs, member_outputs

    out = args.out or Path(f"member-{args.stack}.json")
    try:
        if args.outputs:
            try:
                values = json.loads(args.outputs.read_text())
            except (OSError, json.JSONDecodeError) as err:
                raise JobError(f"--outputs {args.outputs}: not readable JSON ({err})") from None
        else:
            try:
                result = subprocess.run(["pulumi", "stack", "output", "--json", "--stack", args.stack],
                                        capture_output=True, text=True, cwd=args.project_dir)
            except FileNotFoundError:
                raise JobError("the Pulumi CLI is not installed: member-file reads the stack's outputs with `pulumi "
                               "stack output --json`; run it where the stack is deployed from, or pass --outputs FILE "
                               "with that JSON") from None
            if result.returncode != 0:
                last = (result.stderr.strip().splitlines() or ["no message"])[-1]
                raise JobError(f"cannot read the outputs of stack {args.stack!r} ({last}); is it deployed "
                               "(`pulumi up`)?")
            values = json.loads(result.stdout or "{}")
        if not isinstance(values, dict):
            raise JobError("the stack outputs are not a JSON object (`pulumi stack output --json`)")
        kept, left_out = member_outputs(args.stack, values)
        chosen = BACKENDS.get(str(kept.get("backend", "")))
        if chosen is None:
            raise JobError(f"stack {args.stack}'s outputs name no backend (backend: {kept.get('backend')!r}): run "
                           "`pulumi up` with this version of the project")
        StackOutputs.require(chosen.required_outputs + ("container_urls",), kept)
    except JobError as err:
        _error(args, err)
        return 1
    part = out.with_name(out.name + ".part")  # never a half-written member file under its name
    part.write_text(json.dumps(kept, indent=2, sort_keys=True) + "\n")
    os.replace(part, out)
    print(f"wrote {out}: stack {args.stack}'s outputs that the job and data verbs read ({len(kept) - 1} keys); no "
          f"secret in it (left out: {', '.join(left_out) or 'nothing'})")
    print(f"  give it to the team's members; they run, from a checkout of this project (no Pulumi needed):\n"
          f"  python -m infra upload --outputs {out.name} DIR   # DIR/train/<class>/*.jpg\n"
          f"  python -m infra submit --outputs {out.name}\n"
          f"  python -m infra logs --outputs {out.name} --follow")
    return 0


def _upload(args: argparse.Namespace) -> int:
    """Check DIR's layout (unless --no-layout-check), then upload it into the stack's `data` container with your
    Azure AD sign-in (infra/jobs.py: check_upload, data_target, upload)."""
    from infra import jobs
    from infra.backends.shared import JobError
    from training.errors import UsageError

    inputs = jobs.Upload(args.dir, layout_check=not args.no_layout_check, workers=args.workers, add=args.add,
                         dataset=args.dataset, replace=args.replace)
    try:
        found = jobs.check_upload(inputs)
        if found is not None:
            print(f"upload: {args.dir}: {found.summary()}", file=sys.stderr)
        target = jobs.data_target(_stack(args))
        jobs.check_destination(inputs, found, target)
        print(f"upload: {args.dir} -> {target.display}, dataset {args.dataset}", file=sys.stderr)
        stats, removed = jobs.upload(inputs, target)
    except (JobError, UsageError) as err:
        _error(args, err)
        return 1
    print(stats.line("upload") + (f"; --replace deleted {removed} blob(s) the folder lacks" if args.replace else ""))
    flags = f" {jobs.stack_flags(_stack(args))}"
    dataset = "" if args.dataset == "default" else f" --dataset {args.dataset}"
    print(f"  next: python -m infra submit{flags}{dataset}   (it refuses until the data is staged; nfsKind vm: `python -m "
          f"infra restage{flags} --follow` stages it now)")
    return 0


def _datasets(args: argparse.Namespace) -> int:
    """List the datasets in the stack's `data` container, or remove one (infra/jobs.py: list_datasets,
    remove_dataset)."""
    from infra import jobs
    from infra.backends.shared import JobError
    from training.errors import UsageError

    try:
        if args.remove:
            removed = jobs.remove_dataset(_stack(args), args.remove)
            print(f"removed dataset {args.remove}: {removed} blob(s) deleted (restorable for 7 days: blob soft "
                  "delete); the NFS server's next staging removes its staged copy")
            return 0
        found = jobs.list_datasets(_stack(args))
    except (JobError, UsageError) as err:
        _error(args, err)
        return 1
    print("\n".join(item.line() for item in found) if found else
          f"no datasets in stack {args.stack}'s `data` container: python -m infra upload --dataset NAME DIR")
    return 0


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
    from infra.backends.staging import RECHECK_MINUTES

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
    from infra.core.config_schema import RANGES

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

    member = commands.add_parser(
        "member-file", help="write the stack's member file: the outputs the job and data verbs read, no secret",
        description="Platform engineer, once per stack (and after a `pulumi up` that changes its outputs): write "
                    "the stack's outputs that the job and data verbs read, without any secret value (no SAS, no key, "
                    "no password; `pulumi stack output --json`, never --show-secrets), for the team's members: "
                    "with it (`--outputs FILE`) they upload, submit, follow and download with their own Azure AD "
                    "sign-in and the roles the stack grants teamMembers, without the Pulumi state or its secrets.")
    member.add_argument("--stack", help="stack name (default: the stack Pulumi has selected)")
    member.add_argument("-o", "--out", type=Path, default=None, help="file to write (default: member-STACK.json)")
    member.add_argument("--outputs", type=Path, default=None,
                        help="the JSON of `pulumi stack output --json` instead of running it")
    member.add_argument("--project-dir", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    member.set_defaults(run=_member_file)

    upload = commands.add_parser(
        "upload", help="check a dataset folder's layout, then upload it into the stack's `data` container",
        description="Upload DIR into the stack's `data` container (its URL from the stack's outputs or member file) "
                    "with your Azure AD sign-in (`az login`; the stack grants its teamMembers writes to `data`), "
                    "verified and resumable (a rerun skips what is there). Before anything moves, DIR's layout is "
                    "checked against what the trainer reads: DIR/train/<class>/IMAGE (.jpg, .jpeg, .png, any case), "
                    "optionally DIR/val/<class>/IMAGE with classes of train/; a flat or empty folder is refused.",
        epilog="Example: python -m infra upload --outputs member-dev.json ~/pets   # pets/train/cat/1.jpg ...")
    upload.add_argument("dir", type=Path, metavar="DIR", help="the dataset's folder")
    upload.add_argument("--stack", help="stack name (default: the member file's stack, else the one Pulumi has "
                                        "selected)")
    upload.add_argument("--outputs", type=Path, default=None, help=OUTPUTS_HELP)
    upload.add_argument("--no-layout-check", action="store_true",
                        help="upload another tree as it is (the trainer reads train/<class>/ only)")
    upload.add_argument("--add", action="store_true",
                        help="upload into a `data` container that holds other classes already: a job trains on "
                             "both (without it, such an upload is refused before a byte moves)")
    upload.add_argument("--workers", type=int, default=16, help="parallel transfers (default: 16)")
    upload.add_argument("--dataset", default="default", metavar="NAME",
                        help="the dataset to upload into (default: default, the container's root, which stacks "
                             "held before names); `submit --dataset NAME` trains on it alone")
    upload.add_argument("--replace", action="store_true",
                        help="make the dataset this folder: after the upload, delete its blobs the folder lacks")
    upload.add_argument("--project-dir", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    upload.set_defaults(run=lambda a: _job_verb_errors(a, _upload))

    data_sets = commands.add_parser(
        "datasets", help="list the datasets in the stack's `data` container (classes, images, size, uploader), or "
                         "remove one",
        description="One line per dataset in the stack's `data` container (docs/data.md, Datasets): its classes, "
                    "train and val images, size, who uploaded it last and when, and its content hash (what a "
                    "model trained on it records). --remove NAME deletes its blobs (members and admins may: the "
                    "stack grants them deletes in `data`; restorable for 7 days).")
    data_sets.add_argument("--stack", help="stack name (default: the member file's stack, else the one Pulumi has "
                                           "selected)")
    data_sets.add_argument("--outputs", type=Path, default=None, help=OUTPUTS_HELP)
    data_sets.add_argument("--remove", metavar="NAME", help="delete this dataset's blobs")
    data_sets.add_argument("--project-dir", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    data_sets.set_defaults(run=lambda a: _job_verb_errors(a, _datasets))

    verbs = {
        "submit": "start a training job on the stack's GPU pool (defaults from the stack config); with "
                  "monthlyBudgetUsd, refused once this month's spend reaches it",
        "status": "show a job's state, exit code and retries; with monthlyBudgetUsd, this month's spend against it",
        "logs": "print a job's stdout (or --stderr); --follow streams it until the task ends",
        "download": "fetch a job's logs and run folder (metrics, summary, TensorBoard, model) from `outputs`",
        "cancel": "stop a job's task; outputs written so far stay",
        "register-model": "backend azureml: register a finished job's model.onnx as a model version in the "
                          "workspace, with its metrics as tags",
    }
    for verb, help_text in verbs.items():
        sub = commands.add_parser(verb, help=help_text, description=help_text)
        sub.add_argument("--stack", help="stack name (default: the member file's stack, else the one Pulumi has "
                                          "selected)")
        sub.add_argument("--outputs", type=Path, default=None, help=OUTPUTS_HELP)
        sub.add_argument("--project-dir", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
        if verb == "submit":
            sub.add_argument("--framework", choices=frameworks.names(),
                             help="default: the stack's trainingFramework")
            sub.add_argument("--nodes", type=int, help="nodes for this job (default: maxNodes)")
            sub.add_argument("--dataset", metavar="NAME", help="train on this dataset of `data` alone (`python -m "
                                                               "infra datasets` lists them; default: default)")
            sub.add_argument("--args", help="train flags instead of the stack's trainingArgs, e.g. "
                                            "--args=\"--epochs 1\" (write --args=... when they start with --)")
            sub.add_argument("--skip-data-check", action="store_true",
                             help="submit even if `data` is empty or the NFS server has not reported it staged "
                                  "as it is now (the job then waits for the staging, up to "
                                  "trainingDataWaitMinutes, holding its nodes)")
        else:
            sub.add_argument("--job", help="job ID (default: the stack's newest job)")
            sub.add_argument("--rehearsal", nargs="?", const="", metavar="WORK",
                             help="the stack's rehearsal (`python -m infra rehearse`) instead of Azure: its folder, "
                                  "default .rehearsal/STACK")
        if verb == "logs":
            sub.add_argument("--follow", action="store_true", help="keep printing until the task ends")
            sub.add_argument("--stderr", action="store_true", help="stderr.txt instead of stdout.txt")
        if verb == "register-model":
            sub.add_argument("--name", help="model name (default: resnet50-STACK)")
        if verb in ("download", "register-model"):
            sub.add_argument("--dest", type=Path, default=Path("results"), help="folder to write into (default: "
                                                                                "results/); files land in DEST/JOB")
        sub.set_defaults(run=lambda a: _job_verb(a, services))

    restage = commands.add_parser(
        "restage", help="(nfsKind vm) ask the NFS server to stage `data` again now; --follow shows its reports",
        description="Write a restage request into the stack's `status` container. The NFS server's staging unit "
                    f"checks for it every minute (and lists `data` for changes every {RECHECK_MINUTES} minutes by "
                    "itself), stages what changed, and reports; with --follow this prints each report until the "
                    "request is served.")
    restage.add_argument("--stack", help="stack name (default: the member file's stack, else the one Pulumi has "
                                         "selected)")
    restage.add_argument("--outputs", type=Path, default=None, help=OUTPUTS_HELP)
    restage.add_argument("--project-dir", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    restage.add_argument("--follow", action="store_true", help="print the server's reports until it has staged")
    restage.add_argument("--poll-seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    restage.set_defaults(run=lambda a: _job_verb_errors(a, _restage))

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
    if getattr(args, "outputs", None) is not None and not args.outputs.is_file():  # before it is taken for no file
        print(f"error: --outputs {args.outputs}: no such file; give the stack's member file (your platform engineer "
              "writes it with `python -m infra member-file`) or the JSON of `pulumi stack output --json`",
              file=sys.stderr)
        return 2
    if hasattr(args, "outputs") and args.stack is None:  # the job and data verbs: follow a member file, or Pulumi
        from infra.backends.shared import JobError, outputs_file_stack, selected_stack

        try:
            args.stack = outputs_file_stack(getattr(args, "outputs", None)) or selected_stack(
                functools.partial(subprocess.run, cwd=args.project_dir))
        except JobError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    return args.run(args)

