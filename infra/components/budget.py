"""TeamBudget: the team's monthly Azure budget on its resource group, and the guard that stops spend when it runs out.

An Azure budget only notifies: it mails at thresholds and may call Azure Monitor action groups, and it acts on
cost data that arrives 8-24 hours late and is evaluated once a day ("Cost and usage data is typically available
within 8-24 hours and budgets are evaluated against these costs every 24 hours",
https://learn.microsoft.com/azure/cost-management-billing/costs/tutorial-acm-create-budgets). So, as in Azure's own
budget scenario (budget -> action group -> Logic App -> stop the spend:
https://learn.microsoft.com/azure/cost-management-billing/manage/cost-management-budget-scenario), the 100% actual
notification also calls an action group whose one receiver is a Logic App; the Logic App, with
its own managed identity, reads the budget and, once spend has reached it, makes the ARM call that scales the GPU
pool (or Azure ML cluster) to zero nodes. The scenario puts an
Automation runbook behind the Logic App; an HTTP action authenticated with the Logic App's managed identity calls
ARM directly (https://learn.microsoft.com/azure/logic-apps/authenticate-with-managed-identity), so no runbook,
Automation account or webhook secret is needed. The identity gets one role on the pool or cluster only
(security/resources.py's role-assignment-on-its-resource), and Cost Management Reader on the resource group: the workflow
reads the budget's current spend first and scales nothing while it is under the amount, since the trigger's URL is
readable by anyone with Reader (workflow_definition). `infra submit` refuses new jobs at or over the budget as well
(infra/core/budget.py), from Cost Management's figures, which lag the same way.

What the guard does not do: it does not act before Azure's figures reach the budget (up to a day late, so a
running job can overspend by up to a day at maxNodes: plan prints that figure), it does not delete anything, and
the next `pulumi up` restores the pool's autoscale formula (or the cluster's maxNodeCount), because it refreshes
first (Pulumi.yaml's `options.refresh: always`: without it Pulumi diffs against its state and never sees the stop):
raise the budget or wait for next month first. Until then `infra submit` names that `up` (batch/operate.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import pulumi
from pulumi_azure_native import consumption, logic, monitor

from infra.components import roles
from infra.core.config.sections import BudgetConfig

ARM = "https://management.azure.com"
TRIGGER = "budget"  # the Logic App's HTTP trigger, which the action group calls
# A budget's notification thresholds, percent of the amount (Notification.threshold, 0.01-1000, at most five per
# budget: https://learn.microsoft.com/rest/api/consumption/budgets/create-or-update). Mails at 80% and 100% of
# actual cost and at 100% of forecast cost; the guard runs at 100% of actual cost only (a forecast is a warning).
NOTIFICATIONS = (("Actual", 80, False), ("Actual", 100, True), ("Forecasted", 100, False))


class StopAction(NamedTuple):
    """What the guard does to stop spend: one ARM PATCH of `target_id` (API `api_version`) with `body`, by an
    identity holding `role` on `target_id` (a backend says which: Declared.budget_stop, infra/backends/declared.py)."""
    target_id: pulumi.Input[str]
    api_version: str
    body: dict[str, Any]
    role: str
    why: str  # the role assignment's description


def notification_name(kind: str, threshold: int) -> str:
    """A notification's key, as the Budgets API's examples write them (Actual_GreaterThan_80_Percent)."""
    return f"{kind}_GreaterThan_{threshold}_Percent"


def start_of_month(now: datetime) -> str:
    """The budget's start: the first of this month (the API requires the first of a month, and a start in the
    past only within the current time grain: BudgetTimePeriod in the REST reference above)."""
    return f"{now:%Y-%m}-01T00:00:00Z"


# The budget the guard reads before it acts (Budgets - Get, https://learn.microsoft.com/rest/api/consumption/budgets/get:
# properties.amount and properties.currentSpend.amount, as the REST spec's example Budget.json answers), in the API
# version pulumi-azure-native 3.29 declares the budget with.
BUDGET_API_VERSION = "2024-08-01"
# The Batch pool's stop, Pool - Update (PATCH .../batchAccounts/{account}/pools/{pool}), on Microsoft.Batch 2025-06-01:
# Batch retires "API versions prior to 2025-06-01" (https://github.com/Azure/Batch/issues/140, 2026-05-15), and this
# call is baked into the Logic App, where a retired version would fail only when the budget runs out. The guard's
# call is plain ARM, so it moves now, whatever version azure-native declares the pool with (batch/cluster.py); the
# body is the same in both versions (FixedScaleSettings: targetDedicatedNodes, targetLowPriorityNodes,
# nodeDeallocationOption), as the 2025-06-01 spec's example PoolUpdate_ResizePool.json sends it
# (specification/batch/resource-manager/Microsoft.Batch/stable/2025-06-01/examples; tests/infra/components/
# batch_pool_update_2025-06-01.json).
BATCH_POOL_UPDATE_API_VERSION = "2025-06-01"
SPENT = "@float(body('read_budget')?['properties']?['currentSpend']?['amount'])"
AMOUNT = "@float(body('read_budget')?['properties']?['amount'])"


def workflow_definition(target_id: str, api_version: str, body: dict[str, Any], budget_id: str) -> dict[str, Any]:
    """The Logic App's workflow (Workflow Definition Language,
    https://learn.microsoft.com/azure/logic-apps/logic-apps-workflow-definition-language): an HTTP request trigger
    (what an action group's Logic App receiver calls), a GET of the budget, and the ARM PATCH only if the budget's
    current spend has reached its amount (an If action: logic-apps-control-flow-conditional-statement), each call
    authenticated with the Logic App's system-assigned identity for ARM's audience.

    Why read first: the trigger's URL, signature included, is a plain property of the action group's Logic App
    receiver (monitor REST spec, ActionGroups - Get), so anyone with Reader on the resource group can call it. A call
    while spend is under the budget then reads the budget and stops nothing."""
    identity = {"type": "ManagedServiceIdentity", "audience": f"{ARM}/"}
    return {
        "$schema": "https://schema.management.azure.com/providers/Microsoft.Logic/schemas/2016-06-01/"
                   "workflowdefinition.json#",
        "contentVersion": "1.0.0.0",
        "triggers": {TRIGGER: {"type": "Request", "kind": "Http", "inputs": {"schema": {}}}},
        "actions": {
            "read_budget": {"type": "Http", "runAfter": {}, "inputs": {
                "method": "GET", "uri": f"{ARM}{budget_id}?api-version={BUDGET_API_VERSION}", "authentication": identity}},
            "when_spent": {
                "type": "If", "runAfter": {"read_budget": ["Succeeded"]},
                "expression": {"and": [{"greaterOrEquals": [SPENT, AMOUNT]}]},
                "actions": {"scale_to_zero": {
                    "type": "Http", "runAfter": {},
                    "inputs": {"method": "PATCH", "uri": f"{ARM}{target_id}?api-version={api_version}", "body": body,
                               "authentication": identity}}},
                "else": {"actions": {}}}},
        "outputs": {},
    }


@dataclass
class TeamBudgetArgs:
    budget: BudgetConfig  # the amount and who is mailed (monthly_usd is set: the caller declares none otherwise)
    resource_group_id: pulumi.Input[str]  # the budget's scope: what it counts
    resource_group_name: pulumi.Input[str]  # where the guard's Logic App and action group live
    location: str
    tags: dict[str, str]
    stop: StopAction
    start_date: str  # start_of_month(now)


class TeamBudget(pulumi.ComponentResource):
    def __init__(self, name: str, args: TeamBudgetArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("dltrain:budget:TeamBudget", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        stop = args.stop
        # The guard: a Consumption Logic App (billed per run: it runs when the budget runs out) with its own
        # identity, which is all it may act as.
        # The budget's name is set, so its ID is known before it exists: the workflow reads it, and the budget
        # calls the workflow (through the action group), which would otherwise be a cycle.
        budget_name = f"{name}-monthly"
        budget_id = pulumi.Output.concat(args.resource_group_id, "/providers/Microsoft.Consumption/budgets/",
                                         budget_name)
        self.workflow = logic.Workflow(
            f"{name}-guard", resource_group_name=args.resource_group_name, location=args.location, tags=args.tags,
            identity=logic.ManagedServiceIdentityArgs(type=logic.ManagedServiceIdentityType.SYSTEM_ASSIGNED),
            state=logic.WorkflowState.ENABLED,
            definition=pulumi.Output.all(stop.target_id, budget_id).apply(
                lambda v: workflow_definition(v[0], stop.api_version, stop.body, v[1])), opts=child)
        principal = self.workflow.identity.apply(lambda identity: identity.principal_id if identity else None)
        self.grant = roles.assign(
            f"{name}-guard-scale", role=stop.role, principal_id=principal,
            scope=stop.target_id, parent=self, description=f"budget guard: {stop.why}")
        # Cost Management Reader on the resource group: reads the team's budget (and cost), nothing else there.
        self.read_grant = roles.assign(
            f"{name}-guard-read", role=roles.COST_MANAGEMENT_READER, principal_id=principal,
            scope=args.resource_group_id, parent=self,
            description="budget guard: read the budget's current spend before stopping anything")
        # The trigger's URL carries its signature (sig=...): whoever holds it can run the guard, so it stays a
        # secret, as SAS values do.
        callback = logic.list_workflow_trigger_callback_url_output(
            resource_group_name=args.resource_group_name, workflow_name=self.workflow.name, trigger_name=TRIGGER,
            opts=pulumi.InvokeOutputOptions(parent=self))
        # Action groups are global resources; a budget calls them by ID (contactGroups, at subscription and
        # resource group scopes only). The short name (at most 12 characters) is what SMS and mails show.
        self.action_group = monitor.ActionGroup(
            f"{name}-stop", resource_group_name=args.resource_group_name, location="Global", tags=args.tags,
            group_short_name="budgetstop", enabled=True,
            logic_app_receivers=[monitor.LogicAppReceiverArgs(
                name="scale-to-zero", resource_id=self.workflow.id,
                callback_url=pulumi.Output.secret(callback.value), use_common_alert_schema=True)],
            opts=child)
        contacts = list(args.budget.contacts)
        self.budget = consumption.Budget(
            budget_name, budget_name=budget_name, scope=args.resource_group_id, amount=args.budget.monthly_usd,
            category=consumption.CategoryType.COST, time_grain=consumption.TimeGrainType.MONTHLY,
            time_period=consumption.BudgetTimePeriodArgs(start_date=args.start_date),
            notifications={
                notification_name(kind, threshold): consumption.NotificationArgs(
                    # GreaterThan: the operator the API recommends (EqualTo is to be deprecated).
                    enabled=True, operator=consumption.OperatorType.GREATER_THAN, threshold=threshold,
                    threshold_type=kind, contact_emails=contacts,
                    contact_groups=[self.action_group.id] if guard else None)
                for kind, threshold, guard in NOTIFICATIONS},
            # The start date is the month of the first `up`; later runs must not move it (nor replace the budget).
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["timePeriod"]))
        self.register_outputs({"budget": self.budget.id, "guard": self.workflow.id})

