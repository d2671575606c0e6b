"""`python -m infra leftovers --stack NAME`: after `pulumi destroy`, what of the stack still exists, bills or holds
a name, one line each with the command that removes or purges it (infra/backends/leftovers.py asks Azure,
infra/core/leftovers.py judges). Exit status: 0 nothing left, 1 something left (or Azure could not be asked), 2
the stack file or the subscription is refused."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

DESCRIPTION = (
    "After `pulumi destroy`, ask Azure (your sign-in, `az login`) what of the stack is left: the resource group\n"
    "and what is still in it (retainOutputs keeps the group and its storage account), and the stack's\n"
    "soft-deleted key vaults, which hold their names until purged; each with what it bills or holds and the\n"
    "command that removes or purges it.\n"
    "Exit status: 0 nothing left, 1 something left or Azure could not be asked, 2 the stack or subscription is\n"
    "refused.")


def command(args: Any, services: Callable[[], tuple[Any, Any]] | None = None) -> int:
    from infra.backends import leftovers
    from infra.cli.preflight import against_azure, stack_config_or_line
    from infra.core import naming

    stack_config = stack_config_or_line(args)
    if stack_config is None:
        return 2
    group = naming.resource_group(stack_config.team, args.stack)
    code, answer = against_azure(
        args, services, lambda arm, prices, subscription: (subscription, leftovers.find(arm, subscription, group)),
        arm_fix="you need Reader on the subscription; check `az login`, then try again")
    if code:
        return code
    subscription, found = answer
    print(f"left by stack {args.stack} (resource group {group}) in subscription {subscription}:")
    for item in found:
        print(f"  {item.line()}")
    print(f"{len(found)} left" if found else "  nothing: the stack left no resource, no group and no soft-deleted "
                                              "key vault")
    return 1 if found else 0
