"""`python -m infra plan`: what a stack would deploy, what it costs per hour, and whether it is secure,
evaluated offline (Pulumi mocks: no Azure, no Pulumi CLI), for review in pull requests."""
from __future__ import annotations

from collections import defaultdict
from datetime import date
from typing import Any

from infra.backends import Declares, Describes, backend
from infra.core import budget, cost, naming
from infra.core.data import path as data_path
from infra.core.security import resources as security, invariants as security_invariants, sas as security_sas
from infra.core.config import shared_images
from infra.core.skus import price_note
from infra.preview.offline import Evaluation

COLLAPSE_AFTER = 3  # more siblings of one type than this (the training scripts) are shown as a count


def _describing(cfg) -> Describes:
    """The stack's backend, by the face plan reads: its lines on the job, node health, the data and what `up` needs
    first."""
    return backend(cfg.backend)


def _get(props: Any, path: str) -> Any:
    head, _, rest = path.partition(".")
    if isinstance(props, list):
        values = [_get(item, path) for item in props]
        return [v for v in values if v is not None] or None
    value = props.get(head) if isinstance(props, dict) else None
    return _get(value, rest) if rest and value is not None else value


def _format(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(_format(v) for v in value)
    if isinstance(value, str) and "/" in value and len(value) > 40:
        return "..." + value[-37:]  # long paths: the end is what tells them apart
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # the engine hands numbers over as floats
    return str(value).lower() if isinstance(value, bool) else str(value)


def _tree(evaluation: Evaluation) -> list[str]:
    children = defaultdict(list)
    for resource in evaluation.resources:
        children[resource.parent_urn].append(resource)
    known = {r.urn for r in evaluation.resources}
    roots = [r for r in evaluation.resources if r.parent_urn not in known]
    lines: list[str] = []

    def show(resource, prefix: str, connector: str, continuation: str) -> None:
        shown = security.RESOURCE_TYPES[resource.type].shown if resource.type in security.RESOURCE_TYPES else ()
        props = " ".join(f"{path}={_format(value)}" for path in shown
                         if (value := _get(resource.inputs, path)) is not None)
        lines.append(f"{prefix}{connector}{resource.type}  {resource.name}" + (f"  {props}" if props else ""))
        kids = sorted(children[resource.urn], key=lambda r: (r.custom, r.type, r.name))
        by_type = defaultdict(list)
        for kid in kids:
            by_type[kid.type].append(kid)
        shown: list = []
        for kid in kids:
            siblings = by_type[kid.type]
            if len(siblings) <= COLLAPSE_AFTER or kid is siblings[0]:
                shown.append(kid)
        for i, kid in enumerate(shown):
            last = i == len(shown) - 1
            show(kid, prefix + continuation, "└─ " if last else "├─ ", "   " if last else "│  ")
            more = len(by_type[kid.type]) - 1
            if more >= COLLAPSE_AFTER:
                lines.append(f"{prefix}{continuation}{'   ' if last else '│  '}   (and {more} more {kid.type})")

    for root in roots:
        show(root, "  ", "", "")
    return lines


def _subjects(evaluation: Evaluation) -> list[security.Subject]:
    """The Azure resources as the checks see them, each with the subnets its VNet rules name (resolved by ID) and
    the stack's own resource group."""
    subnets = {r.state.get("id"): r.inputs for r in evaluation.of_type(security.SUBNET)}
    group = next((str(r.inputs.get("resourceGroupName")) for r in evaluation.of_type(security.RESOURCE_GROUP)), "")
    return [security.Subject(r.type, r.inputs, r.name,
                             tuple(subnets[i] for i in security.vnet_rule_subnet_ids(r.type, r.inputs) if i in subnets),
                             resource_group=group)
            for r in evaluation.resources if r.custom]


def _check_verdicts(evaluation: Evaluation, checks: list) -> list[tuple[str, str, str]]:
    findings = security.apply_checks(_subjects(evaluation), checks)
    results = []
    for check in checks:
        applicable = [f for f in findings if f.check is check]
        failures = [f"{f.subject.name}: {f.message}" for f in applicable if f.message]
        results.append(("n/a", check.name, "no resource of this type in the stack") if not applicable
                       else ("FAIL", check.name, "; ".join(failures)) if failures
                       else ("PASS", check.name, f"{len(applicable)} resource(s)"))
    return results


def service_verdicts(evaluation: Evaluation) -> list[tuple[str, str, str]]:
    """(verdict, check name, detail) for every rule Azure enforces at the service that the types do not carry."""
    return _check_verdicts(evaluation, [*security.SERVICE_CHECKS, security.VNET_RULE_CHECK])


def verdicts(evaluation: Evaluation) -> list[tuple[str, str, str]]:
    """(verdict, check name, detail) for every security check; verdict is PASS, FAIL or n/a."""
    results = _check_verdicts(evaluation, [*security.RESOURCE_CHECKS, security.TAG_CHECK])
    sas_requests = [i.args for i in evaluation.invocations if i.token == "azure-native:storage:listStorageAccountServiceSAS"]
    period = evaluation.config.storage.sas_expiry_hours  # the account's sasPolicy period, which Block enforces
    sas_failures = [message for args in sas_requests
                    if (message := security_sas.check_sas_request(args, period_hours=period))]
    results.append(("FAIL" if sas_failures else "PASS", "sas-least-privilege",
                    "; ".join(sas_failures) or f"{len(sas_requests)} SAS: container-scoped, https only, least permission, "
                                              f"signed start, valid {period} h: within the account's SAS "
                                              "expiration period (Block)"))
    key_calls = sorted({i.token for i in evaluation.invocations if i.token in security.KEY_RETURNING_FUNCTIONS})
    exposed = sorted(k for k in ("sas",) if k in evaluation.outputs and k not in evaluation.secret_outputs)
    results.append(("FAIL" if key_calls or exposed else "PASS", "no-keys-in-outputs",
                    f"called {key_calls}; plain outputs {exposed}" if key_calls or exposed
                    else "no key-returning function called; SAS exported only as secrets"))
    return results


def before_up(cfg, today: date | None = None) -> list[str]:
    """What a real subscription needs that the program cannot do for itself."""
    from infra.core.skus import retirement_warning

    warning = retirement_warning(cfg.nodes.sku, today or date.today())
    at_host = security_invariants.encryption_at_host_line(cfg.nfs)
    importer = shared_images.before_up_line(cfg.registry.shared_images)  # sharedImages: the platform registry's role
    mode = allocation_change_line(cfg)
    return [*cfg.placeholders, *([warning] if warning else []), *([at_host] if at_host else []),
            *([importer] if importer else []), *_describing(cfg).before_up(cfg), *([mode] if mode else [])]


def allocation_change_line(cfg) -> str:
    """Batch: the account's pool allocation mode is fixed when it is created. Batch Account - Create takes
    poolAllocationMode and keyVaultReference ("Existing accounts cannot be updated with this API and should instead
    be updated with the Update Batch Account API"); the Update body, BatchAccountUpdateProperties, has neither
    (azure-rest-api-specs specification/batch/resource-manager/Microsoft.Batch/stable/2024-07-01/BatchManagement.json,
    https://learn.microsoft.com/rest/api/batchmanagement/batch-account/update), so the program replaces the account
    on a change of either (infra/backends/batch/cluster.py: replace_on_changes, deleted first since its name is
    fixed). plan reads no state, so it says this on every Batch stack."""
    if cfg.backend != "batch":
        return ""
    return (f"batchPoolAllocation ({cfg.nodes.pool_allocation}) is fixed when the Batch account is created (Batch "
            "Account - Update takes no poolAllocationMode or keyVaultReference): on a stack deployed with the other "
            "mode, `pulumi up` deletes the Batch account with its pool and jobs and creates it again in this mode; "
            "end or let finish the stack's jobs first (`python -m infra status`)")


def _deployer_lines(evaluation: Evaluation) -> list[str]:
    """The roles `pulumi up` grants the identity running it, read from the assignments the program declares."""
    from infra.components import roles

    grants = [r.inputs for r in evaluation.of_type("azure-native:authorization:RoleAssignment")
              if str(r.inputs.get("description", "")).startswith(roles.DEPLOYER)]
    shown = [(_scope(grant["scope"]),
              roles.ROLE_NAMES.get(roles.role_key(grant["roleDefinitionId"], grant["scope"]), grant["roleDefinitionId"]),
              str(grant.get("principalType")), grant["description"][len(roles.DEPLOYER):]) for grant in grants]
    # By scope, then role: the resources register from a thread pool, in an order that varies from run to run.
    lines = [f"`pulumi up` grants your identity ({principal_type}, deployerPrincipalType) {role} on {scope}: "
             f"{description}" for scope, role, principal_type, description in sorted(shown)]
    if lines:
        # https://learn.microsoft.com/azure/role-based-access-control/troubleshooting: role assignment changes
        # can take up to 30 minutes to take effect.
        lines.append("Creating those grants needs Owner or User Access Administrator; a new grant can take up to 30 "
                     "minutes to take effect, so the first `up` may submit no job and say \"waiting for access\": "
                     "run `pulumi up` again later. The grants follow whoever runs `up`: when another identity runs "
                     "it, they move to that identity and the previous one loses them (give a team's deployers a "
                     "group or one service principal).")
    from infra.components.access import deployer_note

    note = deployer_note(evaluation.config.access)  # teamAdmins: no grants of the deployer's own (access.py)
    return lines + ([note] if note else [])


def _team_lines(evaluation: Evaluation) -> list[str]:
    """Who of the team gets what (teamAdmins, teamMembers: infra/components/access.py), one line per group, role
    and scope, read from the assignments the program declares and sorted (they register in varying order)."""
    from infra.components import access, roles

    shown = sorted((grant["description"][len(access.TEAM):].partition(":")[0], grant["principalId"],
                    roles.ROLE_NAMES.get(roles.role_key(grant["roleDefinitionId"], grant["scope"]), grant["roleDefinitionId"]),
                    _scope(grant["scope"]), grant["description"].partition(": ")[2],
                    " (its writes limited by a condition)" if grant.get("condition") else "")
                   for grant in (r.inputs for r in evaluation.of_type("azure-native:authorization:RoleAssignment"))
                   if str(grant.get("description", "")).startswith(access.TEAM))
    lines = [f"`pulumi up` grants {key} group {group} (Group) {role} on {scope}{limit}: {why}"
             for key, group, role, scope, why, limit in shown]
    if lines:
        lines.append("No team grant is Owner, User Access Administrator or Role Based Access Control Administrator: "
                     "teamAdmins cannot create role assignments, so an `up` that adds or changes grants (these, the "
                     "nodes', the deployer's) needs someone who can, e.g. Role Based Access Control Administrator on "
                     "the resource group, constrained to the roles above (given outside this stack).")
    return lines


def _scope(scope: str) -> str:
    """A role assignment's scope as a reviewer reads it: the resource's type and name."""
    parts = scope.rstrip("/").split("/")
    return f"{parts[-2]} {parts[-1]}" if len(parts) >= 2 else scope


def _job_lines(cfg) -> list[str]:
    health = _describing(cfg).node_health_line(cfg)
    return (_describing(cfg).launch_lines(cfg) + _up_and_the_job(cfg) + ([health] if health else [])
            + [f"  train flags: {' '.join(cfg.training.args) or '(defaults)'}"])


def _up_and_the_job(cfg) -> list[str]:
    """What `up` does to the job (infra/backends/*/training_job.py), and the data order."""
    ready = _describing(cfg).ready_when(cfg)
    declaring: Declares = backend(cfg.backend)
    if not declaring.launches_on_up(cfg):
        return [f"  first deploy: `pulumi up`, then upload the dataset to `data`; `infra submit` submits {ready}"]
    return [f"  first deploy: `up` creates the stack with an empty `data`, submits no job and says so; upload the "
            f"dataset, then `pulumi up` again submits it {ready}",
            "  a later `up` that changes the job's inputs (image digest, trainingArgs, framework, nodes, retries, "
            "hours) submits a new job only once the current one has ended; while it runs, preview and up stop "
            "with one line naming it (`python -m infra cancel` it first)"]


def _month_and_job_lines(cfg, estimate: cost.CostEstimate) -> list[str]:
    """A month at minNodes, the ceiling of one job, and what the NFS server costs idle against azure-files."""
    idle = estimate.at(cfg.nodes.min_nodes)
    ceiling = cost.job_ceiling(cfg)
    attempts = (f"{ceiling.attempts} attempt(s) (trainingRetries {cfg.training.retries} + 1)"
                if cost.applies("trainingRetries", cfg.backend)
                else f"1 attempt (the {cfg.backend} job sets no retries)")
    lines = [f"  a month at minNodes={cfg.nodes.min_nodes}: {cost.monthly(idle):.0f} ({idle:.2f} x "
             f"{cost.HOURS_PER_MONTH} hours, a month as Azure's prices count it)",
             f"  one job at most: {ceiling.total:.0f} = {ceiling.nodes} nodes x {ceiling.node_price:.2f} x "
             f"trainingMaxHours {ceiling.max_hours} x {attempts}; GPU nodes only"]
    nfs = cost.nfs_idle(cfg)
    if nfs and nfs.kind == "vm":
        lines.append(f"  the NFS server bills {nfs.per_month:.0f} a month whether or not a job reads it; nfsKind "
                     f"azure-files with the same {nfs.capacity_gib} GiB would bill {nfs.other_per_month:.0f} "
                     f"(premium share, {cost.AZURE_FILES_PREMIUM_PER_GIB_MONTH} per provisioned GiB-month), less "
                     f"than this server up to {nfs.break_even_gib} GiB (its throughput follows its size: not "
                     "estimated here)")
    elif nfs:
        lines.append(f"  the NFS share bills {nfs.per_month:.0f} a month on its provisioned {nfs.capacity_gib} GiB "
                     f"whether or not a job reads it; nfsKind vm would bill at least {nfs.other_per_month:.0f} a "
                     "month for the server VM and OS disk alone")
    return lines


def _budget_lines(cfg, estimate: cost.CostEstimate) -> list[str]:
    """monthlyBudgetUsd beside the hourly cost: what it buys at maxNodes, what a month at minNodes takes of it, and
    what the guard (infra/components/budget.py) does and how late."""
    amount = cfg.budget.monthly_usd
    if amount is None:
        return ["  monthly budget: none (monthlyBudgetUsd unset: nothing mails at a threshold or stops the nodes)"]
    at_max, idle = estimate.at(cfg.nodes.max_nodes), cost.monthly(estimate.at(cfg.nodes.min_nodes))
    lines = [f"  monthly budget: {amount:.2f} (monthlyBudgetUsd), mails {', '.join(cfg.budget.contacts)} at 80% and "
             "100% of actual spend and at 100% of forecast spend",
             f"  it buys {budget.hours_bought(amount, at_max):.1f} hours at maxNodes={cfg.nodes.max_nodes} "
             f"({at_max:.2f} per hour); a month at minNodes={cfg.nodes.min_nodes} takes {idle:.0f} of it"]
    if idle >= amount:
        lines.append(f"  a month at minNodes alone ({idle:.0f}) reaches the budget: the guard would stop the nodes "
                     "every month; raise monthlyBudgetUsd or lower minNodes")
    lines.append(f"  at 100% of actual spend the guard scales the GPU nodes to zero (the rest keeps billing) and "
                 f"`infra submit` refuses new jobs; Azure's cost data lags up to a day, so a job at maxNodes can pass the budget by up to "
                 f"{24 * at_max:.0f} (24 hours x {at_max:.2f}) before either acts")
    lines.append("  the nodes stay at zero until `pulumi up`, which refreshes first (Pulumi.yaml options.refresh) and puts "
                 "the autoscale back: run it once spend is under the budget (raised, or next month)")
    gap = user_subscription_budget_gap(cfg)
    return lines + ([f"  {gap}"] if gap else [])


def user_subscription_budget_gap(cfg) -> str:
    """batchPoolAllocation user-subscription with a budget: the budget, its guard and submit's check count the
    resource group, and Batch creates the pool's VMs "directly in the Batch account subscription" without saying in
    which resource group (MicrosoftDocs/azure-docs includes/batch-account-mode-include.md, dated 04/03/2023). Batch's
    cost page finds them by the tags Batch puts on them, `poolname` and `batchaccountname`, at the subscription's
    scope, and notes that they "don't show up under the Resource filter"
    (https://learn.microsoft.com/azure/batch/plan-to-manage-costs, "User subscription pool allocation mode"). So
    the GPU hours may bill outside what the guard reads; docs/deploying.md says how to check and what to add."""
    if cfg.backend != "batch" or cfg.nodes.pool_allocation != "user-subscription" or cfg.budget.monthly_usd is None:
        return ""
    account = naming.batch_account(cfg.team, cfg.stack, cfg.location, cfg.naming_subscription)
    return ("user-subscription: the pool's VMs are created in the subscription, and Azure's docs do not say in which "
            "resource group; if outside this one, the budget, its guard and `infra submit`'s check do not count the "
            f"GPU hours (Cost Management finds them by tag batchaccountname={account}): check where they land after "
            "the first job and, if elsewhere, add a subscription budget filtered on that tag (docs/deploying.md, "
            "\"Budget in user-subscription mode\")")


def _spot_lines(cfg) -> list[str]:
    """spot: true: what the node price above means for Spot nodes, and what an eviction costs and does."""
    if not cfg.nodes.spot:
        return []
    # The Spot rate is variable (region, demand) and at most the pay-as-you-go price; Batch sets no max price and
    # evicts for capacity only (https://learn.microsoft.com/azure/batch/batch-spot-vms#limitations; Azure ML:
    # MicrosoftDocs/azure-ai-docs pulls 791 and 806). Evicted nodes bill while powered on, replacements while they
    # start (pull 791, how-to-use-low-priority-batch.md: no refund or credit for an eviction).
    return [f"  spot: true: Spot nodes bill the Spot rate of {cfg.nodes.gpu_sku} in {cfg.location}, which varies "
            "with region and demand and is at most the pay-as-you-go price: every node figure above is its upper "
            "bound, not a discounted estimate (the Azure Retail Prices API gives today's rate, type 'Spot')",
            "  an evicted node bills until Azure removes it, and its replacement while it starts; "
            + _after_eviction(cfg)]


def _after_eviction(cfg) -> str:
    """What the job does when a Spot node is evicted: where the backend retries (Batch requeues the task: "tasks
    that were running on the preempted node VMs are requeued", https://learn.microsoft.com/azure/batch/batch-spot-vms)
    the rerun resumes from the checkpoints on the NFS share; Azure ML's docs seen here do not say that a command
    job is rerun, and a new job writes to a new output folder."""
    from training.config import parse_args

    minutes = parse_args(["--output-dir", "unused", *cfg.training.args]).checkpoint_minutes  # trainingArgs' value
    if cost.applies("trainingRetries", cfg.backend):
        bound = (f"--checkpoint-minutes {minutes:g} bounds what an eviction loses" if minutes
                 else "--checkpoint-minutes 0: only --checkpoint-every bounds what an eviction loses")
        return f"the job's task is requeued and the run resumes from its newest checkpoint (--resume auto; {bound})"
    return ("Azure ML's docs do not say it reruns a command job whose node was evicted, and a new job starts a new "
            "output folder: an eviction may end the run (its checkpoints stay in that job's outputs)")


def render(evaluation: Evaluation) -> tuple[str, bool]:
    """The plan as text, and whether every security check passed."""
    cfg = evaluation.config
    sku = cfg.nodes.sku
    estimate = cost.estimate(cfg)
    lines = [f"Plan for stack '{cfg.stack}' (team {cfg.team}, {cfg.location}, backend {cfg.backend}); evaluated "
             "offline with Pulumi "
             "mocks, nothing was sent to Azure.", "",
             f"Resources ({sum(r.custom for r in evaluation.resources)} Azure resources in "
             f"{sum(not r.custom for r in evaluation.resources)} components)"]
    lines += _tree(evaluation)
    lines += ["", f"Estimated cost, USD per hour at {cost.price_label(cfg.location)} (usage-based storage, logs and "
                  "egress not included)",
              f"  GPU node {sku.name}: {sku.gpus}x {sku.gpu_model}, "
              f"{'InfiniBand' if sku.infiniband else 'no InfiniBand'}: {estimate.node_price:.2f} per node"
              + cost.node_extra(cfg)[1]
              + price_note(sku)]
    lines += [f"  {item}: {price:.3f}" for item, price in estimate.fixed.items()]
    nodes = cfg.nodes
    lines += [f"  at minNodes={nodes.min_nodes}: {estimate.at(nodes.min_nodes):.2f} per hour",
              f"  at maxNodes={nodes.max_nodes}: {estimate.at(nodes.max_nodes):.2f} per hour "
              f"({nodes.max_nodes * sku.gpus} GPUs)"] + _budget_lines(cfg, estimate) + _month_and_job_lines(
                  cfg, estimate) + _spot_lines(cfg)
    # Will the GPUs be fed: need at maxNodes, what the data path delivers, staging per job start (docs/data.md,
    # "Feeding the GPUs"); unindented, so `grep '^data path:'` finds it.
    lines += ["", data_path.of_stack(cfg).line()]
    results = verdicts(evaluation)
    service = service_verdicts(evaluation)
    lines += ["", "Training images (built here, or imported by digest: sharedImages)"] + shared_images.plan_lines(
        cfg.registry.frameworks, cfg.registry.shared_images, cfg.registry.registry_sku)
    lines += ["", "Training job"] + _job_lines(cfg)
    lines += ["", "Before `pulumi up`", f"  - run `python -m infra preflight --stack {cfg.stack}`: it asks the subscription "
              "what below it can (providers, size, quota, roles, Azure Policy, price)"] + [
        f"  - {line}" for line in before_up(cfg) + _deployer_lines(evaluation)
                                                              + _team_lines(evaluation)]
    lines += ["", "Security checks"] + [f"  {v:<4} {name}: {detail}" for v, name, detail in results]
    lines += ["", "Azure service rules (values Azure refuses although the types accept them)"] + [
        f"  {v:<4} {name}: {detail}" for v, name, detail in service]
    lines += ["", "Stack outputs"] + [
        f"  {key}: [secret]" if key in evaluation.secret_outputs else f"  {key}: {_format(value)}"
        for key, value in evaluation.outputs.items()]
    return "\n".join(lines), all(v != "FAIL" for v, _, _ in results + service)
