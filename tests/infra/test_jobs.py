"""The job SDK (infra/jobs.py) called as tests and tools call it: typed inputs, no argparse, no `main([...])`; its
refusals are raised, for the command line to print."""
import json

import pytest

from infra import jobs
from infra.backends import RegistersModels, Restages, backend
from infra.backends.shared import JobError
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
