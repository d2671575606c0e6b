"""`python -m infra teams --live`: each deployed stack's nodes now, jobs running and spend this month, no cloud.

Batch is played at the wire: the real AzureBatch over the real azure-batch client against the local HTTPS Batch
endpoint (devtools/rehearsal/batch_endpoint.py, in front of tests/infra/backends/batch/fake_batch.py's account),
its answers checked against the Batch REST spec. Spend comes through the real azure-mgmt-costmanagement client from
the local Cost Management endpoint (tests/infra/backends/cost_endpoint.py). Azure ML is tested at the AmlJobs seam
(tests/infra/backends/azureml/fake_aml.py), not at the wire: AzureMlJobs.count_nodes and list_jobs over a real
MLClient are not exercised here.
"""
import json
import shutil
import socket
import subprocess

import pytest

from devtools.rehearsal import batch_endpoint as rest
from infra import REPO_ROOT
from infra.cli import teams
from infra.cli.main import main
from tests.devtools.rehearsal.batch_rest_spec import violations
from tests.infra.backends.azureml.fake_aml import FakeAmlJobs
from tests.infra.backends.batch.fake_batch import FakeBatch
from tests.infra.backends.cost_endpoint import CostEndpoint, spend_client

SUBSCRIPTION = "00000000-0000-0000-0000-0000000000aa"
REFUSED = (403, "AuthorizationFailure", "This request is not authorized to perform this operation.")


class ScopedCost(CostEndpoint):
    """The Cost Management endpoint answering each resource group's own month-to-date rows (`rows_of[group]`)."""

    def __init__(self, rows_of):
        super().__init__()
        self.rows_of = rows_of

    def answer(self, scope):
        self.rows = self.rows_of[scope.rsplit("/", 1)[-1]]
        return super().answer(scope)


def pool(pool_id, dedicated, spot):
    """A pool as Pools - Get answers it (BatchPool of the REST spec, api-version 2025-06-01), the node counts given."""
    return {"id": pool_id, "url": f"https://account.region.batch.azure.com/pools/{pool_id}", "eTag": "0x8D4123FF",
            "lastModified": "2026-11-21T11:00:00.0000000Z", "creationTime": "2026-11-20T09:00:00.0000000Z",
            "state": "active", "stateTransitionTime": "2026-11-20T09:00:00.0000000Z", "allocationState": "steady",
            "allocationStateTransitionTime": "2026-11-21T11:00:00.0000000Z", "vmSize": "standard_nd96asr_v4",
            "currentDedicatedNodes": dedicated, "currentLowPriorityNodes": spot, "targetDedicatedNodes": dedicated,
            "targetLowPriorityNodes": spot, "enableAutoScale": False, "enableInterNodeCommunication": True,
            "taskSlotsPerNode": 1}


def batch_account(stack, dedicated, spot, jobs):
    """A FakeBatch whose pool `gpu` holds those nodes and whose jobs (id -> state) are the REST spec's JSON."""
    batch = FakeBatch()
    batch.account.pools["gpu"] = pool("gpu", dedicated, spot)
    for job_id, state in jobs.items():
        job = rest.new_job({"id": job_id, "poolInfo": {"poolId": "gpu"}}, batch.endpoint.url, batch.account.now(),
                           f"0x{len(batch.jobs) + 1:015X}")
        batch.jobs[job_id] = {**job, "state": state}
    return batch


def outputs(stack, **extra):
    return {"subscriptionId": SUBSCRIPTION, "resourceGroupName": f"rg-{stack}", **extra}


def batch_outputs(stack):
    return outputs(stack, batchAccountEndpoint=f"ba{stack}.westeurope.batch.azure.com", poolId="gpu")


@pytest.fixture
def project(tmp_path):
    """A temp copy of Pulumi.yaml; each test copies the stack files it needs. `outputs/` is --outputs-dir."""
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path)
    (tmp_path / "outputs").mkdir()
    return tmp_path


def add_stack(project, stack, outputs_json=None, extra=""):
    text = (REPO_ROOT / f"Pulumi.{stack}.yaml").read_text().rstrip("\n") + "\n" + extra
    (project / f"Pulumi.{stack}.yaml").write_text(text)
    if outputs_json is not None:
        (project / "outputs" / f"{stack}.json").write_text(json.dumps(outputs_json))


@pytest.fixture
def services():
    """What each test's Batch accounts, Azure ML and Cost Management are; closed after."""
    made = {"batch": {}, "aml": FakeAmlJobs(), "cost": None}
    yield made
    for batch in made["batch"].values():
        batch.close()
    if made["cost"]:
        made["cost"].close()


def run_teams(project, services, capsys, *flags):
    code = main(["teams", "--live", "--outputs-dir", str(project / "outputs"), "--project-dir", str(project), *flags],
                batch_factory=lambda endpoint: services["batch"][endpoint], aml_factory=lambda outputs: services["aml"],
                spend_factory=lambda: spend_client(services["cost"]))
    out, err = capsys.readouterr()
    return code, out, err


def test_live_json_reads_nodes_jobs_and_spend_and_a_stack_without_outputs_says_why(project, services, capsys):
    add_stack(project, "dev", batch_outputs("dev"), extra="  azure-dl-training:monthlyBudgetUsd: 1000\n"
                                                          "  azure-dl-training:budgetContacts: [ml@example.com]\n")
    add_stack(project, "nlp", outputs("nlp", amlWorkspaceName="mlw-nlp", amlComputeName="gpu-cluster"))
    add_stack(project, "trial")  # never deployed: no outputs
    dev = batch_account("dev", 2, 1, {"train-dev-a1-20261121100000": "completed",
                                      "train-dev-a1-20261121110000": "active",
                                      "train-devtest-b2": "active"})  # another stack's prefix, not counted
    services["batch"]["badev.westeurope.batch.azure.com"] = dev
    aml = services["aml"]
    aml.nodes["gpu-cluster"] = 4
    for name, status in (("train-nlp-x-1", "Running"), ("train-nlp-x-2", "Queued"), ("train-nlp-x-0", "Completed"),
                         ("train-nlp-x-00", "Failed")):
        aml.jobs[name] = {"name": name, "status": status, "created": name, "studio_url": ""}
    services["cost"] = ScopedCost({"rg-dev": [[412.5, "USD"]], "rg-nlp": [[80.0, "USD"], [1.25, "USD"]]})

    code, out, err = run_teams(project, services, capsys, "--json")
    assert code == 1, err  # trial could not be read
    rows = {row["stack"]: row for row in json.loads(out)}
    assert list(rows) == ["dev", "nlp", "trial"]
    for row in rows.values():
        assert list(row) == [*teams.JSON_KEYS, *teams.LIVE_JSON_KEYS]
    live = {stack: {key: row[key] for key in teams.LIVE_JSON_KEYS} for stack, row in rows.items()}
    assert live["dev"] == {"nodesNow": 3, "jobsRunning": 1, "spendThisMonth": 412.5, "spendCurrency": "USD",
                           "liveError": None}
    assert live["nlp"] == {"nodesNow": 4, "jobsRunning": 2, "spendThisMonth": 81.25, "spendCurrency": "USD",
                           "liveError": None}
    assert live["trial"] == {"nodesNow": None, "jobsRunning": None, "spendThisMonth": None, "spendCurrency": None,
                             "liveError": f"--outputs-dir {project / 'outputs'}: no trial.json (the JSON of "
                                          "`pulumi stack output --json --show-secrets --stack trial`)"}
    assert rows["dev"]["monthlyBudgetUsd"] == 1000 and rows["trial"]["backend"] == "batch"  # offline keys still there
    # What reached the services: Pools - Get, Nodes - List (the pool has Spot nodes: which are preempted) and one
    # Jobs - List on dev's account, answered as the REST spec says; the cluster's nodes at the AML seam; one query
    # per deployed stack's resource group.
    assert [(m, p) for m, p, _ in dev.requests] == [("GET", "/pools/gpu"), ("GET", "/pools/gpu/nodes"), ("GET", "/jobs")]
    assert violations(dev.endpoint.responses) == []
    assert ("count_nodes", "gpu-cluster") in aml.calls
    assert [scope for scope, _, _ in services["cost"].requests] == [
        f"subscriptions/{SUBSCRIPTION}/resourceGroups/rg-dev", f"subscriptions/{SUBSCRIPTION}/resourceGroups/rg-nlp"]


def test_live_table_shows_a_refused_service_in_one_line_and_still_reads_the_rest(project, services, capsys):
    add_stack(project, "trial", batch_outputs("trial"))
    add_stack(project, "vision", batch_outputs("vision"))
    services["batch"]["batrial.westeurope.batch.azure.com"] = batch_account("trial", 2, 1, {
        "train-trial-a-1": "active", "train-trial-a-0": "completed"})
    refused = services["batch"]["bavision.westeurope.batch.azure.com"] = batch_account("vision", 8, 0, {})
    refused.endpoint.refuse = REFUSED  # the account's firewall, or no Batch role
    services["cost"] = ScopedCost({"rg-trial": [[12.0, "USD"]], "rg-vision": [[5000.0, "USD"]]})

    code, out, err = run_teams(project, services, capsys)
    assert code == 1 and err == ""
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["STACK", "BACKEND", "REGION"]  # the offline table first, as without --live
    start = lines.index("Now (read from Azure):")
    assert lines[start + 1].split() == ["STACK", "NODES", "NOW", "JOBS", "RUNNING", "SPEND", "THIS", "MONTH"]
    trial = next(line for line in lines[start:] if line.startswith("trial "))
    vision = next(line for line in lines[start:] if line.startswith("vision "))
    assert trial.split() == ["trial", "3", "1", "12.00", "USD"]
    # vision: its budget (25000 in Pulumi.vision.yaml) beside the spend; the Batch account's 403 as one reason.
    assert vision.split()[:9] == ["vision", "-", "-", "5000.00", "USD", "of", "25000", "(20%)", "not"]
    assert "not read: the Batch account refused reading pool gpu (403 AuthorizationFailure)" in vision
    assert not any(len(line) > 120 for line in lines[start:start + 2])


def test_without_live_nothing_touches_the_network(project, capsys, monkeypatch):
    add_stack(project, "trial", batch_outputs("trial"))

    def refuse(*args, **kwargs):
        raise AssertionError("offline `teams` reached out")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(subprocess, "run", refuse)  # no `pulumi stack output`
    code = main(["teams", "--json", "--project-dir", str(project)], batch_factory=refuse, aml_factory=refuse,
                spend_factory=refuse)
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and [list(row) for row in rows] == [list(teams.JSON_KEYS)]  # no live key, not even null
    # --outputs-dir without --live: refused in one line, nothing read.
    assert main(["teams", "--outputs-dir", str(project / "outputs"), "--project-dir", str(project)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --outputs-dir is read by --live only: add --live, or leave --outputs-dir out"]


def test_without_the_pulumi_cli_a_stack_says_which_teams_flag_takes_its_outputs(project, services, capsys,
                                                                                 monkeypatch):
    add_stack(project, "trial")
    monkeypatch.setenv("PATH", str(project / "outputs"))  # no `pulumi` on it
    code = main(["teams", "--live", "--project-dir", str(project)], batch_factory=lambda endpoint: None,
                aml_factory=lambda outputs: services["aml"], spend_factory=lambda: None)
    out = capsys.readouterr().out
    assert code == 1 and "not read: the Pulumi CLI is not installed; install it, or pass --outputs-dir DIR " \
        "(DIR/trial.json) with the JSON of `pulumi stack output --json --show-secrets --stack trial`" in out, out
