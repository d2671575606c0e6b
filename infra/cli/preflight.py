"""`python -m infra preflight --stack NAME`: before `pulumi up`, ask the live subscription whether it can run the
stack, one line per check (infra/backends/preflight.py runs them, infra/core/preflight/ judges them). Exit
status: 0 nothing would stop `up` or the first job, 1 something would (or Azure could not be asked), 2 the stack
file or the subscription is refused."""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DESCRIPTION = (
    "Ask the live subscription, with your Azure sign-in (`az login`), whether it can run the stack, before\n"
    "`pulumi up`: each check prints one line, ok or what is wrong with the exact fix:\n"
    "  providers   the resource providers the stack's resources need are registered\n"
    "  size        the GPU size (and the NFS server's) is offered in the region to this subscription (Resource\n"
    "              SKUs and their restrictions), and to Batch pools there (backend batch)\n"
    "  quota       the family's vCPUs for maxNodes (Spot or dedicated): the Batch account's quota, or the\n"
    "              subscription's compute usages (Azure ML, the NFS server)\n"
    "  roles       you may create role assignments (and the stack's resources) at the resource group's scope\n"
    "  policy      the organisation's Azure Policy would not deny the resources as ARM receives them\n"
    "              (Policy Restrictions API: storage account, registry, Batch or Azure ML, key vault, VM, group)\n"
    "  price       Azure's current list price of the size in the region, beside plan's estimate\n"
    "Exit status: 0 nothing would stop `up`, 1 something would (FAIL lines) or Azure could not be asked,\n"
    "2 the stack file or the subscription is refused.")


def subscription_hint(args: Any, stack_file: Path) -> str | None:
    """--subscription, else the stack file's azure-native:subscriptionId (the provider's own key), else
    AZURE_SUBSCRIPTION_ID."""
    if args.subscription:
        return args.subscription
    import yaml

    try:
        values = (yaml.safe_load(stack_file.read_text()) or {}).get("config") or {}
    except (OSError, yaml.YAMLError):
        values = {}
    return str(values.get("azure-native:subscriptionId") or "") or os.environ.get("AZURE_SUBSCRIPTION_ID") or None


def azure_services():
    """Preflight's services with your sign-in: ARM (asked for a token at once, so no sign-in ends here in one line)
    and the Retail Prices API."""
    from infra.backends.preflight import ARM_SCOPE, Arm, RetailPrices
    from training.data.transfer import AzureCredential

    return Arm(AzureCredential(probe_scope=ARM_SCOPE)), RetailPrices()


def stack_config_or_line(args: Any):
    """The stack's config, or None with its one line printed (the stack file refused: exit status 2)."""
    from infra.core.config import stack as config
    from infra.core.config.schema import ConfigError

    try:
        return config.from_stack_file(args.stack, args.project_dir)
    except ConfigError as err:
        print(f"error: Pulumi.{args.stack}.yaml: {err}", file=sys.stderr)
        return None


def against_azure(args: Any, services: Callable[[], tuple[Any, Any]] | None, work: Callable[[Any, Any, str], Any],
                  *, arm_fix: str) -> tuple[int, Any]:
    """`work(arm, prices, subscription)` with your sign-in, for preflight and leftovers alike: (0, its result), or
    (exit status, None) with one line printed: 2 a refused subscription, 1 no sign-in or ARM refusing (`arm_fix`
    says what to do). The clients are closed either way."""
    from azure.core.exceptions import AzureError

    from infra.backends import preflight
    from infra.backends.shared import status_line
    from training.errors import UsageError

    arm = prices = None
    try:
        arm, prices = (services or azure_services)()
        subscription = preflight.subscription_of(arm, subscription_hint(args, args.project_dir /
                                                                        f"Pulumi.{args.stack}.yaml"))
        return 0, work(arm, prices, subscription)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2, None
    except UsageError as err:  # not signed in (training.data.transfer.NotSignedIn)
        print(f"error: {err}", file=sys.stderr)
        return 1, None
    except AzureError as err:
        print(f"error: cannot ask Azure Resource Manager ({status_line(err)}): {arm_fix}", file=sys.stderr)
        return 1, None
    finally:
        for client in (arm, prices):
            if client is not None:
                client.close()


def deployer_check(arm: Any, stack_config: Any) -> list:
    """deployerPrincipalType against who this sign-in is (its ARM token's claims: infra/core/security/deployer_identity.py):
    preflight runs as the identity that runs `up` (docs/ci.md), so a mismatch would fail `up`'s role assignments."""
    from infra.backends.preflight import ARM_SCOPE
    from infra.core.security import deployer_identity
    from infra.core.preflight import subscription as verdicts

    credential = getattr(arm, "credential", None)
    try:
        found = deployer_identity.from_token(credential.get_token(ARM_SCOPE).token) if credential else None
    except Exception:  # noqa: BLE001 - no token here means no sign-in, which the first request says in one line
        found = None
    if found is None:
        return []
    declared = stack_config.deployer_principal_type
    wrong = deployer_identity.mismatch(declared, found, "this sign-in's token", stack_config.stack)
    return [verdicts.Check("deployer", verdicts.FAIL, wrong) if wrong else
            verdicts.Check("deployer", verdicts.OK, f"deployerPrincipalType {declared}: this sign-in is a {found}")]


def condition_check(arm: Any, stack_config: Any, subscription: str) -> list:
    """The deploy identity's role condition against the roles this stack's `up` assigns (a new stack brings a new
    custom role): a FAIL that names what to run and who runs it, before `up` fails on the role assignment."""
    from infra.backends.preflight import API, ARM_SCOPE
    from infra.core.security import ci_roles, deployer_identity
    from infra.core.preflight import subscription as verdicts

    credential = getattr(arm, "credential", None)
    try:
        principal = deployer_identity.object_id(credential.get_token(ARM_SCOPE).token) if credential else None
    except Exception:  # noqa: BLE001 - no token: the first request says so in one line
        principal = None
    if principal is None:
        return []
    assignments = arm.list(f"/subscriptions/{subscription}/providers/Microsoft.Authorization/roleAssignments",
                           API["roleAssignments"], {"$filter": f"principalId eq '{principal}'"})
    needed = ci_roles.assignable(subscription, [(stack_config.team, stack_config.stack)])
    missing = deployer_identity.condition_gap(assignments, needed)
    if missing is None:
        return []
    if missing:
        line = deployer_identity.condition_line(missing, subscription)
        return [verdicts.Check("role condition", verdicts.FAIL, line)]
    return [verdicts.Check("role condition", verdicts.OK, f"the deploy identity's condition admits the {len(needed)} "
                                                          "roles `up` assigns")]


def caller_check(stack_config: Any, discover: bool = True) -> list:
    """Whether the firewalls admit this machine (infra/core/preflight/caller_access.py). Its address: DLTRAIN_CALLER_ADDRESS, else
    (`discover`, a real run) an echo service; with neither (tests with their own services) no line."""
    from infra.backends import caller_address
    from infra.core.preflight import caller_access

    if not discover and not os.environ.get(caller_address.ENV):
        return []
    address, why = caller_address.discover()
    return [caller_access.check(address, stack_config.network.allowed_ip_ranges, stack_config.stack, why)]


def command(args: Any, services: Callable[[], tuple[Any, Any]] | None = None) -> int:
    from infra.backends import preflight
    from infra.core.preflight import subscription as verdicts
    from infra.preview import offline

    started = time.monotonic()
    stack_config = stack_config_or_line(args)
    if stack_config is None:
        return 2

    def ask(arm, prices, subscription) -> list:
        evaluation = offline.evaluate(stack_config)
        needs = verdicts.needs(stack_config, [(r.type, r.inputs) for r in evaluation.resources], subscription,
                               offline.SUBSCRIPTION)
        print(f"preflight of stack {args.stack} ({stack_config.backend}, {needs.max_nodes} x {needs.gpu.name}"
              f"{' Spot' if needs.spot else ''} in {needs.location}) against subscription {subscription}:", flush=True)
        checks = [verdicts.Check("config", verdicts.FAIL, f"{p} (`pulumi up` refuses it)")
                  for p in stack_config.placeholders] + deployer_check(arm, stack_config)
        checks += caller_check(stack_config, discover=services is None)
        for check in checks:
            print(check.line(), flush=True)
        extra = preflight._guarded("role condition", lambda: condition_check(arm, stack_config, subscription))
        for check in extra:
            print(check.line(), flush=True)
        return checks + extra + preflight.run(needs, subscription, arm, prices,
                                              report=lambda c: print(c.line(), flush=True))

    code, checks = against_azure(args, services, ask, arm_fix="check your network and `az login`, then try again")
    if code:
        return code
    stopped = [c.name for c in checks if c.verdict == verdicts.FAIL]
    print(f"\n{len(checks)} checks in {time.monotonic() - started:.1f} s: "
          + (f"{len(stopped)} would stop `pulumi up` or the first job ({', '.join(stopped)})" if stopped else
             f"nothing stops `pulumi up --stack {args.stack}`"))
    return 1 if stopped else 0
