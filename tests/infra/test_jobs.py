"""The job SDK (infra/jobs.py) called as tests and tools call it: typed inputs, no argparse, no `main([...])`; its
refusals are raised, for the command line to print."""
import json

import pytest

from infra import jobs
from infra.backends import RegistersModels, Restages, backend
from infra.backends.shared import JobError
from training.errors import UsageError
from infra.backends.verbs import VERB_NAMES, Cancel, Download, Logs, RegisterModel, Status, Submit
from tests.infra.backends.batch.test_operate import OUTPUTS, not_staged, staged
from tests.infra.backends.conftest import batch  # noqa: F401 - fixture


@pytest.fixture
def dev(tmp_path):
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(OUTPUTS))
    return jobs.Stack("dev", outputs=path)


def services(batch, data=staged):
    return jobs.Services(batch=lambda endpoint: batch, staged=data)


def test_submit_then_status_logs_and_cancel_the_newest_job_through_the_sdk(dev, batch, capsys):  # noqa: F811
    jobs.submit(dev, Submit(framework="keras", nodes=1, args="--epochs 1"), services(batch))
    [job] = batch.jobs
    assert f"submitted {job}: keras on 1 node(s)" in capsys.readouterr().out
    assert "--epochs 1" in batch.tasks[job]["commandLine"]
    jobs.status(dev, Status(), services(batch))
    assert f"job {job}: active" in capsys.readouterr().out
    jobs.cancel(dev, Cancel(job=job), services(batch))
    assert f"cancelled {job}" in capsys.readouterr().out


def test_refusals_are_raised_before_anything_is_submitted(dev, batch):  # noqa: F811
    with pytest.raises(JobError, match="the NFS server reports: staging"):
        jobs.submit(dev, Submit(), services(batch, not_staged))
    with pytest.raises(JobError, match="register-model needs backend azureml"):
        jobs.register_model(dev, RegisterModel(), services(batch))
    with pytest.raises(JobError, match="register-model --rehearsal: rehearsals play the Batch backend only"):
        jobs.register_model(jobs.Stack("dev", rehearsal=dev.outputs.parent), RegisterModel(), services(batch))
    assert not batch.jobs


def test_every_verb_has_a_name_and_a_face_on_each_backend():
    assert set(VERB_NAMES) == {Submit, Status, Logs, Download, Cancel, RegisterModel}
    for name in ("batch", "azureml"):
        chosen = backend(name)
        assert all(callable(getattr(chosen, face)) for face in ("submit", "status", "logs", "download", "cancel"))
        # register-model and restage: an ability a backend has, or a line saying why not
        assert isinstance(chosen, RegistersModels) != ("register-model" in chosen.refused_verbs)
        assert isinstance(chosen, Restages) != ("restage" in chosen.refused_verbs)


def test_inputs_are_frozen():
    with pytest.raises(AttributeError):
        Submit().nodes = 3


# The member's path (issue 47): each rough edge a member met, as it is said now.

@pytest.fixture
def member(tmp_path):
    """The member file of stack dev, as `python -m infra member-file` writes it."""
    from infra.backends.shared import MEMBER_STACK_KEY

    path = tmp_path / "member-dev.json"
    path.write_text(json.dumps({**OUTPUTS, "backend": "batch", MEMBER_STACK_KEY: "dev"}))
    return path


def test_a_missing_member_file_is_named_as_missing(tmp_path, capsys, monkeypatch):
    from infra.cli.main import main

    monkeypatch.setenv("PATH", str(tmp_path))  # no Pulumi CLI: before, "no --stack given, and without the Pulumi CLI"
    for verb in (["status"], ["submit"], ["logs", "--follow"], ["upload", str(tmp_path)], ["restage"]):
        assert main([*verb, "--outputs", str(tmp_path / "member-x.json")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--outputs {tmp_path / 'member-x.json'}: no such file" in err, err


def test_follow_up_commands_repeat_the_members_own_file(member, batch, capsys, monkeypatch):  # noqa: F811
    nfs_tier(monkeypatch)  # the restage hint: the NFS server stages only with dataTier nfs
    stack = jobs.Stack("dev", outputs=member)
    jobs.submit(stack, Submit(nodes=1), services(batch))
    [job] = batch.jobs
    out = capsys.readouterr().out
    assert f"python -m infra logs --outputs {member} --job {job} --follow" in out
    assert f"python -m infra download --outputs {member} --job {job}" in out and "--stack" not in out
    with pytest.raises(JobError, match=f"`python -m infra restage --outputs {member}` asks"):
        jobs.submit(stack, Submit(), services(batch, not_staged))
    plain = jobs.Stack("dev", outputs=member.with_name("outputs.json"))  # `pulumi stack output` names no stack
    plain.outputs.write_text(json.dumps(OUTPUTS))
    assert jobs.stack_flags(plain) == f"--stack dev --outputs {plain.outputs}"
    assert jobs.stack_flags(jobs.Stack("dev")) == "--stack dev"


def test_logs_says_what_it_waits_for_before_the_first_output(dev, batch, capsys):  # noqa: F811
    jobs.submit(dev, Submit(nodes=1), services(batch))
    [job] = batch.jobs
    capsys.readouterr()
    jobs.logs(dev, Logs(), services(batch))
    out, err = capsys.readouterr()
    assert out == "" and f"logs: job {job}: no stdout.txt yet; its task is queued: waiting for the pool's nodes" in err
    batch.tasks[job]["state"] = "running"
    batch.files[(job, "stdout.txt")] = b"step 1\n"
    jobs.logs(dev, Logs(), services(batch))
    out, err = capsys.readouterr()
    assert out == "step 1\n" and err == ""


def test_status_after_cancel_says_cancelled(dev, batch, capsys):  # noqa: F811
    jobs.submit(dev, Submit(nodes=1), services(batch))
    [job] = batch.jobs
    jobs.cancel(dev, Cancel(), services(batch))
    batch.tasks[job].update(state="completed", executionInfo={**batch.tasks[job].get("executionInfo", {}),
                                                              "exitCode": -9})  # as Batch ends the killed task
    capsys.readouterr()
    jobs.status(dev, Status(), services(batch))
    out = capsys.readouterr().out
    assert f"job {job}: cancelled" in out and "task: stopped by the cancel, exit code -9" in out
    assert "completed" not in out


def test_azure_ml_status_after_cancel_says_cancelled_and_logs_what_it_waits_for(capsys):
    from infra.backends.azureml import operate as operate_aml
    from tests.infra.backends.azureml.fake_aml import FakeAmlJobs

    aml = FakeAmlJobs()
    aml.jobs["train-nlp-1"] = {"name": "train-nlp-1", "status": "Queued", "created": "2026-11-26", "studio_url": ""}
    aml.stream = lambda name: None
    operate_aml.logs(aml, "train-nlp-1", True, __import__("sys").stdout)
    assert "logs: job train-nlp-1 is Queued: Azure ML streams its output once its nodes run it" in capsys.readouterr().err
    aml.cancel("train-nlp-1")
    assert operate_aml.status(aml, "train-nlp-1")[0].startswith("job train-nlp-1: cancelled")


# Named datasets (training/data/datasets.py): a job trains on the one named, on either backend.

def test_submit_dataset_points_the_jobs_data_at_that_datasets_folder(dev, batch, capsys, monkeypatch):  # noqa: F811
    from infra.backends.batch import operate

    monkeypatch.setattr(operate, "pause", lambda seconds: None)  # the first job, days old here, is "overdue"
    with_pets = jobs.Services(batch=lambda endpoint: batch, staged=staged, datasets=lambda url: ["default", "pets"])
    jobs.submit(dev, Submit(nodes=1, dataset="pets"), with_pets)
    jobs.submit(dev, Submit(nodes=1), with_pets)
    named, plain = (batch.tasks[job]["commandLine"] for job in batch.jobs)  # submitted in this order
    # dataTier node-local: every node stages the named dataset (the root is `default`) onto its local volume
    assert "--data \"$AZ_BATCH_NODE_SHARED_DIR\"/local-data/datasets/pets " in named
    assert "node-stage https://" in batch.tasks[next(iter(batch.jobs))]["multiInstanceSettings"][
        "coordinationCommandLine"]
    assert "--data \"$AZ_BATCH_NODE_SHARED_DIR\"/local-data/datasets/default " in plain
    with pytest.raises(UsageError, match=r"--dataset boats: the stack's `data` container has no such dataset "
                                         r"\(it has: default, pets\)"):
        jobs.submit(dev, Submit(nodes=1, dataset="boats"), with_pets)
    assert len(batch.jobs) == 2


def test_submit_without_dataset_is_refused_when_data_holds_named_datasets_alone(dev, batch):  # noqa: F811
    """node-stage --dataset default would stop on every GPU node (no dataset.json, no train/ at the root): submit
    refuses first, naming the datasets there; --dataset pets goes through."""
    from infra.backends.staging import Readiness

    def named_only(data_url, status_url):
        return Readiness(True, "`data` holds 3 files (0.00 GB)", default=False, named=("boats", "pets"))

    only = jobs.Services(batch=lambda endpoint: batch, staged=named_only, datasets=lambda url: ["boats", "pets"])
    with pytest.raises(JobError, match=r"--dataset default: the `data` container's root holds no dataset .*its named "
                                       r"datasets: boats, pets\); submit with --dataset NAME"):
        jobs.submit(dev, Submit(nodes=1), only)
    assert not batch.jobs
    jobs.submit(dev, Submit(nodes=1, dataset="pets"), only)
    assert len(batch.jobs) == 1


def test_an_unnamed_job_keeps_its_fingerprint():
    """Jobs `pulumi up` launched before datasets had names keep their IDs (no replacement on the next `up`)."""
    import dataclasses

    from tests.infra.backends.batch.test_spec import inputs

    import hashlib

    from infra.backends.batch import spec as batch_spec

    plain = inputs()

    fields = {k: v for k, v in dataclasses.asdict(plain).items() if k not in ("dataset", "data_tier")}  # nfs
    assert plain.fingerprint() == hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]
    assert batch_spec.job_id(plain) != batch_spec.job_id(dataclasses.replace(plain, dataset="pets"))


def test_an_azure_ml_job_on_a_dataset_has_that_folder_as_its_data_input(tmp_path):
    import dataclasses

    from infra.backends.azureml import job as aml_job
    from tests.infra.backends.azureml.test_job import built, stack_inputs

    plain = stack_inputs()
    rest, _, name = built(tmp_path, dataclasses.replace(plain, dataset="pets", data_mode="mount"))
    assert rest["inputs"]["data"]["uri"].endswith("/paths/datasets/pets/")
    # amlDataMode download: no input; every node stages that dataset itself (infra/backends/azureml/job.py)
    assert "--dataset pets --dest local-data" in aml_job.command_line(dataclasses.replace(plain, dataset="pets"))
    assert aml_job.job_name(dataclasses.replace(plain, dataset="pets")) == aml_job.job_name(plain)  # names as before


def nfs_tier(monkeypatch):
    """The job verbs read the stack file with dataTier nfs (the NFS server stages `data` and reports in `status`)."""
    import dataclasses

    from infra.core.config import stack as config

    real = config.from_stack_file

    def with_nfs(*args, **kwargs):
        cfg = real(*args, **kwargs)
        return dataclasses.replace(cfg, nfs=dataclasses.replace(cfg.nfs, data_tier="nfs"))

    monkeypatch.setattr(config, "from_stack_file", with_nfs)
