"""The backends, peers behind one protocol: `backend(name)` is how the program, `plan` and the job verbs reach the
stack's backend (its `backend` key), instead of branching on the name (SkyPilot's sky/backends/backend.py: the CLI
never branches on the backend it drives; torchtitan's protocols/train_spec.py: one registry, one lookup by name).
The protocol is split by face, each with its consumers (torchtitan's protocols/model_spec.py: narrow parts, not
one wide interface): declaring (the Pulumi program), jobs (the job SDK), describing (plan); and abilities a
backend has or has not (register-model, restage).

  batch/     the reference architecture: NFS server, Batch account and InfiniBand GPU pool, a multi-instance task
  azureml/   its successor: an Azure ML workspace, compute cluster and command job
  declared.py  what `declare` is handed (Foundation) and hands back (Declared), both values
  shared.py  what both use: job errors, the typed stack outputs, the NCCL environment, the job inputs' checks
  job_resource.py, staging.py  what both job resources use: launch once the data is ready, never replace a running job

A backend module imports Pulumi and Azure clients only inside its methods, so that importing the registry (and a
backend's pure job spec) stays light.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from infra.backends.declared import Declared, Foundation
    from infra.backends.shared import StackOutputs
    from infra.backends.verbs import Cancel, Download, JobContext, Logs, RegisterModel, Status, Submit
    from infra.components.access import TeamGrant
    from infra.core.config.stack import StackConfig


@runtime_checkable
class Declares(Protocol):
    """The declaring face, for the Pulumi program (infra/stack.py): its resources on `up`, and the job's inputs."""
    name: str  # the stack's `backend` key

    def declare(self, foundation: Foundation, name: str, cfg: StackConfig, rg: Any) -> Declared:
        """Its Pulumi components and, when `up` launches one, its job resource, as children of foundation.parent
        (the stack built so far, which it only reads); returns what it declared (infra/backends/declared.py)."""

    def launches_on_up(self, cfg: StackConfig) -> bool:
        """Whether `pulumi up` submits the training job: trainingLaunchOnUp, where `up` can reach the service."""

    def job_inputs(self, cfg: StackConfig, outputs: StackOutputs, framework: str | None = None,
                   nodes: int | None = None, train_args: tuple[str, ...] | None = None) -> Any:
        """The job's inputs from typed stack outputs, as `up` and `infra submit` build them."""


@runtime_checkable
class RunsJobs(Protocol):
    """The jobs face, for the job SDK (infra/jobs.py), `member-file` and `teams --live`: each verb takes its typed
    inputs (infra/backends/verbs.py) and the stack it runs on (config, outputs, how the job service is reached, the
    data check)."""
    name: str
    required_outputs: tuple[str, ...]  # the StackOutputs fields its job verbs read
    live_outputs: tuple[str, ...]  # the StackOutputs fields `teams --live` reads (usage_now, and to connect)
    refused_verbs: dict[str, str]  # verbs it does not have (an ability below it lacks) -> the line saying so

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


@runtime_checkable
class Describes(Protocol):
    """The describing face, for `plan` (infra/cli/plan.py) and the team's grants (infra/stack.py)."""

    def launch_lines(self, cfg: StackConfig) -> list[str]:
        """plan's first lines on the training job: whether and how `up` launches it."""

    def ready_when(self, cfg: StackConfig) -> str:
        """plan: when a job may start, as far as the data goes."""

    def before_up(self, cfg: StackConfig) -> list[str]:
        """plan: what a subscription needs before `up` (quota, roles, reachability)."""

    def node_health_line(self, cfg: StackConfig) -> str | None:
        """plan: whether and how its nodes' health is checked before training, on an InfiniBand size (None on the
        others)."""

    def team_grants(self, cfg: StackConfig, level: str) -> list[TeamGrant]:
        """What the team's groups of `level` (members, admins) get on its service, beside the common grants of
        infra/components/access.py; scope "service" is what `declare` gave as its service_id."""


@runtime_checkable
class Backend(Declares, RunsJobs, Describes, Protocol):
    """A backend: its three faces. `backend(name)` gives one; each consumer holds it as the face it uses."""


# Optional abilities (dstack's ComputeWith*): small protocols a backend has or has not; one that has not says why
# not in refused_verbs, under the verb's name.
@runtime_checkable
class RegistersModels(Protocol):
    """A model registry (azureml has one): `infra register-model`."""

    def register_model(self, ctx: JobContext, inputs: RegisterModel) -> None:
        """Register a finished job's model.onnx as a model version, with its metrics as tags."""


@runtime_checkable
class Restages(Protocol):
    """Data staged ahead of the jobs by a server that takes restage requests (batch, with nfsKind vm): `infra
    restage` (infra/jobs.py: request_restage)."""

    def restage_refusal(self, cfg: StackConfig) -> str | None:
        """Why this stack's data has no such server after all (another nfsKind), or None."""


# Imported after the protocol: the backend modules import nothing heavy at the top (see above).
from infra.backends.azureml.backend import AzureMlBackend  # noqa: E402
from infra.backends.batch.backend import BatchBackend  # noqa: E402

BACKENDS: dict[str, Backend] = {b.name: b for b in (BatchBackend(), AzureMlBackend())}


def backend(name: str) -> Backend:
    """The backend a stack's `backend` key names (the config has refused any other)."""
    return BACKENDS[name]
