"""The budget's arithmetic and the spend guard's decision: pure, so tests give them answers and check the verdict.

Month-to-date spend comes from the Cost Management query API (infra/backends/spend.py asks it with the real
azure-mgmt-costmanagement client); `spend_from_query` reads its answer, `guard` decides whether a job may start,
and says so in one line for `infra submit` (which refuses) and `infra status` (which shows it).
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The query `infra status` and `infra submit` send: this month's actual cost (what the invoice will show; the
# Budgets API evaluates actual cost too), summed over the scope, one row. QueryDefinition of
# https://learn.microsoft.com/rest/api/cost-management/query/usage: type ActualCost, timeframe MonthToDate, a Sum
# aggregation of the Cost column and no grouping or granularity, so the answer is one row of [cost, currency].
QUERY = {"type": "ActualCost", "timeframe": "MonthToDate",
         "dataset": {"aggregation": {"totalCost": {"name": "Cost", "function": "Sum"}}}}
# The cost column's name in the answer. The REST spec's examples (Azure/azure-rest-api-specs, cost-management
# stable/2023-03-01/examples/*Query*.json) name it after the cost column aggregated (PreTaxCost for type Usage, Cost
# for ActualCost); the docs do not say whether an aggregation's alias may appear instead, so both are read.
COST_COLUMNS = ("Cost", "PreTaxCost", "totalCost", "CostUSD", "PreTaxCostUSD")
CURRENCY_COLUMN = "Currency"


class SpendUnreadable(Exception):
    """Cost Management's answer is missing what the guard needs; `str()` says what."""


@dataclass(frozen=True)
class Spend:
    amount: float
    currency: str  # the billing currency Cost Management reports in


def spend_from_query(result: Mapping[str, Any]) -> Spend:
    """Month-to-date spend from a QueryResult (REST JSON: properties.columns [{name, type}], properties.rows). No
    rows: nothing billed yet this month. Rows of several currencies cannot be summed into one figure."""
    properties = result.get("properties") or {}
    columns = [c.get("name") for c in properties.get("columns") or []]
    rows = properties.get("rows") or []
    cost = next((columns.index(name) for name in COST_COLUMNS if name in columns), None)
    if cost is None:
        raise SpendUnreadable(f"the answer has no cost column (columns: {', '.join(map(str, columns)) or 'none'})")
    currency = columns.index(CURRENCY_COLUMN) if CURRENCY_COLUMN in columns else None
    currencies = {str(row[currency]) for row in rows} if currency is not None else set()
    if len(currencies) > 1:
        raise SpendUnreadable(f"the answer mixes currencies ({', '.join(sorted(currencies))})")
    try:
        amount = sum(float(row[cost]) for row in rows)
    except (TypeError, ValueError, IndexError):
        raise SpendUnreadable("a row's cost is not a number") from None
    return Spend(amount, currencies.pop() if currencies else "USD")


@dataclass(frozen=True)
class Verdict:
    allowed: bool  # whether `infra submit` may start a job
    line: str  # what status shows and submit prints (its refusal when not allowed); "" when there is no budget


def guard(budget_usd: float | None, spend: Spend | None, error: str | None = None) -> Verdict:
    """Whether a new job may start, given the stack's monthlyBudgetUsd and this month's spend so far (or why it
    could not be read). At or over budget: refused. Unreadable spend refuses too: a guard that lets jobs through
    whenever Cost Management cannot answer guards nothing."""
    if budget_usd is None:
        return Verdict(True, "")
    if error is not None or spend is None:
        return Verdict(False, f"cannot read this month's spend from Cost Management ({error or 'no answer'}), so "
                              f"the monthlyBudgetUsd {budget_usd:.2f} cannot be checked: {unreadable_fix(error)}")
    if spend.currency.upper() != "USD":
        return Verdict(False, f"this month's spend is reported in {spend.currency} ({spend.amount:.2f}), and "
                              f"monthlyBudgetUsd {budget_usd:.2f} is in US dollars: the guard cannot compare them; "
                              "remove monthlyBudgetUsd to submit without the guard")
    share = spend.amount / budget_usd * 100
    figures = f"month-to-date spend {spend.amount:.2f} USD of the {budget_usd:.2f} USD monthly budget ({share:.0f}%)"
    if spend.amount >= budget_usd:
        return Verdict(False, f"{figures}: no new job until next month, or raise monthlyBudgetUsd and `pulumi up`")
    return Verdict(True, f"{figures}; {budget_usd - spend.amount:.2f} USD left (Cost Management lags up to a day)")


# Why Cost Management may not answer, by the error code in its answer, and what to do: Troubleshoot common Cost
# Management errors (https://learn.microsoft.com/azure/cost-management-billing/costs/cost-management-error-codes)
# and who can see costs for which billing setup
# (https://learn.microsoft.com/azure/cost-management-billing/costs/assign-access-acm-data: an Enterprise Agreement
# shows costs to subscription users only once its administrator turns on "Account owners can view charges"; a CSP
# subscription only under a Microsoft Customer Agreement; a new subscription's data and budgets can take up to 48
# hours: https://learn.microsoft.com/azure/cost-management-billing/costs/tutorial-acm-create-budgets).
WITHOUT_GUARD = "or remove monthlyBudgetUsd from the stack to submit without the guard"
UNREADABLE_FIXES = (
    (r"AccountCostDisabled|IndirectCostDisabled|\b401\b",
     "the billing account does not show costs to subscription users: on an Enterprise Agreement its administrator "
     "turns on \"Account owners can view charges\" (a partner's, \"view charges\"); until then no role helps"),
    (r"SubscriptionTypeNotSupported|not supported|Unsupported",
     "Cost Management does not serve this subscription's offer (e.g. a CSP subscription not under a Microsoft "
     "Customer Agreement): a budget cannot be read here"),
    (r"\b404\b|NotFound",
     "Cost Management has no data for this scope yet (a new subscription waits up to 48 hours): retry later"),
    (r"AuthorizationFailed|RBACAccessDenied|\b403\b",
     "you need Reader (or Cost Management Reader) on the stack's resource group (teamMembers have it)"),
)


def unreadable_fix(error: str | None) -> str:
    """What to do when the spend cannot be read, by what Cost Management answered."""
    for pattern, fix in UNREADABLE_FIXES:
        if error and re.search(pattern, error):
            return f"{fix}; {WITHOUT_GUARD}"
    return ("retry; if it persists, check that you have Reader (or Cost Management Reader) on the stack's resource "
            f"group and that the billing account shows costs to subscription users, {WITHOUT_GUARD}")


def hours_bought(budget_usd: float, usd_per_hour: float) -> float:
    """How many hours at `usd_per_hour` the monthly budget pays for (inf when nothing bills by the hour)."""
    return budget_usd / usd_per_hour if usd_per_hour > 0 else math.inf
