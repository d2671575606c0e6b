"""The backends, peers behind one protocol: `backend(name)` is how the program, `plan`, the cost estimate and the
job verbs reach the stack's backend (its `backend` key), instead of branching on the name (SkyPilot's
sky/backends/backend.py: the CLI never branches on the backend it drives; torchtitan's protocols/train_spec.py: one
registry, one lookup by name).

  batch/     the reference architecture: NFS server, Batch account and InfiniBand GPU pool, a multi-instance task
  azureml/   its successor: an Azure ML workspace, compute cluster and command job
  shared.py  what both use: job errors, the typed stack outputs, the NCCL environment, the job inputs' checks
  job_resource.py, staging.py  what both job resources use: launch once the data is ready, never replace a running job

A backend module imports Pulumi and Azure clients only inside its methods, so that importing the registry (and a
backend's pure job spec) stays light.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from infra.backends.shared import StackOutputs
    from infra.backends.verbs import Cancel, Download, JobContext, Logs, RegisterModel, Status, Submit
    from infra.components.access import TeamGrant
    from infra.core.config import StackConfig


class Environment(Protocol):
    """What a backend's `declare` finds of the stack built before it (infra/stack.py's Environment, a Pulumi
    ComponentResource its components are children of). A backend adds its own components to it (nfs, cluster,
    azureml, job), which `service_id` and `budget_stop` read back."""
    now: Any  # the clock for SAS and token expiry
    network: Any
    storage: Any
    registry: Any
    monitoring: Any
    node_identity: Any  # the GPU nodes' managed identity
    node_grants: list  # its blob roles
    deployer: Any  # whoever runs `pulumi up`
    deployer_grants: list  # the deployer's data-plane roles, a backend appends its own
    job: Any  # the training job resource, where `up` launches one


@runtime_checkable
class Backend(Protocol):
    name: str  # the stack's `backend` key
    required_outputs: tuple[str, ...]  # the StackOutputs fields its job verbs read
    live_outputs: tuple[str, ...]  # the StackOutputs fields `teams --live` reads (usage_now, and to connect)
    refused_verbs: dict[str, str]  # job verbs it does not have -> the line saying so

    def declare(self, env: Environment, name: str, cfg: StackConfig, rg: Any) -> dict[str, Any]:
        """Its Pulumi components and, when `up` launches one, its job resource, as children of `env` (the
        environment built so far); returns its own stack outputs (StackOutputs fields)."""

    def launches_on_up(self, cfg: StackConfig) -> bool:
        """Whether `pulumi up` submits the training job: trainingLaunchOnUp, where `up` can reach the service."""

    def job_inputs(self, cfg: StackConfig, outputs: StackOutputs, framework: str | None = None,
                   nodes: int | None = None, train_args: tuple[str, ...] | None = None) -> Any:
        """The job's inputs from typed stack outputs, as `up` and `infra submit` build them."""

    # The jobs face: each verb takes its typed inputs (infra/backends/verbs.py) and the stack it runs on (config,
    # outputs, how the job service is reached, the data check); the job SDK (infra/jobs.py) calls them.
    def submit(self, ctx: JobContext, inputs: Submit) -> None:
        """Start a training job, once the data is ready (unless inputs.skip_data_check)."""

    def status(self, ctx: JobContext, inputs: Status) -> None:
        """Print a job's state, exit code and retries."""

    def logs(self, ctx: JobContext, inputs: Logs) -> None:
        """Print a job's output; with inputs.follow, until it ends."""

    def download(self, ctx: JobContext, inputs: Download) -> None:
        """Fetch a job's logs and run folder into inputs.dest/JOB."""

    def cancel(self, ctx: JobContext, inputs: Cancel) -> None:
        """Stop a job; what it wrote so far stays."""

    def usage_now(self, service: Any, outputs: StackOutputs, stack: str) -> tuple[int, int]:
        """`teams --live`: (GPU nodes the stack holds now, its training jobs not ended) through `service`, what
        `connect(outputs)` gives the job verbs."""

    def restage_refusal(self, cfg: StackConfig) -> str | None:
        """Why `infra restage` does not apply to this stack, or None."""

    def launch_lines(self, cfg: StackConfig) -> list[str]:
        """plan's first lines on the training job: whether and how `up` launches it."""

    def ready_when(self, cfg: StackConfig) -> str:
        """plan: when a job may start, as far as the data goes."""

    def before_up(self, cfg: StackConfig) -> list[str]:
        """plan: what a subscription needs before `up` (quota, roles, reachability)."""

    def team_grants(self, cfg: StackConfig, level: str) -> list[TeamGrant]:
        """What the team's groups of `level` (members, admins) get on its service, beside the common grants of
        infra/components/access.py; scope "service" is `service_id`."""

    def service_id(self, env: Environment) -> Any:
        """The resource ID of its job service (the Batch account, the Azure ML workspace), once declared."""

    def budget_stop(self, env: Environment) -> Any:
        """What the budget guard does to stop its GPU nodes' spend (a StopAction of infra/components/budget.py):
        the ARM call that scales them to zero and the one role it needs on them."""


@runtime_checkable
class RegistersModels(Protocol):
    """An optional ability: a backend with a model registry (azureml) has it; the others say why not in
    refused_verbs["register-model"]."""

    def register_model(self, ctx: JobContext, inputs: RegisterModel) -> None:
        """Register a finished job's model.onnx as a model version, with its metrics as tags."""


# Imported after the protocol: the backend modules import nothing heavy at the top (see above).
from infra.backends.azureml.backend import AzureMlBackend  # noqa: E402
from infra.backends.batch.backend import BatchBackend  # noqa: E402

BACKENDS: dict[str, Backend] = {b.name: b for b in (BatchBackend(), AzureMlBackend())}


def backend(name: str) -> Backend:
    """The backend a stack's `backend` key names (the config has refused any other)."""
    return BACKENDS[name]
