"""The stacks of this folder as a platform engineer running them for many teams sees them: one stack file per team
(Pulumi.<team>.yaml).

`new-team NAME` writes a team's stack file from another's (default dev): the team's name, and an address space
that overlaps no other stack file here nor any range those files reserve (hub, on-premises), with those listed in
its `reservedAddressSpaces`. `teams` evaluates every stack file offline, as `plan` does, one row each (or JSON);
stacks whose configs differ only in new-team's own keys (IDENTITY_KEYS) share one evaluation of the program. All
three read each stack file and Pulumi.yaml once (Fleet), so a fleet of N stacks costs N reads, not N squared.
`address_overlap` is `plan`'s check that no two stack files here share addresses: VNets whose address spaces overlap
cannot be peered, so cannot reach each other or a shared hub (Azure's peering sample: "the networks' address spaces
must not overlap", https://azure.microsoft.com/resources/samples/network-dotnet-manage-network-peering/), and each
stack file reserves only the ranges its author knew of.
"""
from __future__ import annotations

import ipaddress
import json
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra import REPO_ROOT
from infra.core import budget, config, cost, fleet_limits, shared_images
from infra.core.backend_facts import BACKEND_ONLY_KEYS
from infra.core.config import PROJECT, StackConfig
from infra.core.config_schema import ConfigError
from infra.core.shared_images import SharedImages
from infra.core.engine_config import EngineConfig

# RFC 1918: the ranges NetworkConfig's message names, tried in this order for a new team's address space.
PRIVATE_RANGES = tuple(ipaddress.IPv4Network(r) for r in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
# The template team's own: its Entra groups would get the new stack's roles, its tags (owner, cost centre) would
# bill the new team's spend to it, its budget would count the new team's spend against its figure and mail its
# people. new-team leaves them out (those the schema declares) and says to set them.
TEAM_OWN_KEYS = ("teamAdmins", "teamMembers", "tags", "monthlyBudgetUsd", "budgetContacts")


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

    def engine(self, stack: str) -> EngineConfig:
        """The stack's merged config, or its ConfigError raised (a stack not here: the error naming those that are)."""
        found = self.engines.get(stack)
        if found is None:
            return config.engine_config(stack, self.root, self.project)  # raises "no Pulumi.STACK.yaml in ..."
        if isinstance(found, ConfigError):
            raise found
        return found

    def config(self, stack: str) -> StackConfig:
        """The stack file's config, refused as `plan` refuses it (the config's own checks, then an address space
        shared with another stack file here)."""
        cfg = config.from_engine_config(stack, self.engine(stack), self.project)
        overlap = address_overlap(cfg, self.spaces())
        if overlap:
            raise overlap
        return cfg

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


# --- new-team ---------------------------------------------------------------------------------------------------

def free_space(prefixlen: int, taken: list[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    """The first /prefixlen block of the private ranges that overlaps nothing in `taken`."""
    for private in PRIVATE_RANGES:
        if prefixlen < private.prefixlen:
            continue
        for candidate in private.subnets(new_prefix=prefixlen):
            if not any(candidate.overlaps(t) for t in taken):
                return candidate
    raise ConfigError("addressSpace", f"no /{prefixlen} of {', '.join(map(str, PRIVATE_RANGES))} is free of the "
                                      "other stacks' spaces and reserved ranges; give a larger prefix by hand")


def _moved(subnet: ipaddress.IPv4Network, old: ipaddress.IPv4Network, new: ipaddress.IPv4Network):
    """`subnet` at the same offset in `new` as it had in `old` (same-size spaces)."""
    offset = int(subnet.network_address) - int(old.network_address)
    return ipaddress.IPv4Network((int(new.network_address) + offset, subnet.prefixlen))


_KEY_LINE = re.compile(rf"^(?P<indent>\s+)(?:{re.escape(PROJECT)}:)?(?P<key>[A-Za-z]+)\s*:(?P<value>.*)$")


def _rewrite(text: str, values: dict[str, str], drop: set[str], header: str) -> str:
    """The template's text with `values` (key -> YAML flow text) set and `drop` keys removed, each with the lines
    its value continues on (a block list or map below it), its comments kept (the leading ones replaced by
    `header`; a dropped key's own comment goes with it)."""
    lines = text.splitlines()
    while lines and (lines[0].startswith("#") or not lines[0].strip()):
        lines.pop(0)
    out: list[str] = []
    pending: list[str] = []  # comment lines just above the next key: they go (or stay) with it
    seen, indent, config_at = set(), "  ", None
    n = 0
    while n < len(lines):
        line = lines[n]
        n += 1
        if line.lstrip().startswith("#"):
            pending.append(line)
            continue
        match = _KEY_LINE.match(line)
        if match and (match["key"] in drop or match["key"] in values):
            own = len(match["indent"])
            # Its value's own lines: more indented, or a YAML "- item" at the key's indent (an indentless list).
            while n < len(lines) and lines[n].strip() and (len(lines[n]) - len(lines[n].lstrip()) > own or
                                                            lines[n].lstrip().startswith("- ")
                                                            and len(lines[n]) - len(lines[n].lstrip()) == own):
                n += 1
        if match and match["key"] in drop:
            pending = []
            continue
        out += pending
        pending = []
        if match and match["key"] in values:
            indent = match["indent"]
            line = f"{indent}{PROJECT}:{match['key']}: {values[match['key']]}"
            seen.add(match["key"])
            if match["key"] == "team":
                config_at = len(out)  # keys the template leaves out go after the team's
        elif line.rstrip() == "config:" and config_at is None:
            config_at = len(out)
        out.append(line)
    out += pending
    if config_at is None:
        out.insert(0, "config:")
        config_at = 0
    out[config_at + 1:config_at + 1] = [f"{indent}{PROJECT}:{k}: {v}" for k, v in values.items() if k not in seen]
    return "\n".join([*header.splitlines(), *out]) + "\n"


@dataclass(frozen=True)
class NewTeam:
    path: Path
    config: StackConfig
    reserved_from: dict[str, str]  # each reserved range -> where it came from
    left_out: tuple[str, ...] = ()  # the template team's own keys it set, not copied (TEAM_OWN_KEYS)
    quota_lines: tuple[str, ...] = ()  # the group it joins over a default quota (fleet_limits.limit_warnings)
    images_line: str = ""  # where its training images come from (sharedImages, the fleet's default)


def member(cfg: StackConfig) -> fleet_limits.Member:
    """A stack's config as the fleet's totals and limits see it (the figures of its `teams` row)."""
    estimate = cost.estimate(cfg)
    return fleet_limits.Member(cfg.stack, cfg.subscription_id, cfg.location, cfg.backend, cfg.nodes.gpu_sku,
                               cfg.nodes.max_nodes, estimate.at(cfg.nodes.min_nodes), estimate.at(cfg.nodes.max_nodes),
                               cost.monthly(estimate.at(cfg.nodes.min_nodes)), cfg.budget.monthly_usd, cfg.nodes.spot)


_SUBSCRIPTION_LINE = re.compile(rf"^\s+{re.escape(config.SUBSCRIPTION_KEY)}\s*:.*\n", re.MULTILINE)


def _with_subscription(text: str, subscription: str) -> str:
    """The stack file's text with the provider's subscription key set (the template's own line, if any, replaced)."""
    text = _SUBSCRIPTION_LINE.sub("", text)
    return re.sub(r"^config:\n", f"config:\n  {config.SUBSCRIPTION_KEY}: {subscription}\n", text, count=1,
                  flags=re.MULTILINE)


def fleet_shared_images(fleet: Fleet, frameworks: tuple[str, ...]) -> tuple[SharedImages | None, list[str]]:
    """The sharedImages the stacks here use most (on a tie, the first stack's), keeping only what `frameworks` runs,
    and the stacks that use it; (None, []) when none imports an image of `frameworks`."""
    users: dict[tuple, list[str]] = {}
    found: dict[tuple, SharedImages] = {}
    for stack in fleet.engines:
        try:
            shared = fleet.config(stack).registry.shared_images
        except ConfigError:
            continue  # a stack refused by its own plan sets no default
        kept = tuple(i for i in shared.images if i.framework in frameworks) if shared else ()
        if kept:
            key = (shared.registry_id, kept)
            found.setdefault(key, SharedImages(shared.registry_id, kept))
            users.setdefault(key, []).append(stack)
    if not users:
        return None, []
    key = max(users, key=lambda k: len(users[k]))  # max keeps the first of equals: stack order
    return found[key], users[key]


def new_team(name: str, template: str = "dev", backend_name: str | None = None, root: Path = REPO_ROOT,
             subscription: str | None = None, location: str | None = None, own_images: bool = False) -> NewTeam:
    """Write Pulumi.NAME.yaml from Pulumi.TEMPLATE.yaml, or refuse (ConfigError) with nothing written. `subscription`
    and `location` put the new stack in another (subscription, region) group than the template's. The new stack
    imports the fleet's shared images (the sharedImages the stacks here use most) unless the template sets its own
    or `own_images` (then it builds every image itself)."""
    config.check_team(name)  # also what keeps NAME a plain file name
    subscription = config.check_subscription_id(subscription) if subscription else None
    path = root / f"Pulumi.{name}.yaml"
    if path.exists():
        raise ConfigError(None, f"new-team {name}: {path.name} exists already; pick another name, or edit that file "
                                "(nothing written)")
    if not (root / f"Pulumi.{template}.yaml").is_file():
        raise ConfigError(None, f"--from {template}: no Pulumi.{template}.yaml in {root}; stacks here: "
                                f"{', '.join(config.stack_names(root)) or 'none'}")
    fleet = Fleet(root)
    try:
        source = config.from_engine_config(template, fleet.engine(template), fleet.project)
    except ConfigError as err:
        raise ConfigError(None, f"--from {template}: Pulumi.{template}.yaml: {err}") from None
    chosen = backend_name or source.backend  # the command line offers config.BACKENDS only

    # What the new space must avoid: every other stack's space and every range any of them reserves.
    reserved_from: dict[ipaddress.IPv4Network, str] = {}
    for stack, (space, reserved) in sorted(fleet.spaces().items()):
        for cidr in reserved:
            reserved_from.setdefault(cidr, f"reserved by {stack}")
        reserved_from[space] = f"stack {stack}"
    old = source.network.address_space
    new = free_space(old.prefixlen, list(reserved_from))
    reserved = sorted(reserved_from)
    values = {"team": name, "addressSpace": str(new),
              "computeSubnet": str(_moved(source.network.compute_subnet, old, new)),
              "storageSubnet": str(_moved(source.network.storage_subnet, old, new)),
              "reservedAddressSpaces": "[" + ", ".join(map(str, reserved)) + "]"}
    if location:
        values["location"] = location  # checked with the rest below, as the written file
    drop = {key for key in TEAM_OWN_KEYS if key in config.KEYS}
    # One build for the fleet: a new team imports the images the other stacks here import (by digest), so its
    # `up` builds none; --own-images (or a template with its own sharedImages) decides otherwise.
    shared, users = (None, []) if own_images else fleet_shared_images(fleet, source.registry.frameworks)
    if own_images:
        drop.add(shared_images.KEY)
        images_line = "images: built here by `up` (--own-images: no sharedImages)"
    elif source.registry.shared_images:
        shared = source.registry.shared_images
        images_line = (f"images: as Pulumi.{template}.yaml's sharedImages "
                       f"({shared_images.summary(source.registry.frameworks, shared)})")
    elif shared:
        values[shared_images.KEY] = shared_images.flow_text(shared, source.registry.frameworks)
        images_line = (f"images: the fleet's shared images, imported by digest from {shared.registry_name} as "
                       f"{len(users)} other stack(s) here do ({', '.join(users)}; "
                       f"{shared_images.summary(source.registry.frameworks, shared)}): its plan builds none; "
                       "`new-team --own-images` builds them here instead")
    else:
        images_line = ("images: built here by `up` (no stack here sets sharedImages; docs/teams.md, one build for the "
                       "fleet)")
    if chosen != source.backend:
        values["backend"] = chosen
        # The keys of the other backends would be refused (backend_facts.BACKEND_ONLY_KEYS).
        drop |= {key for other, keys in BACKEND_ONLY_KEYS.items() if other != chosen for key in keys}
    header = (f"# The {name} team's stack, written by `python -m infra new-team {name} --from {template}`: set what\n"
              "# differs (docs/deploying.md, step 1); reservedAddressSpaces lists the other\n"
              "# stacks' spaces and the ranges they reserve.")
    text = _rewrite((root / f"Pulumi.{template}.yaml").read_text(), values, drop, header)
    if subscription:
        text = _with_subscription(text, subscription)

    # Validate before writing: the file as written must be what `plan` accepts, with the values chosen above (a
    # value the template wrote over several lines would not have been replaced).
    with tempfile.TemporaryDirectory() as scratch:
        Path(scratch, path.name).write_text(text)
        try:
            written = config.from_stack_file(name, Path(scratch), fleet.project)  # this folder's Pulumi.yaml
        except ConfigError as err:
            raise ConfigError(None, f"new-team {name} --from {template}: the file it would write is refused ({err}); "
                                    "nothing written") from None
    got = {"team": written.team, "addressSpace": str(written.network.address_space),
           "backend": written.backend, "reservedAddressSpaces": sorted(written.network.reserved_address_spaces),
           "location": written.location, "subscriptionId": written.subscription_id,
           shared_images.KEY: written.registry.shared_images}
    want = {"team": name, "addressSpace": str(new), "backend": chosen, "reservedAddressSpaces": reserved,
            "location": location or source.location, "subscriptionId": subscription or source.subscription_id,
            shared_images.KEY: shared}
    if got != want:
        wrong = next(key for key in want if got[key] != want[key])
        raise ConfigError(wrong, f"Pulumi.{template}.yaml writes it in a form new-team cannot rewrite (over several "
                                 "lines?); write it on one line, as `key: value`, and run new-team again (nothing "
                                 "written)")
    with path.open("x") as out:  # "x": never over a file written meanwhile
        out.write(text)
    template_keys = config.read_stack_file(template, root)  # once, not once per key
    own = tuple(key for key in TEAM_OWN_KEYS if key in template_keys)
    # The group it joins, from the configs already read (a stack refused by its own plan is left out).
    members = [member(written)]
    for stack in fleet.engines:
        try:
            members.append(member(config.from_engine_config(stack, fleet.engine(stack), fleet.project)))
        except ConfigError:
            continue
    quota = fleet_limits.limit_warnings(members, only=members[0].group)
    return NewTeam(path, written, {str(cidr): reserved_from[cidr] for cidr in reserved}, own, tuple(quota),
                   images_line)


def new_team_lines(result: NewTeam, template: str) -> list[str]:
    cfg = result.config
    where = ", ".join(f"{cidr} ({origin})" for cidr, origin in result.reserved_from.items())
    return [f"wrote {result.path.name}: team {cfg.team}, backend {cfg.backend}, addressSpace "
            f"{cfg.network.address_space} (computeSubnet {cfg.network.compute_subnet}, storageSubnet "
            f"{cfg.network.storage_subnet}); the rest as in Pulumi.{template}.yaml",
            f"  reservedAddressSpaces: {where or 'none'}",
            *([f"  not copied from Pulumi.{template}.yaml (the {template} team's own): {', '.join(result.left_out)}"]
              if result.left_out else []),
            f"  joins {fleet_limits.group_name((cfg.subscription_id or fleet_limits.UNSET, cfg.location))}: " + (
                "over a default quota:" if result.quota_lines else "within the documented default quotas"),
            *(f"    {line}" for line in result.quota_lines),
            *([f"  {result.images_line}"] if result.images_line else []),
            "next:",
            f"  1. edit {result.path.name}: allowedIpRanges (your egress IPs; `curl -s https://ifconfig.me`), and what "
            f"differs for this team (location, gpuSku, maxNodes, "
            f"{''.join(f'{key}, ' for key in TEAM_OWN_KEYS if key in config.KEYS)}...)",
            f"  2. python -m infra plan --stack {cfg.team}      # offline: resources, cost, security checks",
            f"  3. pulumi stack init {cfg.team}",
            f"  4. pulumi up --stack {cfg.team} --policy-pack infra/policy",
            f"  5. python -m infra member-file --stack {cfg.team}   # for the team's members: the outputs, no secret",
            f"  6. python -m infra upload --stack {cfg.team} DIR    # DIR/train/<class>/*.jpg; then `pulumi up` again "
            "(it submits the job once the data is staged) or `python -m infra submit`",
            f"  (the other stack files do not reserve {cfg.network.address_space} yet; `plan` refuses any two stack "
            "files here whose spaces overlap)"]


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
