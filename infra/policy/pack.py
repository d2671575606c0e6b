"""CrossGuard policies made from the pure checks in infra/core/security.py (no PolicyPack here: constructing
one starts a gRPC server and blocks, so the tests import this module, and __main__.py builds the pack)."""
from __future__ import annotations

from pulumi_policy import EnforcementLevel, ResourceValidationPolicy

from infra.core.security import RESOURCE_CHECKS, TAG_CHECK, Check

PACK_NAME = "dltrain-security"


def _policy(check: Check) -> ResourceValidationPolicy:
    def validate(args, report_violation) -> None:
        if check.applies_to(args.resource_type):
            message = check.validate(args.props)
            if message:
                report_violation(message)

    return ResourceValidationPolicy(name=check.name, description=check.description, validate=validate,
                                    enforcement_level=EnforcementLevel.MANDATORY)


def policies() -> list[ResourceValidationPolicy]:
    return [_policy(check) for check in [*RESOURCE_CHECKS, TAG_CHECK]]
