"""plan on two things of batchPoolAllocation that `up` cannot fix (review findings 3 and 6): the mode is fixed when
the Batch account is created, so plan says that `up` replaces the account (and its pool and jobs) on a change; and in user-subscription mode the
pool's VMs may bill outside the resource group the budget counts, so plan says so, with the tag that finds them."""
import dataclasses

from infra.cli import plan
from infra.core import cost, naming
from infra.core.config import stack as config

BATCH_SERVICE = "f520d84c-3fd3-4cc8-88d4-2ed25b00d27a"


def _with(cfg, budget=None, **nodes):
    if budget is not None:
        cfg = dataclasses.replace(cfg, budget=dataclasses.replace(cfg.budget, monthly_usd=budget,
                                                                  contacts=("ml-team@example.com",)))
    return dataclasses.replace(cfg, nodes=dataclasses.replace(cfg.nodes, **nodes)) if nodes else cfg


def _user_subscription(cfg, budget=None):
    return _with(cfg, budget, pool_allocation="user-subscription", batch_service_object_id=BATCH_SERVICE)


def test_every_batch_plan_says_the_allocation_mode_is_fixed_at_the_accounts_creation():
    dev = config.from_stack_file("dev")
    for cfg, mode in ((dev, "batch-service"), (_user_subscription(dev), "user-subscription")):
        [line] = [line for line in plan.before_up(cfg) if line.startswith("batchPoolAllocation (")]
        assert line.startswith(f"batchPoolAllocation ({mode}) is fixed when the Batch account is created"), line
        assert "`pulumi up` deletes the Batch account with its pool and jobs and creates it again" in line
    assert not any(line.startswith("batchPoolAllocation (") for line in plan.before_up(config.from_stack_file("nlp")))


def test_a_user_subscription_budget_states_that_it_may_not_count_the_pools_vms():
    dev = config.from_stack_file("dev")
    cfg = _user_subscription(dev, budget=800.0)
    lines = plan._budget_lines(cfg, cost.estimate(cfg))
    account = naming.batch_account(cfg.team, cfg.stack, cfg.location, cfg.naming_subscription)
    gap = [line for line in lines if "user-subscription" in line]
    assert gap == [f"  {plan.user_subscription_budget_gap(cfg)}"]
    assert f"tag batchaccountname={account}" in gap[0] and "Budget in user-subscription mode" in gap[0]
    # the default mode, no budget, or Azure ML: the budget on the group counts the nodes, or there is none
    for other in (_with(dev, budget=800.0), _user_subscription(dev), config.from_stack_file("nlp")):
        assert plan.user_subscription_budget_gap(other) == ""
        assert not any("batchaccountname" in line for line in plan._budget_lines(other, cost.estimate(other)))
