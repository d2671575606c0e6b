"""monthlyBudgetUsd under Pulumi's mocks: the Azure budget on the team's resource group (actual and forecast
notifications to budgetContacts) and its guard (action group -> Logic App -> one ARM PATCH that scales the pool or
cluster to zero, by the Logic App's own identity holding one role on that pool or cluster only)."""
import dataclasses

import pytest

from infra.cli import plan
from infra.core.config import stack as config, sections as config_sections
from infra.core.security import role_ids, resources as security
from infra.preview import offline
from tests.infra.conftest import AML_STACKS, BATCH_STACKS, NOW, evaluation_for

BUDGET = config_sections.BudgetConfig(monthly_usd=1500.5, contacts=("ml-platform@example.com", "lead@example.com"))
STACKS = [BATCH_STACKS[0], AML_STACKS[0]]
_cache: dict[str, offline.Evaluation] = {}


def with_budget(stack: str) -> offline.Evaluation:
    if stack not in _cache:
        cfg = dataclasses.replace(config.from_stack_file(stack), budget=BUDGET)
        _cache[stack] = offline.evaluate(cfg, now=NOW)
    return _cache[stack]


@pytest.fixture(params=STACKS)
def ev(request) -> offline.Evaluation:
    return with_budget(request.param)


def test_the_budget_counts_the_resource_group_monthly_and_mails_the_contacts(ev):
    budget = ev.one("azure-native:consumption:Budget").inputs
    assert budget["scope"] == ev.one("azure-native:resources:ResourceGroup").state["id"]
    assert budget["amount"] == 1500.5 and budget["category"] == "Cost" and budget["timeGrain"] == "Monthly"
    assert budget["timePeriod"] == {"startDate": "2026-11-01T00:00:00Z"}  # the first of NOW's month
    notifications = {(n["thresholdType"], n["threshold"]): n for n in budget["notifications"].values()}
    assert set(notifications) == {("Actual", 80), ("Actual", 100), ("Forecasted", 100)}
    for n in notifications.values():
        assert n["enabled"] and n["operator"] == "GreaterThan" and n["contactEmails"] == list(BUDGET.contacts)
    group = ev.one("azure-native:monitor:ActionGroup")
    # Only spend that has happened runs the guard; a forecast only mails.
    assert [k for k, n in notifications.items() if n.get("contactGroups")] == [("Actual", 100)]
    assert notifications[("Actual", 100)]["contactGroups"] == [group.state["id"]]


def test_the_action_group_runs_the_logic_app_that_scales_the_nodes_to_zero(ev):
    workflow = ev.one("azure-native:logic:Workflow")
    [receiver] = ev.one("azure-native:monitor:ActionGroup").inputs["logicAppReceivers"]
    assert receiver["resourceId"] == workflow.state["id"] and "/triggers/budget/" in receiver["callbackUrl"]
    assert workflow.inputs["identity"] == {"type": "SystemAssigned"} and workflow.inputs["state"] == "Enabled"
    definition = workflow.inputs["definition"]
    assert definition["triggers"]["budget"]["type"] == "Request"
    action = definition["actions"]["when_spent"]["actions"]["scale_to_zero"]
    request = action["inputs"]
    assert action["type"] == "Http" and request["method"] == "PATCH"
    assert request["authentication"] == {"type": "ManagedServiceIdentity", "audience": "https://management.azure.com/"}
    if ev.config.backend == "batch":
        pool = ev.one("azure-native:batch:BatchAccount").state["id"] + "/pools/" + \
            ev.one("azure-native:batch:Pool").state["name"]
        assert request["uri"] == f"https://management.azure.com{pool}?api-version=2025-06-01"
        assert request["body"]["properties"]["scaleSettings"] == {"fixedScale": {
            "targetDedicatedNodes": 0, "targetLowPriorityNodes": 0, "nodeDeallocationOption": "Requeue"}}
    else:
        compute = ev.one("azure-native:machinelearningservices:Workspace").state["id"] + "/computes/" + \
            ev.one("azure-native:machinelearningservices:Compute").state["name"]
        assert request["uri"] == f"https://management.azure.com{compute}?api-version=2025-12-01"
        assert request["body"]["properties"]["properties"]["scaleSettings"]["maxNodeCount"] == 0


def test_the_guards_identity_scales_the_pool_or_cluster_only_and_reads_cost(ev):
    workflow = ev.one("azure-native:logic:Workflow")
    grants = [a.inputs for a in ev.of_type("azure-native:authorization:RoleAssignment")
              if a.inputs["principalId"] == workflow.state["identity"]["principalId"]]
    [read] = [g for g in grants if g["roleDefinitionId"].endswith(role_ids.COST_MANAGEMENT_READER)]
    assert read["scope"] == ev.one("azure-native:resources:ResourceGroup").state["id"]
    [grant] = [g for g in grants if g is not read]
    uri = workflow.inputs["definition"]["actions"]["when_spent"]["actions"]["scale_to_zero"]["inputs"]["uri"]
    assert uri.startswith("https://management.azure.com" + grant["scope"] + "?")  # the resource it PATCHes
    role = role_ids.BATCH_ACCOUNT_CONTRIBUTOR if ev.config.backend == "batch" else role_ids.AZUREML_COMPUTE_OPERATOR
    assert grant["roleDefinitionId"].endswith(role) and grant["principalType"] == "ServicePrincipal"


def test_every_check_passes_with_a_budget_and_the_trigger_url_is_never_shown(ev):
    text, secure = plan.render(ev)
    assert secure, [line for line in text.splitlines() if "FAIL" in line]
    assert offline.MOCK_SAS_SIGNATURE not in text
    for resource in ("Workflow", "ActionGroup"):  # taggable: they carry the team's tags
        assert ev.one(f"azure-native:{'logic' if resource == 'Workflow' else 'monitor'}:{resource}").inputs["tags"][
            "team"] == ev.config.team


@pytest.mark.parametrize("role", sorted(role_ids.RESOURCE_ROLES))
def test_the_guards_roles_are_refused_anywhere_wider_than_one_pool_or_cluster(role):
    base = "/subscriptions/s/resourceGroups/rg"
    ok = {role_ids.BATCH_ACCOUNT_CONTRIBUTOR: "/providers/Microsoft.Batch/batchAccounts/ba/pools/gpu",
          role_ids.AZUREML_COMPUTE_OPERATOR: "/providers/Microsoft.MachineLearningServices/workspaces/w/computes/gpu",
          role_ids.KEY_VAULT_SECRETS_OFFICER: "/providers/Microsoft.KeyVault/vaults/kv"}  # a Batch account's vault
    wider = ["", "/providers/Microsoft.Batch/batchAccounts/ba", "/providers/Microsoft.MachineLearningServices/"
             "workspaces/w", "/providers/Microsoft.Storage/storageAccounts/st"]

    def failing(scope):
        props = {"scope": base + scope, "principalId": "p", "principalType": "ServicePrincipal",
                 "roleDefinitionId": f"/subscriptions/s/providers/Microsoft.Authorization/roleDefinitions/{role}"}
        return {f.check.name for f in security.apply_checks([security.Subject(
            "azure-native:authorization:RoleAssignment", props)]) if f.message}

    check = "role-assignment-on-its-resource"
    assert check not in failing(ok[role])
    for scope in wider:
        assert check in failing(scope), scope
    other = next(s for r, s in ok.items() if r != role)  # the other backend's resource type
    assert check in failing(other)


def test_no_budget_declares_neither_budget_nor_guard():
    ev = evaluation_for(BATCH_STACKS[0])
    assert ev.config.budget.monthly_usd is None
    assert not [r for r in ev.resources if r.type.split(":")[1] in ("consumption", "logic")]


def test_plan_shows_the_budget_beside_the_hourly_cost_and_the_hours_it_buys_at_max_nodes(ev):
    from infra.core import cost

    text, _ = plan.render(ev)
    lines = text.splitlines()
    at_max = cost.estimate(ev.config).at(ev.config.nodes.max_nodes)
    first = next(i for i, line in enumerate(lines) if line.startswith("  monthly budget: 1500.50 (monthlyBudgetUsd)"))
    assert lines[first - 1].startswith(f"  at maxNodes={ev.config.nodes.max_nodes}: {at_max:.2f} per hour")
    assert "ml-platform@example.com, lead@example.com" in lines[first]
    assert lines[first + 1].startswith(f"  it buys {1500.5 / at_max:.1f} hours at maxNodes={ev.config.nodes.max_nodes}")
    assert "lags up to a day" in lines[first + 2] and f"{24 * at_max:.0f} (24 hours" in lines[first + 2]
    # Day 2: the stop outlives the month until an `up` that refreshes (Pulumi.yaml options.refresh: always).
    assert lines[first + 3].startswith("  the nodes stay at zero until `pulumi up`") and "refreshes" in lines[first + 3]


def test_plan_says_when_a_stack_has_no_budget():
    text, _ = plan.render(evaluation_for(BATCH_STACKS[0]))
    assert "  monthly budget: none (monthlyBudgetUsd unset" in text


def _walk(document, expression: str):
    """The value the workflow's expression `@float(body('read_budget')?['a']?['b'])` reads from a Budgets - Get answer."""
    import re

    value = document
    for key in re.findall(r"\?\['([^']+)'\]", expression):
        value = value[key]
    return float(value)


def test_the_guard_reads_the_budget_first_and_scales_only_once_spend_reaches_it(ev):
    """Anyone with Reader can read the trigger URL (the action group's receiver): a call while spend is under the
    budget must stop nothing. The GET goes to this stack's budget; the condition reads the two figures where
    Budgets - Get answers them (the REST spec's example Budget.json, 2024-08-01: amount 100.65, currentSpend 80.89)."""
    from infra.components import budget as guard

    definition = ev.one("azure-native:logic:Workflow").inputs["definition"]
    read, when = definition["actions"]["read_budget"], definition["actions"]["when_spent"]
    stack_budget = ev.one("azure-native:consumption:Budget")
    group = ev.one("azure-native:resources:ResourceGroup").state["id"]
    assert read["inputs"]["method"] == "GET" and read["runAfter"] == {}
    assert read["inputs"]["uri"] == (f"https://management.azure.com{group}/providers/Microsoft.Consumption/budgets/"
                                     f"{stack_budget.inputs['budgetName']}?api-version=2024-08-01")
    assert when["type"] == "If" and when["runAfter"] == {"read_budget": ["Succeeded"]} and when["else"] == {"actions": {}}
    [[operator, (spent, amount)]] = [next(iter(c.items())) for c in when["expression"]["and"]]
    example = {"properties": {"amount": 100.65, "currentSpend": {"amount": 80.89, "unit": "USD"}}}
    assert operator == "greaterOrEquals" and (spent, amount) == (guard.SPENT, guard.AMOUNT)
    assert not _walk(example, spent) >= _walk(example, amount)  # under budget: the PATCH does not run
    example["properties"]["currentSpend"]["amount"] = 100.65
    assert _walk(example, spent) >= _walk(example, amount)  # reached: it does


def _shape(value):
    """A JSON value's keys and leaf types, recursively (what the spec's example and a request must share)."""
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    # JSON has one number type (the engine hands numbers over as doubles: 0 arrives as 0.0).
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__


def test_the_batch_guards_patch_is_pool_update_as_the_2025_06_01_spec_example_sends_it():
    """Batch retires API versions before 2025-06-01 (Azure/Batch issue 140): the guard's Pool - Update is on
    2025-06-01, to the path of the spec's example PoolUpdate_ResizePool.json (its response's id), with a body whose
    every key is one the example sends, of the same type, at the same place."""
    import json
    from pathlib import Path

    example = json.loads((Path(__file__).parent / "batch_pool_update_2025-06-01.json").read_text())
    ev = with_budget(BATCH_STACKS[0])
    request = ev.one("azure-native:logic:Workflow").inputs["definition"]["actions"]["when_spent"]["actions"][
        "scale_to_zero"]["inputs"]
    path, _, query = request["uri"].removeprefix("https://management.azure.com").partition("?")
    assert query == f"api-version={example['parameters']['api-version']}"
    example_path = example["responses"]["200"]["body"]["id"].split("/")
    ours = path.split("/")
    assert len(ours) == len(example_path)
    # The same path template: the example's literal segments where it has literals, names where it has names.
    names = {example["parameters"][k] for k in ("subscriptionId", "resourceGroupName", "accountName", "poolName")}
    assert [o if e in names else e for o, e in zip(ours, example_path)] == ours
    sent, allowed = _shape(request["body"]), _shape(example["parameters"]["parameters"])
    fixed, fixed_allowed = sent["properties"]["scaleSettings"]["fixedScale"], \
        allowed["properties"]["scaleSettings"]["fixedScale"]
    assert fixed and all(fixed_allowed.get(key) == kind for key, kind in fixed.items()), (fixed, fixed_allowed)
    assert sent == {"properties": {"scaleSettings": {"fixedScale": fixed}}}
