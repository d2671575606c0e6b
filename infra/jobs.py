"""The job SDK: the job and data verbs as functions over typed inputs (SkyPilot's sky/client/sdk.py). Each loads the
stack's config and outputs, applies the budget guard (monthlyBudgetUsd) and calls the stack's backend with the
verb's inputs (infra/backends/verbs.py). The command line (infra/cli/main.py) parses its flags into these inputs and
prints; the tests and tools call these functions, so argparse never travels below the command line.

    from infra import jobs
    from infra.backends.verbs import Logs, Submit

    dev = jobs.Stack("dev", outputs=Path("member-dev.json"))
    jobs.submit(dev, Submit(framework="keras", nodes=1, args="--epochs 1"))
    jobs.logs(dev, Logs(follow=True))

Errors a user causes are raised, never printed: config_schema.ConfigError (the stack file), JobError and UsageError
(one line each), and the Azure SDK's own (not signed in, refused).
"""
from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra import REPO_ROOT
from infra.backends import RegistersModels, Restages, RunsJobs, backend, spend as spend_query, staging
from infra.backends.azureml.service import AzureMlJobs
from infra.backends.batch.service import AzureBatch
from infra.backends.shared import (JobError, StackOutputs, load_outputs, member_file_stack, outputs_file_stack,
                                   rehearsal_endpoints)
from infra.backends.verbs import (Cancel, Download, JobContext, JobVerb, Logs, RegisterModel, Status, Submit,
                                  verb_name)
from infra.core import budget
from infra.core.config import stack as config
from training.data import datasets, decode_check, layout, sharding, shards, transfer
from training.data.upload import upload as upload_tree
from training.errors import UsageError

# The verbs the budget guard speaks in (monthlyBudgetUsd): submit refuses at or over budget, status shows spend.
BUDGET_VERBS = ("submit", "status")
BUDGET_OUTPUTS = ("subscription_id", "resource_group_name")  # the Cost Management query's scope


@dataclass(frozen=True)
class Stack:
    """Which stack a verb runs on, and where its outputs come from."""
    name: str  # its file is Pulumi.NAME.yaml
    outputs: Path | None = None  # its member file, or the JSON of `pulumi stack output` (default: run that command)
    project_dir: Path = REPO_ROOT  # the folder with Pulumi.yaml and the stack files
    rehearsal: Path | None = None  # its rehearsal's folder (`python -m infra rehearse`): outputs and sign-in there
    # `outputs`' JSON where the CLI has read it already (shared.read_outputs_file), so that a verb reads the file
    # once; None: read it where it is needed.
    outputs_json: Any = field(default=None, compare=False, repr=False)


def stack_flags(stack: Stack) -> str:
    """How the commands a verb prints next name the stack: as the user named it. A member who gave their member
    file gives it again (`--outputs FILE`: it names the stack, and without it the verbs would run `pulumi stack
    output`, which a member cannot); the plain JSON of `pulumi stack output` names no stack, so --stack stays."""
    if stack.outputs is None:
        return f"--stack {stack.name}"
    named = outputs_file_stack(stack.outputs) if stack.outputs_json is None else member_file_stack(stack.outputs_json)
    if named == stack.name:
        return f"--outputs {stack.outputs}"
    return f"--stack {stack.name} --outputs {stack.outputs}"


def as_named(err: JobError, stack: Stack) -> JobError:
    """`err` with each command it suggests (`python -m infra VERB --stack NAME`) naming the stack as the user did
    (stack_flags); its other words, `pulumi up --stack NAME` included, as they are."""
    flags = stack_flags(stack)
    if flags != f"--stack {stack.name}":
        pattern = re.compile(rf"(python -m infra [a-z-]+) --stack {re.escape(stack.name)}\b")
        err.args = (pattern.sub(lambda m: f"{m.group(1)} {flags}", str(err)),)
    return err


def azure_batch(endpoint: str) -> Any:
    return AzureBatch(endpoint)


def azure_ml(outputs: StackOutputs) -> Any:
    return AzureMlJobs(outputs.subscription_id, outputs.resource_group_name, outputs.aml_workspace_name)


def cost_management() -> Any:
    return spend_query.CostManagementSpend()


@dataclass(frozen=True)
class Services:
    """How the verbs reach Azure: `batch(endpoint) -> BatchService`, `aml(outputs) -> AmlJobs`, `spend() ->
    CostManagementSpend`, `staged(data_url, status_url) -> Readiness`. The tests pass their own."""
    batch: Callable[[str], Any] = azure_batch
    aml: Callable[[StackOutputs], Any] = azure_ml
    spend: Callable[[], Any] = cost_management
    staged: Callable[[str, str], Any] = staging.data_ready
    datasets: Callable[[str], list[str]] = lambda data_url: dataset_names(data_url)  # noqa: E731 - defined below

    def connect(self, backend_name: str) -> Callable[[StackOutputs], Any]:
        """How a backend's job service is reached from the stack outputs."""
        return {"batch": lambda outputs: self.batch(outputs.batch_account_endpoint), "azureml": self.aml}[backend_name]


AZURE = Services()


def spend(outputs: StackOutputs, services: Services = AZURE) -> tuple[Any, str | None]:
    """This month's spend on the stack's resource group from Cost Management (infra/backends/spend.py): (Spend,
    None), or (None, why not)."""
    reader = services.spend()
    try:
        return spend_query.read(reader, spend_query.scope(outputs.subscription_id, outputs.resource_group_name))
    finally:
        reader.close()


def dataset_names(data_url: str) -> list[str]:
    """The datasets in the `data` container (training/data/datasets.py), with your Azure AD sign-in."""
    target = transfer.ContainerTarget.parse(data_url, "the stack's `data` container", verb="submit")
    target.check_reachable()
    return datasets.names(target.client(1))


def check_dataset(verb: JobVerb, outputs: StackOutputs, services: Services) -> None:
    """Refuse a submit on a dataset that is not there (before the job service is asked): one line naming those
    that are. The data check (--skip-data-check) skips it too."""
    if not isinstance(verb, Submit) or verb.dataset is None or verb.skip_data_check:
        return
    datasets.check_name(verb.dataset)
    found = services.datasets((outputs.container_urls or {}).get("data", ""))
    if verb.dataset not in found:
        raise UsageError(f"--dataset {verb.dataset}: the stack's `data` container has no such dataset (it has: "
                         f"{', '.join(found) or 'none'}); upload it with `python -m infra upload --dataset "
                         f"{verb.dataset} DIR`")


def run(stack: Stack, verb: JobVerb, services: Services = AZURE) -> None:
    """One job verb on the stack: on Azure (its outputs, your sign-in, the budget guard), or on its rehearsal."""
    if stack.rehearsal is not None:
        return _on_rehearsal(stack, verb, services)
    cfg = config.from_stack_file(stack.name, stack.project_dir)
    chosen: RunsJobs = backend(cfg.backend)
    name = verb_name(verb)
    if name in chosen.refused_verbs:  # before the outputs are read
        raise JobError(chosen.refused_verbs[name])
    if isinstance(verb, Submit):  # wrong whatever Azure says: before the outputs, a sign-in or a request
        verb.check(cfg)
    guarded = name in BUDGET_VERBS and cfg.budget.monthly_usd is not None
    outputs = load_outputs(stack.name, stack.outputs, chosen.required_outputs + (BUDGET_OUTPUTS if guarded else ()),
                           file_json=stack.outputs_json)
    verdict = budget.guard(cfg.budget.monthly_usd, *spend(outputs, services)) if guarded else None
    if verdict and isinstance(verb, Submit):
        if not verdict.allowed:  # before anything reaches the job service
            raise JobError(f"--stack {stack.name}: budget: {verdict.line}")
        print(f"budget: {verdict.line}")
    check_dataset(verb, outputs, services)
    try:
        _call(chosen, JobContext(cfg, outputs, services.connect(chosen.name), services.staged, stack_flags(stack)),
              verb)
    except JobError as err:
        as_named(err, stack)
        raise
    if verdict and isinstance(verb, Status):
        print(f"budget: {verdict.line}")


def _on_rehearsal(stack: Stack, verb: JobVerb, services: Services) -> None:
    """A job verb on the stack's rehearsal by the same path as on Azure: only the outputs and the sign-in come from
    the rehearsal's folder (infra.backends.shared.REHEARSAL_FILE) instead of `pulumi stack output` and your Azure
    sign-in; no budget guard (no Cost Management there)."""
    if isinstance(verb, RegisterModel):
        raise JobError("register-model --rehearsal: rehearsals play the Batch backend only, which has no model "
                       "registry; a rehearsal's model is run/model.onnx in what `download --rehearsal` fetches (on an "
                       "azureml stack, run register-model without --rehearsal after `pulumi up`)")
    cfg = config.from_stack_file(stack.name, stack.project_dir)
    outputs, env = rehearsal_endpoints(stack.rehearsal.resolve(), stack.name)
    os.environ.update(env)  # DefaultAzureCredential signs in at the rehearsal's token endpoint; TLS trusts its CA
    connect = lambda o: services.batch(o.batch_account_endpoint)  # noqa: E731 - the rehearsal plays Batch
    _call(backend(cfg.backend), JobContext(cfg, outputs, connect, services.staged), verb)


def _call(chosen: RunsJobs, ctx: JobContext, verb: JobVerb) -> None:
    """The backend's jobs face for this verb."""
    if isinstance(verb, RegisterModel):
        if not isinstance(chosen, RegistersModels):
            raise JobError(chosen.refused_verbs.get("register-model", f"backend {chosen.name} has no model registry"))
        return chosen.register_model(ctx, verb)
    faces = {Submit: chosen.submit, Status: chosen.status, Logs: chosen.logs, Download: chosen.download,
             Cancel: chosen.cancel}
    return faces[type(verb)](ctx, verb)


def submit(stack: Stack, inputs: Submit = Submit(), services: Services = AZURE) -> None:
    run(stack, inputs, services)


def status(stack: Stack, inputs: Status = Status(), services: Services = AZURE) -> None:
    run(stack, inputs, services)


def logs(stack: Stack, inputs: Logs = Logs(), services: Services = AZURE) -> None:
    run(stack, inputs, services)


def download(stack: Stack, inputs: Download = Download(), services: Services = AZURE) -> None:
    run(stack, inputs, services)


def cancel(stack: Stack, inputs: Cancel = Cancel(), services: Services = AZURE) -> None:
    run(stack, inputs, services)


def register_model(stack: Stack, inputs: RegisterModel = RegisterModel(), services: Services = AZURE) -> None:
    run(stack, inputs, services)


def request_restage(stack: Stack) -> str:
    """Write the restage request the NFS server's staging unit polls for (the deployer cannot reach the server;
    both reach `status`); returns the `status` container's URL, where its reports appear (restage_reports)."""
    cfg = config.from_stack_file(stack.name, stack.project_dir)
    chosen: RunsJobs = backend(cfg.backend)
    refusal = (chosen.restage_refusal(cfg) if isinstance(chosen, Restages)
               else chosen.refused_verbs.get("restage", f"backend {chosen.name} stages no data ahead of its jobs"))
    if refusal:
        raise JobError(f"--stack {stack.name}: restage applies to nfsKind vm (an NFS server that stages `data`); "
                       + refusal)
    outputs = load_outputs(stack.name, stack.outputs, ("container_urls",), file_json=stack.outputs_json)
    status_url = outputs.container_urls["status"]
    staging.request_restage(status_url)
    return status_url


def restage_reports(status_url: str, follow: bool, poll_seconds: float = 10.0,
                    sleep: Callable[[float], None] = time.sleep) -> Iterator[str]:
    """The NFS server's staging report, each time it changes: one line, or only the one there now unless
    `follow`, then until the request is served and the server is no longer staging."""
    seen = None
    while True:
        report = staging.read_report(status_url)
        line = report.line() if report else "no report yet"
        if line != seen:
            yield line
            seen = line
        served = not staging.restage_pending(status_url)
        if not follow or (served and report and report.state != "staging"):
            return
        sleep(poll_seconds)


@dataclass(frozen=True)
class Upload:
    """A dataset folder into the stack's `data` container."""
    dir: Path  # DIR/train/<class>/IMAGE, optionally DIR/val/<class>/IMAGE
    layout_check: bool = True  # refuse another tree (the trainer reads train/<class>/ only)
    workers: int = 16  # parallel transfers
    add: bool = False  # into a dataset that holds other classes already: a job trains on both
    dataset: str = datasets.DEFAULT  # which (training/data/datasets.py: the container's root, or datasets/NAME/)
    replace: bool = False  # the dataset becomes the folder: its blobs the folder lacks are deleted after the upload
    format: str = "auto"  # shards | files | auto (training/data/sharding.py AUTO_RULE: by the folder's size)
    shard_bytes: int = shards.SHARD_BYTES  # with shards: the target size of one


def upload_format(inputs: Upload) -> str:
    """"shards" or "files": what the upload writes (--format; auto by the folder's images and bytes, a sharded
    folder as shards). A tree outside the trainer's layout (--no-layout-check) goes up as files."""
    if shards.is_sharded(inputs.dir):
        if inputs.format == "files":
            raise UsageError(f"DIR {inputs.dir}: a sharded folder goes up as shards; leave --format out")
        return "shards"
    found = layout.of_folder(inputs.dir) if inputs.layout_check or inputs.format == "shards" else None
    if found is None or found.problem():
        if inputs.format == "shards":
            raise UsageError(f"DIR {inputs.dir}: shards need the trainer's layout ({layout.EXPECTED})")
        return sharding.choose(inputs.format, 0, 0) if inputs.format != "auto" else "files"
    return sharding.choose(inputs.format, *sharding.folder_figures(found, inputs.dir))


def check_upload(inputs: Upload) -> layout.Layout | None:
    """Refuse a folder that is missing, or whose layout the trainer cannot read (before the outputs, the sign-in or
    a byte: a wrong tree never leaves here); the folder's layout, or None unchecked."""
    src = inputs.dir
    if not src.is_dir():
        raise UsageError(f"DIR {src}: no such folder; give the dataset's folder (with train/<class>/ in it)")
    if inputs.workers < 1:
        raise UsageError("--workers must be at least 1")
    datasets.check_name(inputs.dataset)
    if inputs.add and upload_format(inputs) == "shards":
        raise UsageError(f"--add: a sharded dataset is one set of shards, not merged; --dataset NAME for a dataset of "
                         f"its own, --replace to make dataset {inputs.dataset} this folder, or --format files")
    if shards.is_sharded(src):
        shards.read_sharded(src)  # its manifest checked before a byte moves
        return layout.of_folder(src)
    if not inputs.layout_check:
        return None
    found = layout.of_folder(src)
    problem = found.problem()
    if problem:
        raise UsageError(f"DIR {src}: {problem}; {layout.EXPECTED}, e.g. {src}/train/cat/1.jpg (another tree: "
                         "--no-layout-check)")
    bad = decode_check.undecodable(src)  # every image decoded here: the trainer would stop on them on the nodes
    if bad:
        raise UsageError(f"DIR {src}: {decode_check.describe(bad)}")
    return found


def data_target(stack: Stack) -> transfer.ContainerTarget:
    """The stack's `data` container, from its outputs, for your Azure AD sign-in."""
    outputs = load_outputs(stack.name, stack.outputs, ("container_urls",), file_json=stack.outputs_json)
    url = (outputs.container_urls or {}).get("data")
    if not url:
        raise JobError("stack outputs lack the `data` container: run `pulumi up` with this version of the project")
    return transfer.ContainerTarget.parse(url, "the stack's `data` container", verb="upload")


def check_destination(inputs: Upload, found: layout.Layout | None, target: transfer.ContainerTarget) -> None:
    """Refuse, before a byte moves, to upload into a dataset that holds classes the folder lacks: a job on it would
    train on both, and its model would name classes the user never gave. Per dataset (training/data/datasets.py):
    another dataset's classes never count. --add merges on purpose, --replace makes the dataset the folder; `found`
    is check_upload's layout of the folder (None: unchecked, another tree, and nothing is checked here either)."""
    if inputs.add or inputs.replace or found is None:
        return
    mine = set(found.images["train"]) or (set(shards.read_sharded(inputs.dir).classes) if found.shards else set())
    target.check_reachable()
    try:
        held = datasets.classes(target.client(inputs.workers), inputs.dataset)
    except Exception as err:  # noqa: BLE001 - a sign-in that may not list (a write-only SAS) checks nothing
        if getattr(err, "status_code", None) != 403:
            raise
        return
    others = sorted(set(held) - mine)
    if others:
        named = ", ".join(others[:5]) + (" ..." if len(others) > 5 else "")
        raise UsageError(
            f"DIR {inputs.dir}: dataset {inputs.dataset} in the stack's `data` container already holds {len(others)} "
            f"class(es) that it lacks ({named}), and a job on it trains on every class there; --dataset NAME for a "
            "dataset of its own (`python -m infra datasets` lists them), --replace to make the dataset this folder, "
            "or --add to train on both")


def upload(inputs: Upload, target: transfer.ContainerTarget) -> tuple[Any, int]:
    """Upload the folder into its dataset (training/data/upload.py: verified, resumable); with --replace, delete
    the dataset's blobs the folder lacks, after the upload (never a dataset half gone); then write the dataset's
    manifest (who, when, content hash). Its transfer stats, and how many blobs --replace deleted. As shards
    (upload_format): training/data/sharding.py, its manifest last; --replace deletes the per-file blobs."""
    if upload_format(inputs) == "shards":
        pushed = sharding.upload_folder(inputs.dir, target, datasets.prefix(inputs.dataset), inputs.dataset,
                                        workers=inputs.workers, shard_bytes=inputs.shard_bytes, replace=inputs.replace)
        return pushed.stats, pushed.removed
    removed = 0
    with transfer.stopping_cleanly("upload"):
        stats = upload_tree(inputs.dir, target, datasets.prefix(inputs.dataset), inputs.workers)
        client = target.client(1)
        if inputs.replace:
            mine = {path.relative_to(inputs.dir).as_posix() for path in inputs.dir.rglob("*") if path.is_file()}
            removed = datasets.remove(client, inputs.dataset, keep=mine | {datasets.MANIFEST})
        described = datasets.describe_files(client, inputs.dataset)
        if described:
            datasets.write_manifest(client, dataclasses.replace(
                described, uploaded_by=datasets.uploader(client), uploaded_at=datasets.now_iso()))
    return stats, removed


def dataset_client(stack: Stack) -> Any:
    """The stack's `data` container, reachable, for the datasets verb."""
    target = data_target(stack)
    target.check_reachable()
    return target.client(4)


def list_datasets(stack: Stack) -> list[datasets.Dataset]:
    client = dataset_client(stack)
    return [found for found in (datasets.describe(client, name) for name in datasets.names(client)) if found]


@dataclass(frozen=True)
class Shard:
    """A per-file dataset of the stack's `data` container, rewritten in place as shards."""
    dataset: str = datasets.DEFAULT
    workers: int = 16  # parallel blob reads and uploads
    shard_bytes: int = shards.SHARD_BYTES
    remove_files: bool = False  # delete its per-file blobs once the shards and the manifest are up


def shard_dataset(stack: Stack, inputs: Shard) -> Any:
    """Convert the dataset (training/data/sharding.py convert: blobs streamed, shards uploaded, manifest last),
    with your Azure AD sign-in; its sharding.Pushed."""
    datasets.check_name(inputs.dataset)
    if inputs.workers < 1:
        raise UsageError("--workers must be at least 1")
    target = data_target(stack)
    target.check_reachable()
    if inputs.dataset not in datasets.names(target.client(1)):
        raise UsageError(f"--dataset {inputs.dataset}: the stack's `data` container has no such dataset (`python -m "
                         "infra datasets` lists them)")
    return sharding.convert(target, inputs.dataset, workers=inputs.workers, shard_bytes=inputs.shard_bytes,
                            remove_files=inputs.remove_files)


def remove_dataset(stack: Stack, name: str) -> int:
    """Delete a dataset's blobs (the blob service keeps them 7 days, restorable: soft delete, docs/security.md).
    Who may: whoever the stack grants deletes in `data` (docs/teams.md: its members and admins, of this stack's
    account only), checked by the storage service on the signed-in identity."""
    datasets.check_name(name)
    client = dataset_client(stack)
    if name not in datasets.names(client):
        raise UsageError(f"--remove {name}: the stack's `data` container has no dataset {name} (`python -m infra "
                         "datasets` lists them)")
    return datasets.remove(client, name)
