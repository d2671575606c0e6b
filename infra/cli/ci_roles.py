"""`python -m infra ci-roles --subscription ID`: the roles the fleet pipeline's deploy identity may grant in that
subscription, and the condition that limits its Role Based Access Control Administrator assignment to them
(infra/core/security/ci_roles.py; docs/ci.md, "Identities"). Read offline from the stack files here: those whose
`azure-native:subscriptionId` is ID, and those that set none (they deploy to whatever subscription the deployer
signs in to: the pipeline's AZURE_SUBSCRIPTION_ID). A stack added later brings its own custom role: run it again
and update the assignment's condition (`az role assignment update`). Key Vault Secrets Officer is admitted only
when a stack there sets batchPoolAllocation user-subscription, and only to its batchServiceObjectId."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from infra import REPO_ROOT
from infra.core.security import ci_roles, role_ids
from infra.core.config import stack as config, shared_images
from infra.core.config.schema import ConfigError


def add_parser(commands) -> None:
    verb = commands.add_parser(
        "ci-roles", help="for CI: the roles the pipeline's deploy identity may grant in a subscription, and the "
                         "condition that limits it to them (offline)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verb.add_argument("--subscription", metavar="ID", required=True, help="the subscription the identity deploys to")
    verb.add_argument("--condition-only", action="store_true",
                      help="print the condition alone (for `az role assignment create --condition`)")
    verb.add_argument("--json", action="store_true", help="{stacks, roles: {GUID: name}, condition}")
    verb.add_argument("--project-dir", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    verb.set_defaults(run=command)


def command(args: argparse.Namespace) -> int:
    try:
        subscription = config.check_subscription_id(args.subscription)
    except ConfigError as err:
        print(f"error: --subscription: {err}", file=sys.stderr)
        return 2
    from infra.cli.teams import Fleet  # the stack files, each read once

    fleet = Fleet(args.project_dir)
    stacks, refused, platform = [], [], {}  # platform: a platform registry's ID -> the stacks importing from it
    batch_services: dict[str, list[str]] = {}  # user-subscription Batch stacks: the Batch service's ID -> stacks
    for stack in fleet.engines:
        try:
            cfg = config.from_engine_config(stack, fleet.engine(stack), fleet.project)
        except ConfigError as err:
            refused.append(f"Pulumi.{stack}.yaml: {err}")
            continue
        if cfg.subscription_id in (None, subscription):
            stacks.append((cfg.team, cfg.stack))
            if cfg.registry.shared_images:
                platform.setdefault(cfg.registry.shared_images.registry_id, []).append(cfg.stack)
            if cfg.backend == "batch" and cfg.nodes.pool_allocation == "user-subscription":
                batch_services.setdefault(cfg.nodes.batch_service_object_id.lower(), []).append(cfg.stack)
    if refused:
        print(f"error: {refused[0]} (its custom role cannot be named; `python -m infra plan --stack` says why)",
              file=sys.stderr)
        return 2
    roles = ci_roles.assignable(subscription, stacks)
    bound_to = ci_roles.bound(batch_services)
    text = ci_roles.condition(roles, bound_to)
    if args.condition_only:
        print(text)
    elif args.json:
        print(json.dumps({"stacks": [s for _, s in stacks], "roles": roles,
                          "boundTo": {guid: {"name": role_ids.ROLE_NAMES[guid], "principals": principals}
                                      for guid, principals in bound_to.items()}, "condition": text,
                          "readerOn": {registry: users for registry, users in sorted(platform.items())}},
                         indent=2))
    else:
        print(f"Roles the deploy identity may grant in subscription {subscription} "
              f"(stacks: {', '.join(s for _, s in stacks) or 'none'}):")
        print("\n".join(f"  {guid}  {name}" for guid, name in sorted(roles.items(), key=lambda item: item[1])))
        for guid, principals in bound_to.items():
            users = ", ".join(f"{p} ({', '.join(batch_services[p])})" for p in principals)
            print(f"  {guid}  {role_ids.ROLE_NAMES[guid]}, only to the Batch service of the user-subscription "
                  f"stacks: {users}")
        print(f"\nCondition (version 2.0) for its Role Based Access Control Administrator assignment:\n{text}")
        for registry, users in sorted(platform.items()):
            # sharedImages: `up` imports from the platform registry with the deploy identity (docs/teams.md).
            print(f"\nsharedImages ({', '.join(users)}): the deploy identity needs {shared_images.SOURCE_REGISTRY_ROLE} on "
                  f"the platform registry, granted once by whoever may grant it there:\n  az role assignment create "
                  f"--assignee <its object id> --role \"{shared_images.SOURCE_REGISTRY_ROLE}\" --scope {registry}")
    return 0
