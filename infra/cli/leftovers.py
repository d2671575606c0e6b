"""`python -m infra leftovers --stack NAME`: after `pulumi destroy`, what of the stack still exists, bills or holds
a name, one line each with the command that removes or purges it (infra/backends/leftovers.py asks Azure,
infra/core/leftovers.py judges). Exit status: 0 nothing left, 1 something left (or Azure could not be asked), 2
the stack file or the subscription is refused."""
from __future__ import annotations

import sys
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
    from infra.core import config, naming

    try:
        stack_config = config.from_stack_file(args.stack, args.project_dir)
    except config.ConfigError as err:
        print(f"error: Pulumi.{args.stack}.yaml: {err}", file=sys.stderr)
        return 2
    from azure.core.exceptions import AzureError

    from infra.backends import leftovers, preflight
    from infra.backends.shared import status_line
    from infra.cli.preflight import azure_services, subscription_hint
    from training.errors import UsageError

    arm = prices = None
    group = naming.resource_group(stack_config.team, args.stack)
    try:
        arm, prices = (services or azure_services)()
        subscription = preflight.subscription_of(arm, subscription_hint(args, args.project_dir /
                                                                        f"Pulumi.{args.stack}.yaml"))
        found = leftovers.find(arm, subscription, group)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except UsageError as err:  # not signed in
        print(f"error: {err}", file=sys.stderr)
        return 1
    except AzureError as err:
        print(f"error: cannot ask Azure Resource Manager ({status_line(err)}): you need Reader on the "
              "subscription; check `az login`, then try again", file=sys.stderr)
        return 1
    finally:
        for client in (arm, prices):
            if client is not None:
                client.close()
    print(f"left by stack {args.stack} (resource group {group}) in subscription {subscription}:")
    for item in found:
        print(f"  {item.line()}")
    print(f"{len(found)} left" if found else "  nothing: the stack left no resource, no group and no soft-deleted "
                                              "key vault")
    return 1 if found else 0
