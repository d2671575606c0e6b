"""The job resources of `pulumi up` (TrainingJob for Batch, AmlTrainingJob for Azure ML) driven as the Pulumi engine
drives a dynamic provider, over several `up`s of one stack:

- values cross the wire as the engine passes them: serialized by the SDK and read back by the dynamic provider
  host (pulumi.runtime.rpc: numbers become floats, tuples lists, None keys vanish; a preview's unknowns arrive as
  rpc.UNKNOWN), as in pulumi/pulumi sdk/python/lib/pulumi/dynamic/__main__.py;
- create(news) on the first `up`; then diff(id, olds = the state's outputs, news = the checked inputs), and by its
  answer: nothing, update(id, olds, news) in place, or a replacement, create(news) then delete(old id, old
  outputs) unless delete_before_replace (pkg/resource/deploy/step_generator.go); a preview calls diff only.

Item 6 of issue 21: the first deploy has an empty `data` container; item 7: `up` replaced a running job."""
import asyncio

import pulumi
import pytest
from pulumi.runtime import rpc

from infra.backends.azureml.training_job import AmlTrainingJobProvider
from infra.backends.batch.training_job import TrainingJob, TrainingJobArgs, TrainingJobProvider, inputs_from
from infra.backends.batch import spec as batch_spec
from infra.backends import staging
from tests.infra.conftest import evaluation_for
from tests.infra.backends.azureml.fake_aml import FakeAmlJobs
from tests.infra.backends.batch.test_spec import inputs as batch_inputs


def wire(props: dict) -> dict:
    """A property map as it reaches the provider host: serialized by the SDK, deserialized with unknowns kept."""
    loop = asyncio.new_event_loop()
    try:
        struct = loop.run_until_complete(rpc.serialize_properties(props, {}))
    finally:
        loop.close()
    return rpc.deserialize_properties(struct, True)


class Engine:
    """One resource's life across `pulumi up`s and previews, as the engine runs its provider."""

    def __init__(self, provider):
        self.provider, self.id, self.outputs, self.steps = provider, None, None, []

    def up(self, inputs: dict) -> str:
        news = self.provider.check(self.outputs or {}, wire(inputs)).inputs
        if self.id is None:
            result = self.provider.create(news)
            self.id, self.outputs = result.id, wire(result.outs)
            return self._step("create")
        diff = self.provider.diff(self.id, self.outputs, news)
        if not diff.changes:
            return self._step("same")
        if not diff.replaces:
            self.outputs = wire(self.provider.update(self.id, self.outputs, news).outs)
            return self._step("update")
        old_id, old_outputs = self.id, self.outputs
        if diff.delete_before_replace:
            self.provider.delete(old_id, old_outputs)
        result = self.provider.create(news)
        self.id, self.outputs = result.id, wire(result.outs)
        if not diff.delete_before_replace:
            self.provider.delete(old_id, old_outputs)
        return self._step("replace")

    def preview(self, inputs: dict):
        news = self.provider.check(self.outputs or {}, wire(inputs)).inputs
        return self.provider.diff(self.id, self.outputs, news)

    def destroy(self) -> None:
        self.provider.delete(self.id, self.outputs)

    def _step(self, step: str) -> str:
        self.steps.append(step)
        return step


class Data:
    """The seam infra/backends/staging.py answers through: whether a job may start now."""

    def __init__(self):
        self.line = "the `data` container is empty: upload the dataset first"
        self.asked = []
        self.named: tuple[str, ...] = ()  # set: the container holds these named datasets alone, no `default`

    def staged(self, data_url, status_url):
        self.asked.append((data_url, status_url))
        return staging.Readiness(self.line.startswith("staged"), self.line, default=not self.named, named=self.named)


def job_inputs(stack: str, kind: str) -> dict:
    """What the program registers for the job resource (the mocks' record of its inputs)."""
    return dict(next(r for r in evaluation_for(stack).of_type("pulumi-python:dynamic:Resource") if kind in r.inputs).inputs)


@pytest.fixture
def batch_job(batch):
    data = Data()
    return Engine(TrainingJobProvider(batch, data.staged)), batch, data, job_inputs("dev", "batch_endpoint")


def test_the_first_up_with_an_empty_container_submits_nothing_and_a_later_up_submits(batch_job):
    engine, batch, data, inputs = batch_job
    assert engine.up(inputs) == "create"  # no exception: the first `up` of a stack succeeds
    assert batch.jobs == {} and engine.outputs["job_id"] == ""
    assert engine.outputs["state"].startswith("waiting for data: no job was submitted, so no GPU node waits: "
                                              "the `data` container is empty")
    assert "`pulumi up` submits the job (or `python -m infra submit --stack dev`)" in engine.outputs["state"]
    # The data is asked with the stack's own containers: `data` alone, as dataTier node-local has no NFS staging
    # report in `status` (every node stages the dataset at the job's start).
    urls = evaluation_for("dev").outputs["containerUrls"]
    assert data.asked == [(urls["data"], "")]
    # Every later `up` tries again in place; once the server reports the data staged, it submits.
    assert engine.up(inputs) == "update" and batch.jobs == {}
    data.line = "staged 160 files (0.00 GB) at 2026-11-23T10:00:00Z on nfs-dev"
    assert engine.up(inputs) == "update"
    job = engine.outputs["job_id"]
    assert list(batch.jobs) == [job] and job.startswith("train-dev-") and engine.outputs["state"] == \
        f"submitted {job}"
    assert engine.up(inputs) == "same" and list(batch.jobs) == [job]  # submitted once


def test_up_submits_nothing_while_data_holds_named_datasets_alone(batch_job):
    """up's job trains on `default`: a container of named datasets alone would stop node-stage on every GPU node."""
    engine, batch, data, inputs = batch_job
    data.line, data.named = "staged 3 files (0.00 GB)", ("pets",)
    assert engine.up(inputs) == "create" and batch.jobs == {} and engine.outputs["job_id"] == ""
    assert engine.outputs["state"].startswith("waiting for data: no job was submitted, so no GPU node waits: "
                                              "--dataset default: the `data` container's root holds no dataset")
    assert "its named datasets: pets" in engine.outputs["state"]
    data.named = ()  # `default` uploaded: the next up submits
    assert engine.up(inputs) == "update" and len(batch.jobs) == 1


def test_destroying_a_job_that_was_never_submitted_asks_batch_nothing(batch_job):
    engine, batch, _, inputs = batch_job
    engine.up(inputs)
    batch.jobs["someone-elses"] = batch.jobs.get("someone-elses", {"id": "someone-elses", "state": "active"})
    engine.destroy()
    assert list(batch.jobs) == ["someone-elses"]  # the resource deletes no job it did not submit


def ready_batch_job(batch_job):
    engine, batch, data, inputs = batch_job
    data.line = "staged 160 files"
    engine.up(inputs)
    return engine, batch, inputs, engine.outputs["job_id"]


@pytest.mark.parametrize("key,value", [("retries", 5), ("max_hours", 48), ("train_args", ["--epochs", "1"]),
                                       ("image", "cr.azurecr.io/pytorch:latest@sha256:" + "1" * 64)])
def test_up_never_replaces_a_running_job_and_says_how_to_go_on(batch_job, key, value):
    engine, batch, inputs, job = ready_batch_job(batch_job)
    with pytest.raises(RuntimeError) as refused:
        engine.up({**inputs, key: value})
    message = str(refused.value)
    assert message == (f"the training job {job} is active: this `pulumi up` would replace it ({key} changed) and its "
                       "training would start again from scratch in a new run folder; keep it running and run `up` "
                       f"after it has completed, or stop it first: `python -m infra cancel --stack dev --job {job}`, "
                       "then `pulumi up`")
    assert "\n" not in message
    assert list(batch.jobs) == [job] and batch.jobs[job]["state"] == "active"  # still training


def test_a_preview_with_an_image_not_built_yet_says_the_same(batch_job):
    engine, batch, inputs, job = ready_batch_job(batch_job)
    with pytest.raises(RuntimeError, match=f"the training job {job} is active: .*\\(image changed\\)"):
        engine.preview({**inputs, "image": rpc.UNKNOWN})
    assert engine.preview(inputs).changes is False  # nothing changed: nothing to say


def test_once_the_job_has_ended_a_change_submits_a_new_one_and_removes_the_old(batch_job):
    engine, batch, inputs, job = ready_batch_job(batch_job)
    batch.terminate(job)  # `python -m infra cancel` (or the job completed)
    assert engine.up({**inputs, "retries": 5}) == "replace"
    new = engine.outputs["job_id"]
    assert new != job and list(batch.jobs) == [new]  # submitted, then the old one deleted
    # A job gone from Batch (deleted by hand) is replaced too.
    batch.jobs.clear()
    assert engine.up({**inputs, "retries": 6}) == "replace"


def test_unchanged_inputs_leave_a_running_job_alone(batch_job):
    engine, batch, inputs, job = ready_batch_job(batch_job)
    assert engine.up(inputs) == "same" and batch.jobs[job]["state"] == "active"


@pytest.fixture
def aml_job():
    aml, data = FakeAmlJobs(), Data()
    return Engine(AmlTrainingJobProvider(aml, data.staged)), aml, data, job_inputs("nlp", "workspace")


def test_azure_ml_submits_nothing_while_data_is_empty_then_submits(aml_job):
    engine, aml, data, inputs = aml_job
    assert engine.up(inputs) == "create" and aml.calls == [] and engine.outputs["job_name"] == ""
    assert "the `data` container is empty" in engine.outputs["state"]
    assert data.asked == [(evaluation_for("nlp").outputs["containerUrls"]["data"], "")]  # no NFS server
    data.line = "staged: `data` holds 160 files"
    assert engine.up(inputs) == "update" and aml.calls == [("submit", engine.outputs["job_name"])]


def test_azure_ml_never_replaces_a_running_job(aml_job):
    engine, aml, data, inputs = aml_job
    data.line = "staged"
    engine.up(inputs)
    name = engine.outputs["job_name"]
    aml.jobs[name]["status"] = "Running"
    with pytest.raises(RuntimeError, match=f"the training job {name} is Running: .*\\(train_args changed\\).*"
                                           f"python -m infra cancel --stack nlp --job {name}"):
        engine.up({**inputs, "train_args": ["--epochs", "1"]})
    assert aml.calls == [("submit", name)]
    aml.jobs[name]["status"] = "Completed"
    assert engine.up({**inputs, "train_args": ["--epochs", "1"]}) == "replace"
    assert aml.calls[-1][0] == "submit" and name in aml.jobs  # the old one stays in the history


def test_the_state_written_before_these_outputs_existed_still_names_its_job(batch):
    """A stack deployed by the previous version holds job_id = the resource ID and no `state`."""
    inputs = job_inputs("dev", "batch_endpoint")
    spec = inputs_from(wire(inputs))
    job = batch_spec.job_id(spec)
    batch.submit(batch_spec.job_spec(spec, job), batch_spec.task_spec(spec, job))
    provider = TrainingJobProvider(batch, Data().staged)
    with pytest.raises(RuntimeError, match=f"the training job {job} is active"):
        provider.diff(job, wire({**inputs, "job_id": job}), wire({**inputs, "retries": 9}))


@pytest.mark.parametrize("stack,ready", [
    ("dev", "once `data` holds the dataset (every node stages it onto its local volume at the job's start)"),
    ("nlp", "once `data` holds the dataset (the job's `data` input)"),
])
def test_plan_says_what_up_does_to_the_job(stack, ready):
    from infra.cli import plan

    text, _ = plan.render(evaluation_for(stack))
    job = text.split("\nTraining job\n")[1].split("\n\n")[0]
    assert ("first deploy: `up` creates the stack with an empty `data`, submits no job and says so; upload the "
            f"dataset, then `pulumi up` again submits it {ready}") in job
    assert ("a later `up` that changes the job's inputs (image digest, trainingArgs, framework, nodes, retries, hours) "
            "submits a new job only once the current one has ended; while it runs, preview and up stop with one "
            "line naming it (`python -m infra cancel` it first)") in job


class JobMocks(pulumi.runtime.Mocks):
    """The job resource's outputs as the provider left them (the provider itself runs in its own process)."""

    def __init__(self, state):
        self.state = state

    def new_resource(self, args):
        return "job-id", {**args.inputs, "job_id": "", "state": self.state}

    def call(self, args):
        return {}


@pytest.mark.parametrize("state,warned", [("waiting for data: no job was submitted, so no GPU node waits: the `data` "
                                           "container is empty; once it is, `pulumi up` submits the job", True),
                                          ("submitted train-dev-1", False)])
def test_up_says_when_it_submitted_no_job(monkeypatch, state, warned):
    said = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, resource=None, **kw: said.append(message))
    pulumi.runtime.set_mocks(JobMocks(state), preview=False)

    @pulumi.runtime.test
    def program():
        job = TrainingJob("job", TrainingJobArgs("badev.batch.azure.com", "", pulumi.Output.from_input(batch_inputs())))
        return job.state.apply(lambda _: None)

    program()
    assert said == ([f"no training job submitted, {state}"] if warned else [])


# What Batch answers an identity without a role on the account (the same 403 body as a firewall's refusal; the
# Batch docs do not give the role case its own code): AuthorizationFailure.
NO_ROLE_YET = (403, "AuthorizationFailure", "This request is not authorized to perform this operation.")


def test_a_role_granted_by_this_up_and_not_in_effect_yet_makes_up_wait_not_fail(batch_job):
    """The first `up` grants the deployer Azure Batch Job Submitter and then submits; Azure applies a new role
    assignment within up to 30 minutes. The real client's 403 leaves the resource without a job, `up` succeeds
    with a warning that says why, and the next `up` submits."""
    engine, batch, data, inputs = batch_job
    data.line = "staged 160 files (0.00 GB) at 2026-11-23T10:00:00Z on nfs-dev"
    batch.endpoint.refuse = NO_ROLE_YET
    assert engine.up(inputs) == "create" and batch.jobs == {} and engine.outputs["job_id"] == ""
    state = engine.outputs["state"]
    assert state.startswith("waiting for access: the Batch account refused ") and "(403 AuthorizationFailure)" in state
    assert "up to 30 minutes" in state and "\n" not in state
    batch.endpoint.refuse = None  # the role is in effect now
    assert engine.up(inputs) == "update" and list(batch.jobs) == [engine.outputs["job_id"]]


def test_a_storage_refusal_of_the_data_check_makes_up_wait_too(batch_job):
    """The data check lists `data` and reads `status` with roles granted by the same `up`."""
    from training.data import transfer
    from training.data.blob_reader import BlobHttpError

    engine, batch, data, inputs = batch_job

    def refused(data_url, status_url):
        with transfer.stopping_cleanly("listing `data`"):
            raise transfer.classify(BlobHttpError(403, "AuthorizationPermissionMismatch", "This request is not "
                                                  "authorized to perform this operation using this permission."),
                                    "listing `data`")

    engine.provider._staged = refused
    assert engine.up(inputs) == "create" and batch.jobs == {}
    assert engine.outputs["state"].startswith("waiting for access: listing `data` stopped: not allowed")


def test_azure_ml_waits_for_access_the_same_way(aml_job):
    engine, aml, data, inputs = aml_job
    data.line = "staged"
    from infra.backends.shared import ServiceRefused

    def refuse(job):
        raise ServiceRefused("Azure ML refused submitting the job (403 AuthorizationFailed): ...")

    submit, aml.submit = aml.submit, refuse
    assert engine.up(inputs) == "create" and engine.outputs["job_name"] == ""
    assert engine.outputs["state"].startswith("waiting for access: Azure ML refused submitting the job")
    aml.submit = submit
    assert engine.up(inputs) == "update" and engine.outputs["job_name"]
