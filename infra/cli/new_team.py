"""`python -m infra new-team NAME`: write a team's stack file (Pulumi.NAME.yaml) from another's (default dev).

It sets the team's name, and an address space that overlaps no other stack file here nor any range those files
reserve (hub, on-premises), with those listed in its `reservedAddressSpaces`; it leaves out the template team's own
keys (TEAM_OWN_KEYS), gives the new team the fleet's shared images, says whether the (subscription, region) group
it joins is over a default quota, and validates the file as written before it writes it. The stack files are read
once (infra/cli/teams.py: Fleet).
"""
from __future__ import annotations

import ipaddress
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from infra import REPO_ROOT
from infra.cli.teams import Fleet
from infra.core import cost, fleet_limits
from infra.core.config import stack as config, shared_images
from infra.core.security import deployer_identity
from infra.core.backend_facts import BACKEND_ONLY_KEYS
from infra.core.config.stack import PROJECT, StackConfig
from infra.core.config.schema import ConfigError
from infra.core.config.shared_images import SharedImages

# RFC 1918: the ranges NetworkConfig's message names, tried in this order for a new team's address space.
PRIVATE_RANGES = tuple(ipaddress.IPv4Network(r) for r in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
# The template team's own: its Entra groups would get the new stack's roles, its tags (owner, cost centre) would
# bill the new team's spend to it, its budget would count the new team's spend against its figure and mail its
# people. new-team leaves them out (those the schema declares) and says to set them.
TEAM_OWN_KEYS = ("teamAdmins", "teamMembers", "tags", "monthlyBudgetUsd", "budgetContacts")


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


def rewrite_stack_file(text: str, values: dict[str, str], drop: set[str], header: str) -> str:
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
    ci: bool = False  # the pipeline deploys it (deployerPrincipalType ServicePrincipal)


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
             subscription: str | None = None, location: str | None = None, own_images: bool = False,
             ci: bool = False) -> NewTeam:
    """Write Pulumi.NAME.yaml from Pulumi.TEMPLATE.yaml, or refuse (ConfigError) with nothing written. `subscription`
    and `location` put the new stack in another (subscription, region) group than the template's. The new stack
    imports the fleet's shared images (the sharedImages the stacks here use most) unless the template sets its own
    or `own_images` (then it builds every image itself). `ci`: the pipeline's deploy identity runs its `up`
    (deployerPrincipalType ServicePrincipal; infra/core/security/deployer_identity.py)."""
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
        source = fleet.parsed(template)
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
    # Who runs `up`: the pipeline's deploy identity (--ci), else the template's (a person after `az login`).
    principal = deployer_identity.SERVICE_PRINCIPAL if ci else source.deployer_principal_type
    if principal != source.deployer_principal_type:
        values["deployerPrincipalType"] = principal
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
    header = (f"# The {name} team's stack, written by `python -m infra new-team {name} --from {template}"
              f"{' --ci' if ci else ''}`: set what\n"
              "# differs (docs/deploying.md, step 1); reservedAddressSpaces lists the other\n"
              "# stacks' spaces and the ranges they reserve.")
    text = rewrite_stack_file((root / f"Pulumi.{template}.yaml").read_text(), values, drop, header)
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
           shared_images.KEY: written.registry.shared_images, "deployerPrincipalType": written.deployer_principal_type}
    want = {"team": name, "addressSpace": str(new), "backend": chosen, "reservedAddressSpaces": reserved,
            "location": location or source.location, "subscriptionId": subscription or source.subscription_id,
            shared_images.KEY: shared, "deployerPrincipalType": principal}
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
            members.append(member(fleet.parsed(stack)))
        except ConfigError:
            continue
    quota = fleet_limits.limit_warnings(members, only=members[0].group)
    return NewTeam(path, written, {str(cidr): reserved_from[cidr] for cidr in reserved}, own, tuple(quota),
                   images_line, ci)


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
            *([f"  deployerPrincipalType: {cfg.deployer_principal_type} (--ci: the pipeline's deploy identity runs "
               "`up`; `plan` under the pipeline's ARM_* sign-in and `preflight` refuse a mismatch)"]
              if result.ci else []),
            *(_ci_next_steps(result) if result.ci else _next_steps(result))]


def _ci_next_steps(result: NewTeam) -> list[str]:
    """What follows `new-team --ci`: the pipeline does `stack init` and `up` (docs/ci.md); people review and merge."""
    cfg, sub = result.config, result.config.subscription_id or "SUB"
    return ["next (the pipeline deploys it: docs/ci.md):",
            f"  1. edit {result.path.name}: allowedIpRanges (the addresses `up` and your members run from), and what "
            f"differs for this team (location, gpuSku, maxNodes, "
            f"{''.join(f'{key}, ' for key in TEAM_OWN_KEYS if key in config.KEYS)}...)",
            f"  2. python -m infra plan --stack {cfg.team}      # offline: resources, cost, security checks",
            f"  3. python -m infra ci-roles --subscription {sub}   # its custom role joins the deploy identity's "
            "condition: if it changed, the subscription's Owner updates the assignment with it (`az role assignment "
            "update`) before this team's first deploy (docs/ci.md, Identities); fleet-deploy's preflight fails its "
            "`role condition` line until then",
            f"  4. open a pull request with {result.path.name}: fleet-plan plans and preflights it; merging to main "
            "runs fleet-deploy (preflight as the deploy identity, `pulumi stack select --create`, `pulumi up`)",
            f"  5. give the team's members the deploy run's artifact member-{cfg.team}, its member file (`gh run "
            f"download RUN_ID -n member-{cfg.team}`; docs/jobs.md)",
            f"  (the other stack files do not reserve {cfg.network.address_space} yet; `plan` refuses any two stack "
            "files here whose spaces overlap)"]


def _next_steps(result: NewTeam) -> list[str]:
    cfg = result.config
    return ["next:",
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

