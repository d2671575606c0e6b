"""CrossGuard policies made from the pure checks in infra/core/security/resources.py, applied by its one loop
(`apply_checks`) as `plan` and the tests apply them (no PolicyPack here: constructing one starts a gRPC server
and blocks, so the tests import this module, and __main__.py builds the pack)."""
from __future__ import annotations

from pulumi_policy import EnforcementLevel, ResourceValidationPolicy, StackValidationPolicy

from infra.core.security import resources as security
from infra.core.security.resources import PER_RESOURCE_CHECKS, VNET_RULE_CHECK, Check, StackCheck, Subject, apply_checks

PACK_NAME = "dltrain-security"


def _policy(check: Check) -> ResourceValidationPolicy:
    def validate(args, report_violation) -> None:
        for finding in apply_checks([Subject(args.resource_type, args.props, args.urn)], [check]):
            if finding.message:
                report_violation(finding.message)

    return ResourceValidationPolicy(name=check.name, description=check.description, validate=validate,
                                    enforcement_level=EnforcementLevel.MANDATORY)


def _named_subnets(resource, resources) -> list:
    """The subnets a resource's VNet rules name: by ID where the engine knows it (`up`), and the subnets the
    rules' property depends on, which a preview knows before any ID exists."""
    by_id = {r.props.get("id"): r for r in resources
             if r.resource_type == security.SUBNET and isinstance(r.props.get("id"), str)}
    prop = security.vnet_rules(resource.resource_type).path[0]
    named = {d.urn: d for d in (resource.property_dependencies or {}).get(prop, []) if d.resource_type == security.SUBNET}
    for subnet_id in security.vnet_rule_subnet_ids(resource.resource_type, resource.props):
        if subnet_id in by_id:
            named[by_id[subnet_id].urn] = by_id[subnet_id]
    return list(named.values())


def _vnet_rule_policy() -> StackValidationPolicy:
    def validate(args, report_violation) -> None:
        subjects = [Subject(r.resource_type, r.props, r.urn, tuple(s.props for s in _named_subnets(r, args.resources)))
                    for r in args.resources if security.vnet_rules(r.resource_type)]
        for finding in apply_checks(subjects, [VNET_RULE_CHECK]):
            if finding.message:
                report_violation(finding.message, finding.subject.name)

    return StackValidationPolicy(name=VNET_RULE_CHECK.name, description=VNET_RULE_CHECK.description,
                                 validate=validate, enforcement_level=EnforcementLevel.MANDATORY)


def _stack_group(resources) -> str:
    """The stack's own resource group's name (its ResourceGroup resource; "" if the stack declares none)."""
    return next((str(r.props.get("resourceGroupName") or "") for r in resources
                 if r.resource_type == security.RESOURCE_GROUP), "")


def _stack_check_policy(check: StackCheck) -> StackValidationPolicy:
    """A check against the stack's own resource group, which one resource's properties do not carry."""
    def validate(args, report_violation) -> None:
        group = _stack_group(args.resources)
        subjects = [Subject(r.resource_type, r.props, r.urn, resource_group=group) for r in args.resources]
        for finding in apply_checks(subjects, [check]):
            if finding.message:
                report_violation(finding.message, finding.subject.name)

    return StackValidationPolicy(name=check.name, description=check.description, validate=validate,
                                 enforcement_level=EnforcementLevel.MANDATORY)


def policies() -> list:
    return [*(_stack_check_policy(check) if isinstance(check, StackCheck) else _policy(check)
              for check in PER_RESOURCE_CHECKS), _vnet_rule_policy()]
