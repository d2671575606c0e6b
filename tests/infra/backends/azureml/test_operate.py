"""The job verbs of an azureml stack (`python -m infra submit|status|logs|download|cancel|register-model`),
against one fake at the AmlJobs seam: what each verb asks Azure ML for, and its one-line refusals."""
import json

import pytest

from infra.cli.main import main
from infra.backends.azureml.service import model_path
from infra.backends.staging import Readiness
from tests.infra.conftest import evaluation_for
from tests.infra.backends.azureml.fake_aml import FakeAmlJobs


@pytest.fixture
def outputs_file(tmp_path):
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(evaluation_for("nlp").outputs))
    return path


def data_in_container(data_url, status_url):
    """infra.backends.staging.data_ready's answer for a non-empty `data` (an azureml stack has no NFS report)."""
    assert status_url == ""
    return Readiness(True, "`data` holds 160 files")


def run(argv, aml, capsys, staged=data_in_container):
    code = main(argv, aml_factory=lambda outputs: aml, batch_factory=lambda endpoint: pytest.fail("Batch used"),
                staged=staged)
    out, err = capsys.readouterr()
    return code, out, err


def test_submit_status_logs_download_register_and_cancel(outputs_file, tmp_path, capsys):
    aml = FakeAmlJobs()
    common = ["--stack", "nlp", "--outputs", str(outputs_file)]
    code, out, err = run(["submit", *common, "--nodes", "2", "--args=--epochs 1 --dist ddp"], aml, capsys)
    assert code == 0, err
    name = aml.calls[0][1]
    job = aml.jobs[name]["job"]
    assert name.startswith("train-nlp-") and f"submitted {name}: pytorch (ddp) on 2 node(s) x 8 GPUs" in out
    assert job.resources.instance_count == 2 and type(job.distribution).__name__ == "PyTorchDistribution"

    code, out, _ = run(["status", *common], aml, capsys)  # the newest job by default
    assert code == 0 and f"job {name}: Queued" in out and f"https://ml.azure.com/runs/{name}" in out
    code, _, _ = run(["logs", *common, "--follow"], aml, capsys)
    assert code == 0 and ("stream", name) in aml.calls

    # Outputs are complete only once the job has ended.
    code, _, err = run(["download", *common, "--dest", str(tmp_path / "r")], aml, capsys)
    assert code == 1 and f"job {name} is Queued: its outputs are complete once it has ended" in err
    aml.finish(name, {"framework": "pytorch", "world_size": 16, "steps": 500, "img_per_sec": 21000.5, "top1": 0.71})
    code, out, _ = run(["download", *common, "--dest", str(tmp_path / "r")], aml, capsys)
    assert code == 0 and (tmp_path / "r" / name / "named-outputs" / "run" / "model.onnx").is_file()

    code, out, err = run(["register-model", *common, "--dest", str(tmp_path / "r")], aml, capsys)
    assert code == 0, err
    assert ("register", "resnet50-nlp", name) in aml.calls
    assert aml.models["resnet50-nlp"] == [{"framework": "pytorch", "world_size": "16", "steps": "500",
                                           "img_per_sec": "21000.5", "top1": "0.71", "job": name}]
    assert f"registered resnet50-nlp version 1 from {name}" in out
    assert model_path(name) == f"azureml://jobs/{name}/outputs/run/paths/model.onnx"

    code, _, err = run(["cancel", *common], aml, capsys)
    assert code == 1 and "has already ended (Completed); nothing to cancel" in err
    aml.jobs[name]["status"] = "Running"  # as if it were still running
    code, out, _ = run(["cancel", *common, "--job", name], aml, capsys)
    assert code == 0 and ("cancel", name) in aml.calls


@pytest.mark.parametrize("argv,message", [
    (["status", "--job", "nope"], "job nope not found"),
    # the hint repeats the user's own --outputs (infra/jobs.py: stack_flags)
    (["status"], "stack nlp has no training jobs; start one with `python -m infra submit --stack nlp --outputs "),
    (["submit", "--nodes", "9"], "--nodes 9: give 1 to 4"),
    (["submit", "--framework", "keras"], "the stack has no tensorflow environment"),
    (["submit", "--args=--epochs x"], "--args: argument --epochs"),
])
def test_bad_requests_are_one_line(argv, message, outputs_file, capsys):
    code, _, err = run([argv[0], "--stack", "nlp", "--outputs", str(outputs_file), *argv[1:]], FakeAmlJobs(), capsys)
    assert code != 0 and message in err and err.count("\n") == 1, err


def test_submit_refuses_an_empty_data_container_in_one_line(outputs_file, capsys):
    """The job's `data` input is the whole `data` container: with nothing in it the job would fail on its nodes."""
    aml = FakeAmlJobs()
    empty = lambda data_url, status_url: Readiness(False, "the `data` container is empty: upload the dataset first")
    code, _, err = run(["submit", "--stack", "nlp", "--outputs", str(outputs_file)], aml, capsys, staged=empty)
    assert code == 1 and err.count("\n") == 1 and not aml.calls
    assert err.startswith("error: no job was submitted, so no GPU node waits: the `data` container is empty"), err
    code, _, _ = run(["submit", "--stack", "nlp", "--outputs", str(outputs_file), "--skip-data-check"], aml, capsys,
                     staged=empty)
    assert code == 0 and len(aml.calls) == 1


def test_submit_refuses_while_the_budget_guard_holds_the_cluster_at_zero_nodes(outputs_file, capsys):
    """The guard PATCHes maxNodeCount to 0 behind Pulumi's back: a job would queue forever. submit names the fix
    (an `up`, which refreshes first: Pulumi.yaml options.refresh) until the cluster's maxNodes is back."""
    aml = FakeAmlJobs()
    compute = evaluation_for("nlp").outputs["amlComputeName"]
    aml.max_instances[compute] = 0
    code, _, err = run(["submit", "--stack", "nlp", "--outputs", str(outputs_file)], aml, capsys)
    assert code == 1 and err.count("\n") == 1 and not aml.jobs, err
    assert f"compute cluster {compute} has maxNodeCount 0" in err and "pulumi up --stack nlp" in err
    aml.max_instances[compute] = 4  # what the next `up` restores
    code, _, err = run(["submit", "--stack", "nlp", "--outputs", str(outputs_file)], aml, capsys)
    assert code == 0 and len(aml.jobs) == 1, err


def test_outputs_of_another_version_are_named(tmp_path, capsys):
    partial = tmp_path / "outputs.json"
    partial.write_text(json.dumps({"resourceGroupName": "rg"}))
    code, _, err = run(["status", "--stack", "nlp", "--outputs", str(partial)], FakeAmlJobs(), capsys)
    assert code == 1 and "stack outputs lack subscriptionId, amlWorkspaceName" in err


def test_register_model_needs_the_azureml_backend(tmp_path, capsys):
    (tmp_path / "x.json").write_text("{}")  # the refusal comes before the outputs are read
    code, _, err = run(["register-model", "--stack", "dev", "--outputs", str(tmp_path / "x.json")], FakeAmlJobs(),
                       capsys)
    assert code == 1 and "register-model needs backend azureml" in err


def test_register_model_with_rehearsal_says_rehearsals_are_batch_only(capsys, tmp_path):
    code = main(["register-model", "--stack", "nlp", "--rehearsal", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert err.startswith("error: register-model --rehearsal: rehearsals play the Batch backend only")
    assert "without --rehearsal" in err
