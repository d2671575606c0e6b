"""The budget guard at the wire: `infra submit` and `infra status` of a stack with monthlyBudgetUsd read this
month's spend through the real azure-mgmt-costmanagement client from a local endpoint answering as the Cost
Management query API does (tests/infra/backends/cost_endpoint.py), and submit refuses at or over budget before
anything reaches Batch."""
import json
import shutil

import pytest

from infra import REPO_ROOT
from infra.backends import spend
from infra.cli.main import main
from tests.infra.backends.batch.test_operate import OUTPUTS, staged
from tests.infra.backends.cost_endpoint import CostEndpoint, spend_client

SUBSCRIPTION, GROUP = "00000000-0000-0000-0000-0000000000aa", "rg-dev-dev"


@pytest.fixture
def cost():
    endpoint = CostEndpoint()
    yield endpoint
    endpoint.close()


@pytest.fixture
def project(tmp_path):
    """The repo's Pulumi.yaml and dev stack with a 1000 USD budget, and the deployed stack's outputs."""
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    stack = (REPO_ROOT / "Pulumi.dev.yaml").read_text()
    (tmp_path / "Pulumi.dev.yaml").write_text(stack.rstrip("\n") + "\n  azure-dl-training:monthlyBudgetUsd: 1000\n"
                                              "  azure-dl-training:budgetContacts: [ml-platform@example.com]\n")
    (tmp_path / "outputs.json").write_text(json.dumps({**OUTPUTS, "subscriptionId": SUBSCRIPTION,
                                                       "resourceGroupName": GROUP}))
    return tmp_path


def run(verb, project, batch, cost, capsys, *extra):
    code = main([verb, "--stack", "dev", "--outputs", str(project / "outputs.json"), "--project-dir", str(project),
                 *extra], batch_factory=lambda endpoint: batch, staged=staged,
                spend_factory=lambda: spend_client(cost))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_query_is_this_months_actual_cost_of_the_resource_group(cost):
    cost.rows = [[412.5, "USD"]]
    client = spend_client(cost)
    try:
        assert spend.read(client, spend.scope(SUBSCRIPTION, GROUP)) == (spend.Spend(412.5, "USD"), None)
    finally:
        client.close()
    [(scope, api_version, body)] = cost.requests
    assert scope == f"subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}" and api_version
    assert body["type"] == "ActualCost" and body["timeframe"] == "MonthToDate"


@pytest.mark.parametrize("spent", [1000.0, 1500.25])
def test_submit_refuses_at_or_over_budget_with_the_figures_and_submits_nothing(project, batch, cost, capsys, spent):
    cost.rows = [[spent, "USD"]]
    code, out, err = run("submit", project, batch, cost, capsys)
    assert code == 1 and err.count("\n") == 1 and not batch.jobs and not batch.requests
    assert f"spend {spent:.2f} USD of the 1000.00 USD monthly budget" in err and "no new job" in err


def test_submit_under_budget_submits_and_says_what_is_left(project, batch, cost, capsys):
    cost.rows = [[250.0, "USD"], [0.5, "USD"]]
    code, out, err = run("submit", project, batch, cost, capsys, "--nodes", "1")
    assert code == 0, err
    assert len(batch.jobs) == 1 and "budget: month-to-date spend 250.50 USD" in out and "749.50 USD left" in out


def test_submit_refuses_when_cost_management_refuses(project, batch, cost, capsys):
    cost.refuse = (403, "AuthorizationFailed", "The client does not have authorization to perform action "
                                               "'Microsoft.CostManagement/query/action'")
    code, out, err = run("submit", project, batch, cost, capsys)
    assert code == 1 and "AuthorizationFailed" in err and "Reader" in err and not batch.jobs
    assert err.count("\n") == 1


@pytest.mark.parametrize("status, code, message, fix", [
    (401, "AccountCostDisabled", "Cost management data is disabled. Please contact your enrollment administrator.",
     '"Account owners can view charges"'),
    (400, "SubscriptionTypeNotSupported", "Subscription type is not supported.", "Microsoft Customer Agreement"),
    (404, "NotFound", "No data found for the scope.", "up to 48 hours"),
])
def test_submit_names_the_billing_setup_that_has_no_cost_management_not_a_role(project, batch, cost, capsys,
                                                                               status, code, message, fix):
    """Cost Management is missing for some billing setups (cost-management-error-codes, assign-access-acm-data):
    the refusal says which and how to go on, not that a role is missing."""
    cost.refuse = (status, code, message)
    code_, out, err = run("submit", project, batch, cost, capsys)
    assert code_ == 1 and err.count("\n") == 1 and not batch.jobs, err
    assert code in err and fix in err and "remove monthlyBudgetUsd" in err
    assert "you need Reader" not in err


def test_status_shows_spend_against_the_budget(project, batch, cost, capsys):
    from infra.backends.batch import operate
    from infra.backends.batch import spec as batch_spec
    from infra.backends.shared import StackOutputs, now_utc
    from infra.core.config import stack as config
    import io

    spec = batch_spec.job_inputs(config.from_stack_file("dev", project), StackOutputs.from_json(OUTPUTS))
    operate.submit(batch, spec, now_utc(), io.StringIO())
    cost.rows = [[1200.0, "USD"]]
    code, out, err = run("status", project, batch, cost, capsys)
    assert code == 0, err
    assert "budget: month-to-date spend 1200.00 USD of the 1000.00 USD monthly budget (120%)" in out


def test_a_stack_without_a_budget_never_asks_cost_management(batch, cost, capsys, tmp_path):
    (tmp_path / "outputs.json").write_text(json.dumps(OUTPUTS))
    code = main(["submit", "--stack", "dev", "--outputs", str(tmp_path / "outputs.json"), "--nodes", "1"],
                batch_factory=lambda endpoint: batch, staged=staged, spend_factory=lambda: spend_client(cost))
    assert code == 0 and not cost.requests and "budget:" not in capsys.readouterr().out  # the paths it prints say budget
