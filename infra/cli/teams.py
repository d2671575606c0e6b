"""The stacks of this folder as a platform engineer running them for many teams sees them: one stack file per team
(Pulumi.<team>.yaml).

`teams` evaluates every stack file offline, as `plan` does, one row each (or JSON); stacks whose configs differ
only in new-team's own keys (IDENTITY_KEYS) share one evaluation of the program; with --live it reads each deployed
stack's nodes, jobs and spend. `plan`, `teams`, `new-team` (infra/cli/new_team.py) and `ci-roles` read each stack
file and Pulumi.yaml once (Fleet), so a fleet of N stacks costs N reads, not N squared.
`address_overlap` is `plan`'s check that no two stack files here share addresses: VNets whose address spaces overlap
cannot be peered, so cannot reach each other or a shared hub (Azure's peering sample: "the networks' address spaces
must not overlap", https://azure.microsoft.com/resources/samples/network-dotnet-manage-network-peering/), and each
stack file reserves only the ranges its author knew of.
"""
from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.core import budget, cost, fleet_limits
from infra.core.config import stack as config, shared_images
from infra.core.config.stack import PROJECT, StackConfig
from infra.core.config.schema import ConfigError
from infra.core.config.engine import EngineConfig

# The keys new-team writes for each team (its name and its addresses): stacks whose configs differ in these alone
# declare the same resources but for names and addresses, so `teams` evaluates the program once for all of them
# (test_fleet_scale.py checks that their verdicts agree).
IDENTITY_KEYS = ("team", "addressSpace", "computeSubnet", "storageSubnet", "reservedAddressSpaces")


class Fleet:
    """Every stack file of a folder, each read once, and Pulumi.yaml once: what `plan`, `teams` and `new-team`
    read, so that they cost one read per stack file whatever the size of the fleet. A file the engine would
    refuse is kept as its ConfigError (its own plan names it)."""

    def __init__(self, root: Path):
        self.root = root
        self.project = config.load_project(root)
        self.engines: dict[str, EngineConfig | ConfigError] = {}
        for stack in config.stack_names(root):
            try:
                self.engines[stack] = config.engine_config(stack, root, self.project)
            except ConfigError as err:
                self.engines[stack] = err
        self._spaces: dict[str, tuple] | None = None
        self._parsed: dict[str, StackConfig | ConfigError] = {}

    def engine(self, stack: str) -> EngineConfig:
        """The stack's merged config, or its ConfigError raised (a stack not here: the error naming those that are)."""
        found = self.engines.get(stack)
        if found is None:
            return config.engine_config(stack, self.root, self.project)  # raises "no Pulumi.STACK.yaml in ..."
        if isinstance(found, ConfigError):
            raise found
        return found

    def parsed(self, stack: str) -> StackConfig:
        """The stack file's config by its own checks alone (config.from_engine_config), or its ConfigError raised;
        parsed once per stack however many times a command asks (new-team asks for every stack's twice)."""
        if stack not in self._parsed:
            try:
                self._parsed[stack] = config.from_engine_config(stack, self.engine(stack), self.project)
            except ConfigError as err:
                self._parsed[stack] = err
        found = self._parsed[stack]
        if isinstance(found, ConfigError):
            raise found
        return found

    def config(self, stack: str) -> StackConfig:
        """The stack file's config, refused as `plan` refuses it (the config's own checks, then an address space
        shared with another stack file here)."""
        cfg = self.parsed(stack)
        borrowed = borrowed_team(cfg, self.teams())
        if borrowed:
            raise borrowed
        overlap = address_overlap(cfg, self.spaces())
        if overlap:
            raise overlap
        return cfg

    def teams(self) -> dict[str, str]:
        """Each readable stack file's `team` value, in stack order."""
        return {stack: values.of_project(PROJECT).get("team", "") for stack, values in self.engines.items()
                if not isinstance(values, ConfigError)}

    def spaces(self) -> dict[str, tuple[ipaddress.IPv4Network, tuple[ipaddress.IPv4Network, ...]]]:
        """Each readable stack file's addressSpace and reservedAddressSpaces as `up` would receive them (Pulumi.yaml's
        defaults merged in), in stack order; those that cannot be read are left out (their own plan refuses them)."""
        if self._spaces is None:
            self._spaces = {}
            for stack, engine_values in self.engines.items():
                if isinstance(engine_values, ConfigError):
                    continue
                try:
                    self._spaces[stack] = _spaces(engine_values.of_project(PROJECT))
                except (ValueError, KeyError):
                    continue
        return self._spaces


def _spaces(values: Mapping[str, str]) -> tuple[ipaddress.IPv4Network, tuple[ipaddress.IPv4Network, ...]]:
    """A stack's addressSpace and reservedAddressSpaces from its merged config; ValueError or KeyError where a value
    is malformed."""
    reserved = tuple(ipaddress.IPv4Network(r) for r in json.loads(values["reservedAddressSpaces"]))
    return ipaddress.IPv4Network(values["addressSpace"]), reserved


def borrowed_team(cfg: StackConfig, teams: Mapping[str, str]) -> ConfigError | None:
    """The refusal of a stack file copied by hand that kept another team's `team`: its value is another stack's name
    and that stack's own team, while this stack's name is neither it nor TEAM-something (a team's second stack, such
    as vision-dev, keeps `team: vision`); every tag, budget and role of this stack would name the other team."""
    if cfg.team == cfg.stack or cfg.stack.startswith(f"{cfg.team}-"):
        return None
    if teams.get(cfg.team) == cfg.team:
        return ConfigError("team", f"{cfg.team!r} is the team of stack {cfg.team} (Pulumi.{cfg.team}.yaml), so this "
                                   f"stack's tags, budget and roles would all name {cfg.team}; set team: {cfg.stack} "
                                   f"(a copied file keeps the original's: `python -m infra new-team {cfg.stack}` "
                                   f"writes a new team's file), or name the stack {cfg.team}-SOMETHING if it is "
                                   f"{cfg.team}'s")
    return None


def address_overlap(cfg: StackConfig, spaces: Mapping[str, tuple]) -> ConfigError | None:
    """The refusal when another stack's addressSpace in `spaces` (Fleet.spaces) overlaps this stack's, else None."""
    mine = cfg.network.address_space
    for other, (space, _) in spaces.items():
        if other != cfg.stack and mine.overlaps(space):
            return ConfigError("addressSpace", f"{mine} (stack {cfg.stack}) overlaps {space} of stack {other} "
                                               f"(Pulumi.{other}.yaml); give each stack in this folder its own range "
                                               f"(`python -m infra new-team` picks a free one) and list the others' "
                                               "in reservedAddressSpaces")
    return None


def stack_config(stack: str, root: Path) -> StackConfig:
    """What `plan` evaluates: the stack file's config, refused as `plan` refuses it (Fleet.config)."""
    return Fleet(root).config(stack)


def shape(engine_values: EngineConfig) -> tuple:
    """What the program's resources and verdicts depend on besides names and addresses: the stack's merged config
    without IDENTITY_KEYS."""
    return tuple(sorted((key, text) for key, text in engine_values.values.items()
                        if key.partition(":")[2] not in IDENTITY_KEYS or not key.startswith(f"{PROJECT}:")))


# --- teams ------------------------------------------------------------------------------------------------------

# `teams --json`: one object per stack file, these keys in this order (the --help lists them).
JSON_KEYS = {
    "stack": "the stack name (Pulumi.<stack>.yaml)",
    "team": "the team key",
    "backend": "batch or azureml",
    "location": "the Azure region",
    "subscription": "the stack file's azure-native:subscriptionId, or null when unset (the deployer's default)",
    "gpuSku": "the GPU VM size",
    "minNodes": "minNodes", "maxNodes": "maxNodes",
    "spot": "true when the GPU nodes are Spot (their own vCPU quota, one for every family)",
    "images": "per training image, \"built\" (Docker at `up`) or where sharedImages imports it from "
              "(<platform registry>/<repository>@sha256:...)",
    "usdPerHourAtMin": "estimated USD per hour at minNodes",
    "usdPerHourAtMax": "estimated USD per hour at maxNodes",
    "usdPerMonthAtMin": f"usdPerHourAtMin x {cost.HOURS_PER_MONTH} hours",
    "monthlyBudgetUsd": "the stack's monthlyBudgetUsd, or null when it sets none",
    "budgetHoursAtMax": "hours at maxNodes the monthly budget pays for (usdPerHourAtMax), or null",
    "priceRegion": "the region the prices are for (East US list prices)",
    "failing": "the names of the security checks and Azure service rules that fail ([] when all pass)",
    "placeholders": "values plan accepts but `pulumi up` refuses, each with its fix",
    "error": "why the stack file is refused (one line, as plan says it), or null; the other keys are then null",
}


def team_rows(root: Path) -> list[dict]:
    """Every stack file as `teams` shows it, in stack order: refused as plan refuses it, else its columns from its
    own config and its failing checks from the program evaluated as plan evaluates it, once per distinct config
    (`shape`: stacks apart in team and addresses only share one evaluation). Each file is read once (Fleet)."""
    from infra.cli import plan
    from infra.preview import offline

    fleet = Fleet(root)
    failing_of: dict[tuple, list[str]] = {}  # shape -> the names of the checks that fail
    rows = []
    for stack in fleet.engines:
        row = dict.fromkeys(JSON_KEYS)
        row.update(stack=stack, failing=[], placeholders=[])
        rows.append(row)
        try:
            cfg = fleet.config(stack)
        except ConfigError as err:
            row.update(error=f"Pulumi.{stack}.yaml: {err}", failing=None, placeholders=None)
            continue
        key = shape(fleet.engine(stack))
        if key not in failing_of:
            evaluation = offline.evaluate(cfg)
            failing_of[key] = [name for verdict, name, _ in plan.verdicts(evaluation) + plan.service_verdicts(evaluation)
                               if verdict == "FAIL"]
        estimate = cost.estimate(cfg)
        row.update(team=cfg.team, backend=cfg.backend, location=cfg.location, subscription=cfg.subscription_id,
                   gpuSku=cfg.nodes.gpu_sku,
                   minNodes=cfg.nodes.min_nodes, maxNodes=cfg.nodes.max_nodes, spot=cfg.nodes.spot,
                   images=shared_images.row_images(cfg.registry.frameworks, cfg.registry.shared_images),
                   usdPerHourAtMin=round(estimate.at(cfg.nodes.min_nodes), 2),
                   usdPerHourAtMax=round(estimate.at(cfg.nodes.max_nodes), 2),
                   usdPerMonthAtMin=round(cost.monthly(estimate.at(cfg.nodes.min_nodes)), 2),
                   monthlyBudgetUsd=cfg.budget.monthly_usd,
                   budgetHoursAtMax=None if cfg.budget.monthly_usd is None else round(
                       budget.hours_bought(cfg.budget.monthly_usd, estimate.at(cfg.nodes.max_nodes)), 1),
                   priceRegion=cost.PRICES_REGION, failing=list(failing_of[key]),
                   placeholders=list(cfg.placeholders))
    return rows


# `teams --live --json`: these keys follow JSON_KEYS in each object (without --live they are absent).
LIVE_JSON_KEYS = {
    "nodesNow": "GPU nodes the stack holds now that bill: Batch, the pool's currentDedicatedNodes + "
                "currentLowPriorityNodes less the preempted Spot nodes (they no longer bill); Azure ML, the compute "
                "cluster's nodes; null when not read",
    "jobsRunning": "the stack's training jobs not ended: Batch jobs in state active, Azure ML jobs in no terminal "
                   "state; null when not read",
    "spendThisMonth": "month-to-date actual cost of the stack's resource group (Cost Management; lags up to a day), "
                      "or null when not read",
    "spendCurrency": "the currency Cost Management reports spendThisMonth in, or null",
    "liveError": "why a live figure could not be read (outputs, the job service or Cost Management, one line), or "
                 "null when all were",
}


@dataclass(frozen=True)
class LiveSources:
    """How `teams --live` reaches a deployed stack: `python -m infra` builds them from Azure's clients, the tests
    give theirs."""
    outputs: Callable[[str, tuple[str, ...]], Any]  # (stack, StackOutputs fields it must hold) -> StackOutputs
    connect: Mapping[str, Callable[[Any], Any]]  # backend name -> (outputs -> its service, as the job verbs get it)
    spend: Callable[[Any], tuple[Any, str | None]]  # outputs -> (Spend, None), or (None, why not)


def _reason(err: Exception) -> str:
    """One line for a failed live read: our errors are one line already; an Azure SDK error (refused,
    unreachable, not signed in) by its status and first line."""
    from infra.backends.shared import JobError, status_line
    from training.data.transfer import redact
    from training.errors import UsageError

    return redact(str(err) if isinstance(err, (JobError, UsageError)) else status_line(err))


def live(row: dict, sources: LiveSources) -> dict:
    """The LIVE_JSON_KEYS of a stack's row, read from Azure: its nodes and running jobs from its job service, its
    spend from Cost Management. A read that fails leaves its figures null and says why in liveError; the others
    are still read, and so are the other stacks."""
    from azure.core.exceptions import AzureError

    from infra.backends import RunsJobs, backend
    from infra.backends.shared import JobError
    from training.errors import UsageError

    failed = (JobError, UsageError, AzureError)
    found = dict.fromkeys(LIVE_JSON_KEYS)
    if row["error"]:
        return found  # a refused stack file: its `error` says why; there is no backend to ask
    chosen: RunsJobs = backend(row["backend"])
    try:
        outputs = sources.outputs(row["stack"], chosen.live_outputs)
    except failed as err:
        found["liveError"] = _reason(err)
        return found
    reasons = []
    try:
        found["nodesNow"], found["jobsRunning"] = chosen.usage_now(sources.connect[chosen.name](outputs), outputs,
                                                                   row["stack"])
    except failed as err:
        reasons.append(_reason(err))
    try:
        spend, error = sources.spend(outputs)
    except failed as err:
        spend, error = None, _reason(err)
    if spend is not None:
        found.update(spendThisMonth=round(spend.amount, 2), spendCurrency=spend.currency)
    else:
        reasons.append(f"Cost Management: {error or 'no answer'}")
    found["liveError"] = "; ".join(reasons) or None
    return found


def _aligned(head: tuple, body: list[tuple]) -> list[str]:
    """Columns padded to their widest value; the last one, free text, not padded."""
    widths = [max(len(str(line[i])) for line in (head, *body)) for i in range(len(head) - 1)]
    return [("  ".join(str(v).ljust(w) for v, w in zip(line, widths)) + "  " + str(line[-1])).rstrip()
            for line in (head, *body)]


def _spend_text(r: dict) -> str:
    if r["spendThisMonth"] is None:
        return "-"
    text = f"{r['spendThisMonth']:.2f} {r['spendCurrency']}"
    budget_usd = r["monthlyBudgetUsd"]
    if budget_usd and str(r["spendCurrency"]).upper() == "USD":
        text += f" of {budget_usd:.0f} ({r['spendThisMonth'] / budget_usd * 100:.0f}%)"
    return text


def live_table(rows: list[dict]) -> str:
    """`teams --live`: a second table, what each stack holds and has cost now."""
    head = ("STACK", "NODES NOW", "JOBS RUNNING", "SPEND THIS MONTH", "")
    body = []
    for r in rows:
        why = "refused (above)" if r["error"] else f"not read: {r['liveError']}" if r["liveError"] else ""
        body.append((r["stack"], *("-" if r[key] is None else str(r[key]) for key in ("nodesNow", "jobsRunning")),
                     _spend_text(r), why))
    return "\n".join(["Now (read from Azure):", *_aligned(head, body), "",
                      "NODES NOW: GPU nodes held that bill (evicted Spot nodes left out); JOBS RUNNING: training jobs not ended; SPEND: this "
                      "month's actual cost of the resource group (Cost Management lags up to a day), of "
                      "monthlyBudgetUsd where set."])


def table(rows: list[dict]) -> str:
    head = ("STACK", "BACKEND", "REGION", "GPU SIZE", "NODES", "$/H MIN", "$/H MAX", "$/MONTH MIN", "BUDGET",
            "FAILING")
    body = []
    for r in rows:
        if r["error"]:
            body.append((r["stack"], *["-"] * 8, "refused: " + r["error"]))
            continue
        failing = r["failing"]
        body.append((r["stack"], r["backend"], r["location"], r["gpuSku"], f"{r['minNodes']}-{r['maxNodes']}",
                     f"{r['usdPerHourAtMin']:.2f}", f"{r['usdPerHourAtMax']:.2f}", f"{r['usdPerMonthAtMin']:.0f}",
                     "-" if r["monthlyBudgetUsd"] is None else f"{r['monthlyBudgetUsd']:.0f}",
                     f"{len(failing)}: {', '.join(failing)}" if failing else "0"))
    lines = _aligned(head, body)
    placeholders = sum(bool(r["placeholders"]) for r in rows)
    lines += ["", f"USD at {cost.price_label(None)} (a month = {cost.HOURS_PER_MONTH} h); BUDGET: monthlyBudgetUsd "
                  "(- for none); "
                  "`python -m infra plan --stack STACK` shows each line and each check."]
    if placeholders:
        lines.append(f"{placeholders} stack(s) still hold the example allowedIpRanges placeholder (plan names it; "
                     "`pulumi up` refuses it).")
    return "\n".join(lines + [""] + fleet_lines(rows))


def fleet_lines(rows: list[dict]) -> list[str]:
    """The fleet's totals over the stacks not refused, then each (subscription, region) group over a default quota
    (fleet_limits)."""
    members = [fleet_limits.member_of_row(r) for r in rows if not r["error"]]
    warnings = fleet_limits.limit_warnings(members)
    return [*fleet_limits.totals_lines(fleet_limits.totals(members), cost.HOURS_PER_MONTH),
            shared_images.fleet_line({r["stack"]: r["images"] for r in rows if not r["error"]}),
            *(["Quotas (offline, the documented defaults):", *(f"  {line}" for line in warnings)] if warnings else
              ["Quotas (offline): every (subscription, region) group is within the documented defaults"])]
