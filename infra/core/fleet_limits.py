"""The fleet as one bill and one set of quotas (pure): what `teams` prints under its table and `new-team` says about
the group a new stack joins, before any Azure call.

Stacks are grouped by (subscription, region): the subscription is the stack file's `azure-native:subscriptionId`
(the Pulumi provider's own key; "unset" when a stack leaves it to the deployer's sign-in, which is then one group
whatever subscription each deployer happens to use), the region its `location`. Quotas are per subscription and
region, so that is the unit a platform team asks Azure for.

The limits, from "Batch service quotas and limits" (https://learn.microsoft.com/azure/batch/batch-quota-limit):
- "Azure Batch accounts per region per subscription": default 1-3 ("Default limits vary depending on the type of
  subscription"), maximum 50. Every Batch-backend stack declares one Batch account, so a group of more than one
  may be refused its account at `pulumi up`, and more than three will be unless the quota was raised.
- "Dedicated cores per Batch account": default 0-900 in Batch-service mode, reduced "in some cases ... to zero" for
  new accounts. In user-subscription mode and on Azure ML the subscription's per-family vCPU quota applies (two
  tiers: Total Regional vCPUs and the VM series' vCPUs,
  https://learn.microsoft.com/azure/quotas/per-vm-quota-requests); Azure publishes no default for the GPU
  families (the docs are silent; new subscriptions often show 0 in `az vm list-usage`). The usual ceiling used
  here is therefore the top of Batch's default range, 900 vCPUs: a group asking for more at maxNodes needs a
  quota request whatever the mode; below it, preflight (`python -m infra preflight`) reads the real figures.
- Spot nodes count against a quota of their own, one for every VM family ("Low-priority cores per Batch account":
  default 0-100; a subscription's Spot vCPUs likewise): a stack's Spot vCPUs are kept apart from the dedicated
  ones, and a group's Batch stacks asking for more than 100 at maxNodes are named.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from infra.core.skus import CATALOG

BATCH_QUOTA_DOC = "https://learn.microsoft.com/azure/batch/batch-quota-limit"
BATCH_ACCOUNTS_DEFAULT = (1, 3)  # "Azure Batch accounts per region per subscription": default 1-3 (max 50)
BATCH_ACCOUNTS_MAX = 50
USUAL_GPU_VCPUS = 900  # top of "Dedicated cores per Batch account" default 0-900; see the module docstring
USUAL_SPOT_VCPUS = 100  # top of "Low-priority cores per Batch account" default 0-100
UNSET = "unset"  # the group of stacks that set no azure-native:subscriptionId


@dataclass(frozen=True)
class Member:
    """One stack as the fleet's totals and limits see it (a row of `teams --json` that was not refused)."""
    stack: str
    subscription: str | None
    location: str
    backend: str
    gpu_sku: str
    max_nodes: int
    usd_per_hour_at_min: float
    usd_per_hour_at_max: float
    usd_per_month_at_min: float
    monthly_budget_usd: float | None
    spot: bool = False  # Spot nodes: their own quota (USUAL_SPOT_VCPUS), not the family's dedicated one

    @property
    def group(self) -> tuple[str, str]:
        return (self.subscription or UNSET, self.location)

    @property
    def gpus_at_max(self) -> int:
        return CATALOG[self.gpu_sku].gpus * self.max_nodes

    @property
    def vcpus_at_max(self) -> int:
        return CATALOG[self.gpu_sku].vcpus * self.max_nodes


def member_of_row(row: Mapping) -> Member:
    """A `teams` row (teams.JSON_KEYS) as a Member; the row must not be refused (row["error"] is None)."""
    return Member(row["stack"], row["subscription"], row["location"], row["backend"], row["gpuSku"],
                  row["maxNodes"], row["usdPerHourAtMin"], row["usdPerHourAtMax"], row["usdPerMonthAtMin"],
                  row["monthlyBudgetUsd"], bool(row.get("spot")))


def group_name(group: tuple[str, str]) -> str:
    subscription, region = group
    return f"subscription {subscription}, {region}"


@dataclass(frozen=True)
class Totals:
    stacks: int
    usd_per_month_idle: float  # every stack at minNodes for a month
    usd_per_hour_full: float  # every stack at maxNodes
    budgets_usd: float  # the sum of the monthlyBudgetUsd set
    without_budget: tuple[str, ...]  # stacks that set none
    gpus_by_group: dict[tuple[str, str], int]  # (subscription, region) -> GPUs at maxNodes
    # (subscription, region, quota family) -> (GPU model, GPUs, vCPUs) at maxNodes, dedicated: a vCPU quota is per
    # subscription (or Batch account), per region, per family
    # (https://learn.microsoft.com/azure/quotas/per-vm-quota-requests), so figures of two regions never add up
    by_family: dict[tuple[str, str, str], tuple[str, int, int]]
    spot: tuple[int, int]  # (GPUs, vCPUs) at maxNodes on Spot nodes, the fleet's
    spot_by_group: dict[tuple[str, str], tuple[int, int]] | None = None  # (subscription, region) -> Spot (GPUs, vCPUs)


def totals(members: Iterable[Member]) -> Totals:
    members = list(members)
    by_group: dict[tuple[str, str], int] = defaultdict(int)
    by_family: dict[tuple[str, str, str], list] = {}
    spot_by_group: dict[tuple[str, str], list] = {}
    for m in members:
        by_group[m.group] += m.gpus_at_max
        if m.spot:
            entry = spot_by_group.setdefault(m.group, [0, 0])
            entry[0] += m.gpus_at_max
            entry[1] += m.vcpus_at_max
            continue
        sku = CATALOG[m.gpu_sku]
        entry = by_family.setdefault((*m.group, sku.quota_family), [sku.gpu_model, 0, 0])
        entry[1] += m.gpus_at_max
        entry[2] += m.vcpus_at_max
    return Totals(len(members), sum(m.usd_per_month_at_min for m in members),
                  sum(m.usd_per_hour_at_max for m in members),
                  sum(m.monthly_budget_usd or 0 for m in members),
                  tuple(m.stack for m in members if m.monthly_budget_usd is None),
                  dict(sorted(by_group.items())), {k: tuple(v) for k, v in sorted(by_family.items())},
                  (sum(m.gpus_at_max for m in members if m.spot), sum(m.vcpus_at_max for m in members if m.spot)),
                  {k: tuple(v) for k, v in sorted(spot_by_group.items())})


def limit_warnings(members: Iterable[Member], only: tuple[str, str] | None = None) -> list[str]:
    """One line per (subscription, region) group over a default quota (only `only`'s group when given): more
    Batch-backend stacks than Batch accounts a subscription gets per region, or more GPU vCPUs at maxNodes than
    USUAL_GPU_VCPUS. Empty when every group is within them."""
    groups: dict[tuple[str, str], list[Member]] = defaultdict(list)
    for m in members:
        groups[m.group].append(m)
    low, high = BATCH_ACCOUNTS_DEFAULT
    lines = []
    for group, in_group in sorted(groups.items()):
        if only is not None and group != only:
            continue
        batch = [m.stack for m in in_group if m.backend == "batch"]
        if len(batch) > low:
            verdict = ("exceeds the default" if len(batch) > high else
                       "may exceed the default (it depends on the subscription type)")
            lines.append(f"{group_name(group)}: {len(batch)} Batch accounts ({', '.join(batch)}) {verdict} of "
                         f"{low}-{high} Batch accounts per region per subscription ({BATCH_QUOTA_DOC}): ask Azure "
                         f"for more (at most {BATCH_ACCOUNTS_MAX}), or give some of these stacks another "
                         "subscription or region (new-team --subscription/--location; docs/teams.md, layouts)")
        dedicated = [m for m in in_group if not m.spot]
        vcpus = sum(m.vcpus_at_max for m in dedicated)
        if vcpus > USUAL_GPU_VCPUS:
            lines.append(f"{group_name(group)}: {vcpus} GPU vCPUs at maxNodes "
                         f"({', '.join(f'{m.stack} {m.vcpus_at_max}' for m in dedicated)}) exceed the "
                         f"{USUAL_GPU_VCPUS} a subscription or Batch account usually gets by default "
                         f"({BATCH_QUOTA_DOC}): request the quota per VM family before `pulumi up` "
                         "(`python -m infra preflight` reads the real figures), or lower maxNodes")
        spot = [m for m in in_group if m.spot and m.backend == "batch"]
        spot_vcpus = sum(m.vcpus_at_max for m in spot)
        if spot_vcpus > USUAL_SPOT_VCPUS:
            lines.append(f"{group_name(group)}: {spot_vcpus} Spot vCPUs at maxNodes on Batch "
                         f"({', '.join(f'{m.stack} {m.vcpus_at_max}' for m in spot)}) exceed the "
                         f"{USUAL_SPOT_VCPUS} low-priority cores a Batch account gets at most by default "
                         f"({BATCH_QUOTA_DOC}): request them per account before relying on Spot, or lower maxNodes")
    return lines


def totals_lines(t: Totals, hours_per_month: int) -> list[str]:
    """What `teams` ends with."""
    unset = f" ({len(t.without_budget)} stack(s) set none: {', '.join(t.without_budget)})" if t.without_budget else ""
    return [f"Fleet ({t.stacks} stack(s)): idle (minNodes) {t.usd_per_month_idle:,.0f} USD a month ({hours_per_month} "
            f"h); at full size (maxNodes) {t.usd_per_hour_full:,.2f} USD an hour; monthly budgets "
            f"{t.budgets_usd:,.0f} USD{unset}",
            "  GPUs at maxNodes per (subscription, region):",
            *(f"    {group_name(g)}: {n}" for g, n in t.gpus_by_group.items()),
            "  GPUs at maxNodes per (subscription, region) and GPU family (a vCPU quota is per all three):",
            *(f"    {group_name((sub, region))}: {family} ({model}): {gpus} GPUs, {vcpus} vCPUs"
              for (sub, region, family), (model, gpus, vcpus) in t.by_family.items()),
            *(f"    {group_name(group)}: Spot, every family (one quota): {gpus} GPUs, {vcpus} vCPUs"
              for group, (gpus, vcpus) in (t.spot_by_group or {}).items())]
