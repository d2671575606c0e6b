"""The job and data verbs, over a deployed stack's outputs: submit, status, logs, download, cancel and
register-model (infra/jobs.py: run), upload, datasets, shard and restage; and member-file, which writes the file that
members give them (--outputs FILE). Each parses and prints; infra/jobs.py does the work.
"""
from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
from pathlib import Path

from infra import REPO_ROOT
from training import frameworks

OUTPUTS_HELP = ("the stack's member file (`python -m infra member-file`), or the JSON of `pulumi stack output --json "
                "--show-secrets` (default: run that command)")
MEMBER_STACK_HELP = "stack name (default: the member file's stack, else the one Pulumi has selected)"


def _azure_error_line(err: Exception) -> str | None:
    """One line for an Azure SDK error a user causes (not signed in, no access, refused), or None."""
    try:
        from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
        from azure.identity import CredentialUnavailableError
    except ImportError:
        return None
    from azure.core.exceptions import ServiceRequestError

    from training.data.transfer import PermanentError

    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    if isinstance(err, PermanentError):  # a storage account that cannot be reached or refuses (transfer.classify)
        return first
    if isinstance(err, ServiceRequestError):  # no connection at all, after the client's own retries
        return (f"cannot reach Azure ({first[:200]}): check your network, that the stack is deployed and its "
                "outputs (or member file) are current, and that this machine's public address (`curl -s "
                "https://ifconfig.me`) is in allowedIpRanges in Pulumi.<stack>.yaml (the platform team adds it)")
    if isinstance(err, (CredentialUnavailableError, ClientAuthenticationError)):
        return (f"cannot sign in to Azure ({first[:200]}): run `az login` (or set up a managed identity / "
                "AZURE_CLIENT_ID), then try again")
    if isinstance(err, HttpResponseError):
        return (f"Azure refused the request ({err.status_code}: {first[:200]}); check that you have the stack's "
                "role on its Batch account or workspace (the platform team grants it: teamMembers) and that this "
                "machine's public address (`curl -s https://ifconfig.me`) is in allowedIpRanges in "
                "Pulumi.<stack>.yaml (the platform team adds it and runs `pulumi up`)")
    return None


def _stack(args: argparse.Namespace):
    """The stack a verb's flags name (infra/jobs.py: Stack)."""
    from infra import jobs

    rehearsal = getattr(args, "rehearsal", None)
    if rehearsal is not None:  # --rehearsal alone: the stack's default rehearsal folder
        rehearsal = Path(rehearsal) if rehearsal else REPO_ROOT / ".rehearsal" / args.stack
    return jobs.Stack(args.stack, outputs=getattr(args, "outputs", None), project_dir=args.project_dir,
                      rehearsal=rehearsal, outputs_json=getattr(args, "outputs_json", None))


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
    """A job verb through the SDK (infra/jobs.py); its errors as one line. submit's first line: the data path's
    warning when it feeds the GPUs less than they need (infra/core/data/path.py, as `plan` says it)."""
    from infra import jobs

    def body() -> None:
        if args.command == "submit":
            _data_path_warning(args)
        jobs.run(_stack(args), _verb_inputs(args), services)

    return job_verb_errors(args, lambda args: _one_line_errors(args, body))


def _data_path_warning(args: argparse.Namespace) -> None:
    from infra.core.config import stack as config
    from infra.core.data import path as data_path

    warning = data_path.of_stack(config.from_stack_file(args.stack, args.project_dir)).warning()
    if warning:
        print(warning, flush=True)


def _one_line_errors(args: argparse.Namespace, body) -> int:
    """`body()`, then 0; a stack-file mistake (ConfigError) as one line and 2, a job's or the user's (JobError,
    UsageError) as one line and 1."""
    from infra.backends.shared import JobError
    from infra.core.config.schema import ConfigError
    from training.errors import UsageError

    try:
        body()
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (JobError, UsageError) as err:
        _error(args, err)
        return 1
    return 0


def job_verb_errors(args: argparse.Namespace, verb) -> int:
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

    stack = _stack(args)

    def restage() -> None:
        status_url = jobs.request_restage(stack)
        print(f"asked the NFS server of stack {args.stack} to stage `data` again; its staging unit reads the "
              "request within a minute")
        for line in jobs.restage_reports(status_url, args.follow, args.poll_seconds):
            print(f"  {line}", flush=True)

    code = _one_line_errors(args, restage)
    if code:
        return code
    if not args.follow:
        print(f"  follow it: python -m infra restage {jobs.stack_flags(stack)} --follow (asks again, "
              "harmlessly)")
    return 0


def _member_file(args: argparse.Namespace) -> int:
    """Write the stack's member file: its outputs (`pulumi stack output --json`, without --show-secrets; or
    --outputs FILE) less every secret value, checked to hold what the verbs of its backend read."""
    import json

    from infra.backends import BACKENDS
    from infra.backends.shared import JobError, StackOutputs, member_outputs, read_outputs_file

    out = args.out or Path(f"member-{args.stack}.json")
    try:
        if args.outputs:
            values = args.outputs_json if args.outputs_json is not None else read_outputs_file(args.outputs)
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

    stack = _stack(args)
    inputs = jobs.Upload(args.dir, layout_check=not args.no_layout_check, workers=args.workers, add=args.add,
                         dataset=args.dataset, replace=args.replace, format=args.format,
                         shard_bytes=int(args.shard_mb * 1e6))
    try:
        found = jobs.check_upload(inputs)
        if found is not None:
            print(f"upload: {args.dir}: {found.summary()}", file=sys.stderr)
        target = jobs.data_target(stack)
        jobs.check_destination(inputs, found, target)
        print(f"upload: {args.dir} -> {target.display}, dataset {args.dataset}, as {jobs.upload_format(inputs)} "
              f"(--format {args.format})", file=sys.stderr)
        stats, removed = jobs.upload(inputs, target)
    except (JobError, UsageError) as err:
        _error(args, err)
        return 1
    print(stats.line("upload") + (f"; --replace deleted {removed} blob(s) the folder lacks" if args.replace else ""))
    flags = f" {jobs.stack_flags(stack)}"
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


def _shard(args: argparse.Namespace) -> int:
    """Convert a per-file dataset of the stack's `data` container into shards in place (infra/jobs.py:
    shard_dataset)."""
    from infra import jobs
    from infra.backends.shared import JobError
    from training.errors import UsageError

    inputs = jobs.Shard(args.dataset, workers=args.workers, shard_bytes=int(args.shard_mb * 1e6),
                        remove_files=args.remove_files)
    try:
        pushed = jobs.shard_dataset(_stack(args), inputs)
    except (JobError, UsageError) as err:
        _error(args, err)
        return 1
    made = pushed.dataset
    print(f"shard: dataset {args.dataset}: {len(made.shards['train'])} train and {len(made.shards.get('val', ()))} "
          f"val shards ({made.images()['train']} and {made.images()['val']} images, {made.bytes() / 1e6:.1f} MB), "
          f"{made.content_hash[:19]}; {pushed.stats.skipped} shard(s) already there; {pushed.removed} blob(s) deleted"
          + ("" if args.remove_files else "; its per-file blobs are kept (--remove-files deletes them)"))
    return 0


def add_parsers(commands, services) -> None:
    """member-file, upload, datasets, the job verbs and restage, in the order `--help` lists them; `services`:
    how the job verbs reach Azure (infra/jobs.py: Services)."""
    from infra.backends.staging import RECHECK_MINUTES

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
    upload.add_argument("--stack", help=MEMBER_STACK_HELP)
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
    upload.add_argument("--format", choices=("auto", "shards", "files"), default="auto",
                        help="auto (default): shards when the folder has >= 10,000 images or >= 1 GiB, else a blob "
                             "per image; shards: WebDataset tars of ~128 MB with DALI's index and an MD5 each, which "
                             "the nodes stage onto local NVMe (docs/data.md, Shards); files: a blob per image")
    upload.add_argument("--shard-mb", type=float, default=128.0, help="with shards: target shard size in MB "
                                                                      "(default: 128)")
    upload.add_argument("--project-dir", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    upload.set_defaults(run=lambda a: job_verb_errors(a, _upload))

    data_sets = commands.add_parser(
        "datasets", help="list the datasets in the stack's `data` container (classes, images, size, uploader), or "
                         "remove one",
        description="One line per dataset in the stack's `data` container (docs/data.md, Datasets): its format "
                    "(files, or shards and their count), its classes, "
                    "train and val images, size, who uploaded it last and when, and its content hash (what a "
                    "model trained on it records). --remove NAME deletes its blobs (members and admins may: the "
                    "stack grants them deletes in `data`; restorable for 7 days).")
    data_sets.add_argument("--stack", help=MEMBER_STACK_HELP)
    data_sets.add_argument("--outputs", type=Path, default=None, help=OUTPUTS_HELP)
    data_sets.add_argument("--remove", metavar="NAME", help="delete this dataset's blobs")
    data_sets.add_argument("--project-dir", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    data_sets.set_defaults(run=lambda a: job_verb_errors(a, _datasets))

    shard = commands.add_parser(
        "shard", help="rewrite a per-file dataset of the stack's `data` container as shards, in place",
        description="Stream the dataset's blobs, write them into WebDataset shards (~128 MB, DALI's index and an "
                    "MD5 each), upload those beside them and the dataset's new dataset.json last; jobs then stage "
                    "the shards onto each node's local disk (docs/data.md, Shards). Its per-file blobs are kept "
                    "unless --remove-files. Resumable: a rerun skips the shards already up.",
        epilog="Example: python -m infra shard --outputs member-dev.json --dataset imagenet")
    shard.add_argument("--stack", help=MEMBER_STACK_HELP)
    shard.add_argument("--outputs", type=Path, default=None, help=OUTPUTS_HELP)
    shard.add_argument("--dataset", default="default", metavar="NAME", help="the dataset (default: default)")
    shard.add_argument("--shard-mb", type=float, default=128.0, help="target shard size in MB (default: 128)")
    shard.add_argument("--workers", type=int, default=16, help="parallel blob reads and uploads (default: 16)")
    shard.add_argument("--remove-files", action="store_true",
                       help="delete the dataset's per-file blobs once its shards and manifest are up")
    shard.add_argument("--project-dir", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    shard.set_defaults(run=lambda a: job_verb_errors(a, _shard))

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
        sub.add_argument("--stack", help=MEMBER_STACK_HELP)
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
    restage.add_argument("--stack", help=MEMBER_STACK_HELP)
    restage.add_argument("--outputs", type=Path, default=None, help=OUTPUTS_HELP)
    restage.add_argument("--project-dir", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    restage.add_argument("--follow", action="store_true", help="print the server's reports until it has staged")
    restage.add_argument("--poll-seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    restage.set_defaults(run=lambda a: job_verb_errors(a, _restage))


def follow_stack(args: argparse.Namespace) -> int | None:
    """Check --outputs, read it once (args.outputs_json, which the verb's Stack carries along) and, without
    --stack, name the stack these verbs run on: the member file's, else the one Pulumi has selected. None: go on;
    else the exit status of the one line printed."""
    from infra.backends.shared import JobError, member_file_stack, read_outputs_file, selected_stack

    if getattr(args, "outputs", None) is not None:
        if not args.outputs.is_file():  # before it is taken for no file
            print(f"error: --outputs {args.outputs}: no such file; give the stack's member file (your platform "
                  "engineer writes it with `python -m infra member-file`) or the JSON of `pulumi stack output "
                  "--json`", file=sys.stderr)
            return 2
        try:
            args.outputs_json = read_outputs_file(args.outputs)
        except JobError:
            args.outputs_json = None  # the verb reads it again and says why, in one line
    if hasattr(args, "outputs") and args.stack is None:  # the job and data verbs: follow a member file, or Pulumi
        try:
            args.stack = member_file_stack(getattr(args, "outputs_json", None)) or selected_stack(
                functools.partial(subprocess.run, cwd=args.project_dir))
        except JobError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    return None
