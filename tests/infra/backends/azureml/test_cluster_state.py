"""`status` on an azureml stack shows the compute cluster's allocation: Compute - Get read at the wire (the real
azure-mgmt-core ARM pipeline, infra/backends/preflight.py: Arm, against the local ARM endpoint answering as the
REST spec's 2025-12-01 Compute/get/AmlCompute.json example does), a cluster stopped at 1 of 2 nodes with an
allocation error, and the line the verb prints from it."""
import json

import pytest

from infra.backends import preflight
from infra.backends.azureml import operate
from infra.backends.azureml.service import COMPUTE_API, AzureMlJobs
from infra.cli.main import main
from tests.infra.backends.arm_endpoint import ArmEndpoint, aml_compute
from tests.infra.backends.azureml.fake_aml import FakeAmlJobs
from tests.infra.backends.azureml.test_operate import data_in_container
from tests.infra.backends.cost_endpoint import Token
from tests.infra.conftest import evaluation_for

# Which codes Azure ML writes in an AmlCompute's errors is not documented; the shape is ARM's ErrorResponse.
QUOTA = {"error": {"code": "QuotaExceeded", "message": "Operation could not be completed as it results in exceeding "
                                                       "approved LowPriorityCores quota"}}


@pytest.fixture
def endpoint():
    arm = ArmEndpoint("westus2", ("Standard_ND96asr_v4", "standardNDASv4Family", 96))
    yield arm
    arm.close()


def test_status_shows_a_cluster_stopped_at_one_of_two_nodes_and_its_error(endpoint, tmp_path, capsys):
    outputs = evaluation_for("nlp").outputs
    compute = outputs["amlComputeName"]
    endpoint.computes[compute] = aml_compute(compute, current=1, target=2, errors=[QUOTA])
    (tmp_path / "outputs.json").write_text(json.dumps(outputs))
    jobs = FakeAmlJobs()

    def connect(stack_outputs):  # the jobs from the fake, the cluster from Azure ML's REST API at the wire
        real = AzureMlJobs(stack_outputs.subscription_id, stack_outputs.resource_group_name,
                           stack_outputs.aml_workspace_name, client=object(),
                           arm=preflight.Arm(Token(), base_url=endpoint.url, connection_verify=endpoint.ca_file,
                                             retry_total=0))
        jobs.cluster_state = real.cluster_state
        return jobs

    common = ["--stack", "nlp", "--outputs", str(tmp_path / "outputs.json")]
    run = lambda argv: (main(argv, aml_factory=connect, staged=data_in_container,
                             batch_factory=lambda e: pytest.fail("Batch used")), capsys.readouterr())
    code, (_, err) = run(["submit", *common, "--nodes", "2"])
    assert code == 0, err
    code, (out, err) = run(["status", *common])
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith(f"  cluster {compute}:"))
    assert line.startswith(f"  cluster {compute}: Resizing since 2026-11-26 22:28 UTC, 1 of 2 node(s) (idle 1); "
                           "allocation error QuotaExceeded: Operation could not be completed"), line
    assert "no deadline on Azure ML" in line and "python -m infra cancel" in line
    path = (f"/subscriptions/{outputs['subscriptionId']}/resourceGroups/{outputs['resourceGroupName']}/providers/"
            f"Microsoft.MachineLearningServices/workspaces/{outputs['amlWorkspaceName']}/computes/{compute}")
    assert ("GET", path, COMPUTE_API, None) in endpoint.requests

    # A job that runs: the cluster's state without the wait's words; a 403 on the compute is one line.
    jobs.jobs[next(iter(jobs.jobs))]["status"] = "Running"
    endpoint.computes[compute] = aml_compute(compute, current=2, target=2, state="Steady")
    code, (out, _) = run(["status", *common])
    assert code == 0 and f"  cluster {compute}: Steady since 2026-11-26 22:28 UTC, 2 of 2 node(s) (idle 2)\n" in out
    endpoint.refuse["/computes/"] = (403, "AuthorizationFailed", "The client does not have authorization")
    code, (_, err) = run(["status", *common])
    assert code == 1 and err.count("\n") == 1 and "Azure ML" in err, err


@pytest.mark.parametrize("props,status,expected", [
    ({}, "Completed", "  cluster gpu: unknown, ? of ? node(s)"),
    ({"allocationState": "Steady", "currentNodeCount": 0, "targetNodeCount": 0, "errors": None}, "Queued",
     "  cluster gpu: Steady, 0 of 0 node(s); the job waits for its nodes with no deadline on Azure ML"),
    ({"allocationState": "Steady", "currentNodeCount": 0, "targetNodeCount": 0,
      "errors": [QUOTA, {"error": {"code": "X", "message": "y"}}]}, "Failed",
     "  cluster gpu: Steady, 0 of 0 node(s); allocation error QuotaExceeded: Operation could not be completed as "
     "it results in exceeding approved LowPriorityCores quota (+1 more)"),
])
def test_cluster_line(props, status, expected):
    line = operate.cluster_line("gpu", props, status)
    assert line.startswith(expected) and (("no deadline" in line) == (status == "Queued")), line
