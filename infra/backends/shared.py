"""What both backends share, pure (no Pulumi, no Azure client at import): the job errors, the typed stack outputs
the verbs and the job resources read, the NCCL/InfiniBand environment, the checks every job's inputs pass, the
translation of a data plane's 403/404 into one line, and the helpers of the job verbs."""
from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from infra.core.config.stack import StackConfig
from infra.core.config.schema import IMAGE_OF_LOOP
from infra.core.skus import GpuSku
from training.errors import AccessRefused

T = TypeVar("T")


class JobError(Exception):
    """A job that cannot be built or operated as asked; `str()` is the one line for the user."""


class JobNotFound(Exception):
    """The job does not exist (never submitted, or deleted)."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


@dataclass(frozen=True)
class StackOutputs:
    """The stack's outputs: what infra/stack.py exports and `pulumi stack output --json` gives back. The export
    names are the fields' names in camelCase (`pool_id` -> `poolId`), the public contract of `pulumi stack output`:
    this class is the one place that names them (`exports`, `from_json`)."""

    subscription_id: str = ""
    resource_group_name: str = ""
    vnet_id: str = ""
    compute_subnet_id: str = ""
    storage_subnet_id: str = ""
    storage_account_name: str = ""
    container_urls: Mapping[str, str] = field(default_factory=dict)  # container -> URL (no SAS)
    sas: Any = None  # container -> SAS: a secret output
    registry_login_server: str = ""
    image_refs: Mapping[str, str] = field(default_factory=dict)  # framework -> <registry>/<fw>[:tag]@sha256:...
    pull_identity_id: str = ""  # the nodes' user-assigned identity
    pull_identity_client_id: str = ""
    log_analytics_workspace_id: str = ""
    app_insights_id: str = ""
    backend: str = ""
    training_job_id: str = ""  # the job `pulumi up` launched ("" when none)
    # backend batch
    nfs_kind: str = ""
    nfs_mount_source: str = ""
    batch_account_name: str = ""
    batch_account_endpoint: str = ""
    pool_id: str = ""
    # backend azureml
    aml_workspace_name: str = ""
    aml_compute_name: str = ""
    aml_datastores: Mapping[str, str] = field(default_factory=dict)
    aml_environments: Mapping[str, str] = field(default_factory=dict)  # image name -> environment name:version

    @classmethod
    def from_json(cls, values: Mapping[str, Any]) -> StackOutputs:
        """From `pulumi stack output --json`'s object (names it does not know are left out)."""
        known = {_camel(f.name): f.name for f in fields(cls)}
        return cls(**{known[key]: value for key, value in values.items() if key in known})

    def exports(self, names: tuple[str, ...]) -> dict[str, Any]:
        """The fields `names`, in that order, by their export names (what infra/stack.py exports)."""
        return {_camel(name): getattr(self, name) for name in names}

    @staticmethod
    def require(names: tuple[str, ...], values: Mapping[str, Any]) -> None:
        """Refuse outputs written by an older version of the project: `names` (fields) absent from `values`."""
        missing = [_camel(name) for name in names if _camel(name) not in values]
        if missing:
            raise JobError(f"stack outputs lack {', '.join(missing)}: run `pulumi up` with this version of the project "
                           "(a member file: ask for one written since, `python -m infra member-file`)")


# The member file (`python -m infra member-file`): the stack outputs a team member's verbs read, with no secret
# value, so that members need neither the Pulumi state nor its secrets. What the verbs read is in StackOutputs;
# the one secret output is `sas` (infra/stack.py exports it as a Pulumi secret), and Pulumi shows any other output
# that a secret taints as "[secret]" without --show-secrets: both are left out, and so is any value that holds a
# SAS signature or an account key, whatever its name.
SECRET_OUTPUTS = ("sas",)
MEMBER_STACK_KEY = "memberFileOfStack"  # the stack the file was written for: what the verbs follow without --stack
_SECRETISH = ("sig=", "accountkey=", "sharedaccesskey=", "[secret]")


def member_outputs(stack: str, values: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The member file's object for `stack`, from its outputs (`pulumi stack output --json`), and the output names
    left out (secret, or not read by any verb)."""
    known = {_camel(f.name) for f in fields(StackOutputs)} - {_camel(name) for name in SECRET_OUTPUTS}
    kept: dict[str, Any] = {MEMBER_STACK_KEY: stack}
    left_out = []
    for key, value in values.items():
        text = json.dumps(value).lower()
        if key in known and not any(mark in text for mark in _SECRETISH):
            kept[key] = value
        else:
            left_out.append(key)
    return kept, sorted(left_out)


def read_outputs_file(outputs_file: Path) -> Any:
    """--outputs FILE's JSON (the stack's member file, or the JSON of `pulumi stack output`): read once per verb,
    the CLI passes it along (infra/jobs.py: Stack.outputs_json); JobError (one line) when it is not readable JSON."""
    try:
        return json.loads(outputs_file.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise JobError(f"--outputs {outputs_file}: not readable JSON ({err})") from None


def member_file_stack(values: Any) -> str | None:
    """The stack a member file's JSON was written for (None: the plain JSON of `pulumi stack output`)."""
    return values.get(MEMBER_STACK_KEY) if isinstance(values, dict) else None


def outputs_file_stack(outputs_file: Path | None) -> str | None:
    """The stack a member file was written for (None: no file, or the plain JSON of `pulumi stack output`)."""
    if not outputs_file:
        return None
    try:
        return member_file_stack(read_outputs_file(outputs_file))
    except JobError:
        return None  # load_outputs says why, in one line


def selected_stack(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str:
    """The stack Pulumi has selected in this folder (`pulumi stack --show-name`): what the verbs follow when
    neither --stack nor a member file names one."""
    fix = "pass --stack NAME (the stack whose file is Pulumi.NAME.yaml)"
    try:
        result = run(["pulumi", "stack", "--show-name"], capture_output=True, text=True)
    except FileNotFoundError:
        raise JobError(f"no --stack given, and without the Pulumi CLI there is no selected stack to follow: {fix}, "
                       "or --outputs FILE with the member file of the stack (`python -m infra member-file`)") from None
    name = (result.stdout or "").strip()
    if result.returncode != 0 or not name:
        last = (result.stderr.strip().splitlines() or ["no stack selected"])[-1]
        raise JobError(f"no --stack given, and Pulumi has no stack selected here ({last[:200]}): {fix}, or select "
                       "one with `pulumi stack select NAME`")
    return name


def load_outputs(stack: str, outputs_file: Path | None, required: tuple[str, ...],
                 run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
                 file_flag: str = "--outputs FILE", file_json: Any = None) -> StackOutputs:
    """The deployed stack's outputs (`pulumi stack output --json --show-secrets`, or a file holding that JSON or
    the stack's member file), refused unless they hold the `required` fields. `file_flag`: how the caller's command
    takes that file; `file_json`: the file's JSON where the caller has read it already (read_outputs_file)."""
    if outputs_file:
        values = read_outputs_file(outputs_file) if file_json is None else file_json
        of_stack = member_file_stack(values)
        if of_stack and of_stack != stack:
            raise JobError(f"--outputs {outputs_file} is the member file of stack {of_stack}, not {stack}: pass "
                           f"--stack {of_stack}, or the member file of {stack}")
    else:
        try:
            result = run(["pulumi", "stack", "output", "--json", "--show-secrets", "--stack", stack],
                         capture_output=True, text=True)
        except FileNotFoundError:
            raise JobError(f"the Pulumi CLI is not installed; install it, or pass {file_flag} with the JSON of "
                           f"`pulumi stack output --json --show-secrets --stack {stack}`") from None
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no message"])[-1]
            raise JobError(f"cannot read the outputs of stack {stack!r} ({last}); is it deployed (`pulumi up`)?")
        values = json.loads(result.stdout or "{}")
    StackOutputs.require(required, values)
    return StackOutputs.from_json(values)


# `python -m devtools rehearse` writes, in its folder, where its local Azure is and how to sign in there: the job
# verbs' `--rehearsal` reads it and then reaches the rehearsal exactly as it reaches Azure (the real SDK clients,
# DefaultAzureCredential, TLS). Keys: "pid" (the process serving it), "outputs" (the stack outputs with the local
# Batch and storage endpoints, no SAS), "env" (the managed identity endpoint and its header secret, the deployer's
# client ID, the CA bundle). Mode 0600: the header secret is the rehearsal deployer's credential.
REHEARSAL_FILE = "azure.json"


def rehearsal_endpoints(work: Path, stack: str) -> tuple[StackOutputs, dict[str, str]]:
    """The outputs and the sign-in environment a rehearsal's folder names; JobError (one line) when there is no
    rehearsal there, it is not running, or the file could be read by others."""
    import os
    import stat

    file = work / REHEARSAL_FILE
    try:
        mode = file.stat().st_mode
        values = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError):
        raise JobError(f"no rehearsal in {work}: run `python -m infra rehearse --stack {stack}` (as root) first, or "
                       "name the folder it used: --rehearsal WORK") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise JobError(f"{file}: readable by others ({stat.filemode(mode)}), and it holds the rehearsal's sign-in "
                       f"secret; run `chmod 600 {file}` if you trust who could read it, or rehearse again")
    try:
        os.kill(int(values["pid"]), 0)
    except PermissionError:
        pass  # running, as another user
    except (ProcessLookupError, KeyError, ValueError, TypeError):
        raise JobError(f"the rehearsal in {work} has ended, and its local Azure with it: `python -m devtools rehearse "
                       f"--serve --work {work}` (as root) serves what it left; then run this again") from None
    return StackOutputs.from_json(values["outputs"]), dict(values["env"])


# NCCL and UCX over InfiniBand on the HPC image (ND A100 v4 / H100 v5): relaxed PCI ordering for the
# NICs, the size's topology file (skus.py), and TCP bootstrap on the Ethernet interface.
# The HPC image writes NCCL_IB_PCI_RELAXED_ORDERING=1, NCCL_TOPO_FILE and NCCL_IGNORE_CPU_AFFINITY=1 into the host's
# /etc/nccl.conf (Azure/azhpc-images components/customizations/ndv4.sh, ndv5.sh), which a container does not see (NCCL
# reads its own filesystem's /etc/nccl.conf: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html), so
# the job sets all three here, where every container gets them.
# Which MPI settings take effect: under Azure ML's mpirun, OMPI_MCA_pml/btl and UCX_* do. Under horovodrun (Batch's
# `python -m training launch`), horovodrun passes its own `-mca pml ob1 -mca btl ^openib` (horovod/runner/mpi_run.py
# _OMPI_FLAGS), and mpirun's command line wins over OMPI_MCA_* variables (Open MPI's order of precedence:
# https://docs.open-mpi.org/en/v5.0.x/man-openmpi/man3/MPI_T.3.html), so there MPI runs ob1 over TCP and UCX_* are
# unused: MPI carries only Horovod's coordination, NCCL (the NCCL_* settings, which take effect on both) the gradients.
NCCL_IB_ENV = {
    "NCCL_IB_DISABLE": "0",
    "NCCL_IB_PCI_RELAXED_ORDERING": "1",
    "NCCL_IGNORE_CPU_AFFINITY": "1",
    "UCX_IB_PCI_RELAXED_ORDERING": "on",
    "NCCL_SOCKET_IFNAME": "eth0",
    "UCX_NET_DEVICES": "mlx5_ib0:1",
    "NCCL_DEBUG": "WARN",
    "OMPI_MCA_pml": "ucx",
    "OMPI_MCA_btl": "^openib,smcuda",
}


def training_environment(sku: GpuSku) -> dict[str, str]:
    """The environment every training process gets on either backend: NCCL over InfiniBand where the size has it
    (with its topology file), NCCL without it elsewhere; unbuffered output for the logs."""
    env = {**NCCL_IB_ENV, "NCCL_TOPO_FILE": sku.nccl_topo_file} if sku.infiniband else {
        "NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "WARN"}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass(frozen=True)
class JobShape:
    """What every job's inputs take from the config and the overrides of `infra submit`, checked."""

    framework: str
    image: str  # the framework's image (Batch) or environment (Azure ML) from the stack outputs
    nodes: int
    train_args: tuple[str, ...]


def job_shape(cfg: StackConfig, images: Mapping[str, str], images_are: str, nodes_grow: str,
              framework: str | None = None, nodes: int | None = None,
              train_args: tuple[str, ...] | None = None) -> JobShape:
    """The one mapping from config (and overrides) to what a job runs: `images` (image name -> the backend's
    reference, called `images_are` in the refusal), and the nodes, at most what `nodes_grow` (the pool, the
    cluster) grows to."""
    framework = framework or cfg.training.framework
    image = IMAGE_OF_LOOP[framework]
    if image not in images:
        raise JobError(f"--framework {framework}: the stack has no {image} {images_are} (frameworks: "
                       f"{', '.join(images)}); add it to frameworks and `pulumi up`")
    most = cfg.nodes.max_nodes
    nodes = most if nodes is None else nodes
    if not 1 <= nodes <= most:
        raise JobError(f"--nodes {nodes}: give 1 to {most} (the {nodes_grow} grows to maxNodes={most} at most)")
    return JobShape(framework, images[image], nodes, cfg.training.args if train_args is None else train_args)


def quota_vcpus(cfg: StackConfig) -> str:
    """The core quota the stack's nodes need at maxNodes, as plan says it."""
    most, vcpus = cfg.nodes.max_nodes, cfg.nodes.sku.vcpus
    return f"{most * vcpus} vCPUs ({most} node(s) x {vcpus})"


class ServiceRefused(JobError, AccessRefused):
    """A 403 from Batch or Azure ML: a JobError for the verbs, an AccessRefused for the job resources (which wait
    for a role `up` has just granted instead of failing)."""


def refused_line(err: Exception, service: str, what: str, causes: str) -> JobError | None:
    """One line for a 403 from an Azure data plane (`service` refused `what` because of `causes`), or None."""
    from azure.core.exceptions import HttpResponseError

    from training.data.transfer import FIREWALL_FIX

    if not isinstance(err, HttpResponseError) or err.status_code != 403:
        return None
    code = getattr(getattr(err, "error", None), "code", None) or "Forbidden"
    seen = _seen_address(str(err))
    fix = (f"this machine's address as Azure saw it, {seen}, must be in " + FIREWALL_FIX.split(" must be in ", 1)[1]
           if seen else FIREWALL_FIX)
    return ServiceRefused(f"{service} refused {what} (403 {code}): {causes}; {fix}")


# Some data planes name the caller's address in a firewall's refusal ("Client address: 203.0.113.7", Key Vault's
# ForbiddenByFirewall; "Client IP address ..."): then the line names it instead of asking for a lookup.
_SEEN_ADDRESS = re.compile(r"client (?:ip )?address(?: is)?[:\s'\"]+((?:\d{1,3}\.){3}\d{1,3})\b", re.IGNORECASE)


def _seen_address(message: str) -> str | None:
    found = _SEEN_ADDRESS.search(message)
    return found.group(1) if found else None


def call_translated(call: Callable[[], T], what: str, job: str | None, refused: Callable[[Exception, str], Any]) -> T:
    """`call()`, with a 404 as JobNotFound (when `job` names the job it is about) and a 403 as the one line that
    `refused(err, what)` makes of it; anything else as raised."""
    from azure.core.exceptions import ResourceNotFoundError

    try:
        return call()
    except ResourceNotFoundError:
        if job is None:
            raise
        raise JobNotFound(f"job {job} not found") from None
    except Exception as err:  # noqa: BLE001 - only a 403 is translated
        line = refused(err, what)
        if line is None:
            raise
        raise line from None


def require_staged(outputs: StackOutputs, staged: Callable[[str, str], Any], nfs_report: bool, stack: str,
                   dataset: str | None = None) -> str:
    """Refuse to submit while there is nothing to train on: the `data` container empty or, with `nfs_report`
    (nfsKind vm), the NFS server not reporting it staged as it is now (a job would hold its GPU nodes), or a job on
    the dataset `default` (`dataset` None or "default") when the container holds named datasets alone: every
    node's node-stage (or the trainer, on NFS) would stop on the GPU nodes instead.
    `staged(data_url, status_url)` is infra.backends.staging.data_ready. Returns what is ready, in a line."""
    from infra.backends.staging import not_ready_message

    urls = outputs.container_urls or {}
    if not urls.get("data") or (nfs_report and not urls.get("status")):
        raise JobError("stack outputs lack the `data` or `status` container: run `pulumi up` with this version of "
                       "the project")
    ready = staged(urls["data"], urls["status"] if nfs_report else "")
    if not ready.ready:
        then = (f"submit again once it is (`python -m infra restage --stack {stack}` asks the NFS server to stage "
                "at once; --skip-data-check lets the job wait, holding its nodes)" if nfs_report
                else "submit again once it is (--skip-data-check submits anyway)")
        raise JobError(not_ready_message(ready, then).replace("--stack STACK", f"--stack {stack}"))
    if dataset in (None, "", "default") and not ready.default:
        from infra.backends.staging import no_default_line

        raise JobError(f"no job was submitted, so no GPU node waits: {no_default_line(ready, stack)}")
    return ready.line


_SCOPE_WORDS = {"storageAccount": "the storage account", "resourceGroup": "the resource group"}


def verb_roles_line(service: str, service_grants: list) -> str:
    """plan's "Before `pulumi up`" line on what an identity needs to use the stack after `up`: the roles `up`
    grants the team's members (infra/components/access.py team_grants with the backend's `service_grants`), by
    the names plan gives those grants, so that the two cannot differ."""
    from infra.components.access import team_grants
    from infra.components.roles import ROLE_NAMES

    parts = [f"{ROLE_NAMES.get(g.role, g.role)} on "
             f"{service if g.scope == 'service' else _SCOPE_WORDS.get(g.scope, f'container `{g.scope}`')}"
             for g in team_grants("members", service_grants)]
    return ("To upload, run the job verbs and download after `up`, an Azure AD identity needs what `up` grants the "
            f"team's groups (teamMembers, teamAdmins): {'; '.join(parts)}; without those groups, grant them by hand "
            "(the deployer's own grants below cover `up`'s job launch only).")


def status_line(err: Exception) -> str:
    """An Azure SDK error in one line: its HTTP status (when it has one) and its message's first line."""
    first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
    status = getattr(err, "status_code", None)
    return f"{status}: {first}" if status else first


def job_prefix(stack: str) -> str:
    """How the names of a stack's training jobs start, on both backends (batch/spec.py job_id, azureml/job.py
    job_name build on it): what the verbs and `teams --live` list the stack's jobs by."""
    return f"train-{stack}-"


def resolve_job(service: Any, stack: str, job: str | None, key: str = "id") -> str:
    """The job named, or the stack's newest one (`key`: where its name is in what list_jobs returns: Batch's
    "id", Azure ML's "name")."""
    if job:
        return job
    jobs = service.list_jobs(job_prefix(stack))
    if not jobs:
        raise JobError(f"stack {stack} has no training jobs; start one with `python -m infra submit --stack {stack}`")
    return jobs[0][key]


def submitted_lines(job: str, stack: str, verb_flags: str = "", stack_flags: str = "") -> list[str]:
    """What to run next after a submit, on either backend. `stack_flags`: how the user named the stack (a member's
    `--outputs FILE`, infra/jobs.py: stack_flags), default `--stack STACK`."""
    flags = stack_flags or f"--stack {stack}"
    return [f"  follow:   python -m infra logs {flags} --job {job} --follow{verb_flags}",
            f"  results:  python -m infra download {flags} --job {job}{verb_flags}"]


def now_utc() -> datetime:
    return datetime.now(timezone.utc)
