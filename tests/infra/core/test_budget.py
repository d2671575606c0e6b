"""monthlyBudgetUsd and budgetContacts: what the config refuses (at plan, one line naming the key), and the spend
guard's decision against given Cost Management answers (under, at and over budget; no budget; unreadable)."""
import math

import pytest

from infra import REPO_ROOT
from infra.core import budget
from infra.core.config import stack as config, schema as config_schema, sections as config_sections
from infra.core.budget import Spend

BASE = {"allowedIpRanges": ["20.50.1.7"]}
CONTACTS = ["ml-platform@example.com"]


@pytest.mark.parametrize("values,key,message", [
    ({"monthlyBudgetUsd": "0", "budgetContacts": CONTACTS}, "monthlyBudgetUsd", "0 is outside 1-1000000 USD"),
    ({"monthlyBudgetUsd": "0.50", "budgetContacts": CONTACTS}, "monthlyBudgetUsd", "outside 1-1000000"),
    ({"monthlyBudgetUsd": "-100", "budgetContacts": CONTACTS}, "monthlyBudgetUsd", "not an amount in US dollars"),
    ({"monthlyBudgetUsd": "$1500", "budgetContacts": CONTACTS}, "monthlyBudgetUsd", "without sign or currency"),
    ({"monthlyBudgetUsd": "1e3", "budgetContacts": CONTACTS}, "monthlyBudgetUsd", "such as 1500 or 1500.50"),
    ({"monthlyBudgetUsd": "1500"}, "budgetContacts", "is empty; a budget needs at least one email"),
    ({"monthlyBudgetUsd": "1500", "budgetContacts": ["ml platform"]}, "budgetContacts",
     "'ml platform' is not an email"),
    ({"monthlyBudgetUsd": "1500", "budgetContacts": ["a@b.com, c@d.com"]}, "budgetContacts", "one address per item"),
    ({"budgetContacts": CONTACTS}, "budgetContacts", "monthlyBudgetUsd is not; set monthlyBudgetUsd"),
])
def test_bad_budgets_are_refused_naming_the_key_and_the_fix(values, key, message):
    with pytest.raises(config_schema.ConfigError) as raised:
        config.parse("x", {**BASE, **values})
    assert raised.value.key == key and message in str(raised.value) and "\n" not in str(raised.value)


def test_a_budget_of_the_stack_file_reaches_the_program_as_the_engine_passes_it(tmp_path):
    """A YAML number in the stack file (1500, 1500.5) is text for the program, as for every string key."""
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.t.yaml").write_text("config:\n  azure-dl-training:allowedIpRanges: [20.50.1.7]\n"
                                            "  azure-dl-training:monthlyBudgetUsd: 1500.5\n"
                                            "  azure-dl-training:budgetContacts: [ml-platform@example.com]\n")
    cfg = config.from_stack_file("t", tmp_path)
    assert cfg.budget == config_sections.BudgetConfig(monthly_usd=1500.5, contacts=("ml-platform@example.com",))
    assert config.from_stack_file("dev").budget.monthly_usd is None  # no key: no budget


def answer(*rows, columns=("Cost", "Currency")):
    return {"properties": {"columns": [{"name": c, "type": "Number"} for c in columns], "rows": list(rows)}}


def test_spend_is_the_sum_of_the_cost_column_in_its_currency():
    assert budget.spend_from_query(answer([12.5, "USD"], [0.25, "USD"])) == Spend(12.75, "USD")
    assert budget.spend_from_query(answer()) == Spend(0, "USD")  # nothing billed yet this month
    assert budget.spend_from_query(answer([3.0, "USD", 20261101], columns=("PreTaxCost", "Currency", "UsageDate"))
                                   ) == Spend(3.0, "USD")
    with pytest.raises(budget.SpendUnreadable, match="no cost column"):
        budget.spend_from_query(answer([1, "USD"], columns=("UsageDate", "Currency")))
    with pytest.raises(budget.SpendUnreadable, match="mixes currencies"):
        budget.spend_from_query(answer([1, "USD"], [1, "EUR"]))


@pytest.mark.parametrize("spent,allowed,words", [
    (499.99, True, "month-to-date spend 499.99 USD of the 1000.00 USD monthly budget (50%); 500.01 USD left"),
    (1000.0, False, "spend 1000.00 USD of the 1000.00 USD monthly budget (100%): no new job until next month"),
    (1234.5, False, "spend 1234.50 USD of the 1000.00 USD monthly budget (123%): no new job"),
])
def test_the_guard_refuses_at_and_over_budget_and_says_the_figures(spent, allowed, words):
    verdict = budget.guard(1000.0, Spend(spent, "USD"))
    assert verdict.allowed is allowed and words in verdict.line


def test_the_guard_without_a_budget_lets_every_job_through_and_says_nothing():
    assert budget.guard(None, None, "never asked") == budget.Verdict(True, "")


def test_the_guard_refuses_when_spend_cannot_be_read_or_compared():
    refused = budget.guard(1000.0, None, "403: (AuthorizationFailed) no access")
    assert not refused.allowed and "403: (AuthorizationFailed)" in refused.line and "remove monthlyBudgetUsd" in \
        refused.line
    other = budget.guard(1000.0, Spend(10.0, "EUR"))
    assert not other.allowed and "reported in EUR" in other.line


def test_hours_bought_at_a_price():
    assert budget.hours_bought(1000.0, 40.0) == 25.0 and budget.hours_bought(1000.0, 0.0) == math.inf


def test_plan_stops_a_bad_budget_in_one_line_naming_the_key(tmp_path, capsys):
    from infra.cli.main import main

    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.t.yaml").write_text("config:\n  azure-dl-training:allowedIpRanges: [20.50.1.7]\n"
                                            "  azure-dl-training:monthlyBudgetUsd: 0\n"
                                            "  azure-dl-training:budgetContacts: [ml-platform@example.com]\n")
    assert main(["plan", "--stack", "t", "--project-dir", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert err == ("error: Pulumi.t.yaml: config key 'monthlyBudgetUsd': 0 is outside 1-1000000 USD; give a budget "
                   "above zero (leave the key out for no budget)\n") and not out
