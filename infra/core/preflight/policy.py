"""Azure Policy's what-if, pure: a resource's body as ARM would receive it (`arm_body`, for the types organisations'
Deny policies aim at: POLICY_TYPES) and the verdict on Policy Restrictions' answer for it (`policy_verdict`).
The call lives in infra/backends/preflight.py.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.core.preflight.check import FAIL, OK, Check


@dataclass(frozen=True)
class PolicyTarget:
    """A resource as ARM would receive it (resourceContent of checkPolicyRestrictions) and its API version."""

    label: str  # e.g. "storage account stdev1234"
    api_version: str
    content: dict[str, Any]


# The resources whose body is checked against Azure Policy: organisations' Deny policies aim at these (storage,
# key vaults, registries, VMs, Batch, Azure ML, resource groups' tags). azure-native type -> (ARM type, the input
# that is the resource's name, the API version azure-native 3.x sends, as its SDK's docstrings say "Uses Azure REST
# API version ..."). azure-native flattens ARM's `properties` into the inputs and names some keys as the SDKs do
# (x-ms-client-name); RENAMES turns those back into the wire names of the REST specs.
POLICY_TYPES = {
    "azure-native:resources:ResourceGroup": ("Microsoft.Resources/resourceGroups", "resourceGroupName", "2021-04-01"),
    "azure-native:storage:StorageAccount": ("Microsoft.Storage/storageAccounts", "accountName", "2024-01-01"),
    # The version azure-native 3.x declares the account with (infra/backends/batch/cluster.py BATCH_API_VERSION), kept
    # here on purpose: Azure Policy judges the body `up` will send. Preflight's own Batch calls use 2025-06-01.
    "azure-native:batch:BatchAccount": ("Microsoft.Batch/batchAccounts", "accountName", "2024-07-01"),
    "azure-native:containerregistry:Registry": ("Microsoft.ContainerRegistry/registries", "registryName",
                                                "2023-01-01-preview"),
    "azure-native:keyvault:Vault": ("Microsoft.KeyVault/vaults", "vaultName", "2024-11-01"),
    "azure-native:machinelearningservices:Workspace": ("Microsoft.MachineLearningServices/workspaces",
                                                       "workspaceName", "2025-12-01"),
    "azure-native:compute:VirtualMachine": ("Microsoft.Compute/virtualMachines", "vmName", "2024-11-01"),
}
# Storage's REST spec (storage.json): supportsHttpsTrafficOnly is the SDKs' enable_https_traffic_only, IPRule.value
# their ip_address_or_range.
RENAMES = {"enableHttpsTrafficOnly": "supportsHttpsTrafficOnly", "iPAddressOrRange": "value"}
TOP_LEVEL = ("location", "tags", "sku", "kind", "identity", "zones", "plan", "extendedLocation", "properties")


def arm_body(type_: str, inputs: Mapping[str, Any], name_key: str, subscription: str, mock_subscription: str):
    def wire(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {RENAMES.get(k, k): wire(v) for k, v in value.items()}
        if isinstance(value, list):
            return [wire(v) for v in value]
        if isinstance(value, str):  # the offline evaluation's IDs carry the mock subscription
            return value.replace(mock_subscription, subscription)
        return value

    body: dict[str, Any] = {"type": type_, "name": inputs.get(name_key, "")}
    properties = dict(inputs.get("properties") or {})
    for key, value in inputs.items():
        if key in TOP_LEVEL and key != "properties":
            body[key] = value
        elif key not in ("properties", "resourceGroupName", name_key):
            properties[key] = value
    identity = body.get("identity")
    if isinstance(identity, Mapping) and isinstance(identity.get("userAssignedIdentities"), list):
        # azure-native v3 takes a list of IDs; ARM's wire format is a map of ID -> {}
        body["identity"] = {**identity, "userAssignedIdentities": {i: {} for i in identity["userAssignedIdentities"]}}
    if properties:
        body["properties"] = properties
    return wire(body)


# (e) Azure Policy: Policy Restrictions - Check At Resource Group Scope / Check At Subscription Scope
# (https://learn.microsoft.com/rest/api/policyinsights/policy-restrictions): for a resource body, the fields an
# assigned policy restricts (fieldRestrictions[].restrictions[] with result Required | Removed | Deny) and the
# evaluation of the body itself (contentEvaluationResult.policyEvaluations[] with evaluationResult NonCompliant and
# effectDetails.policyEffect Deny: ARM would refuse it with RequestDisallowedByPolicy).
def _field_value(content: Mapping[str, Any], path: str) -> Any:
    value: Any = content
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part, value.get("properties", {}).get(part) if isinstance(value.get("properties"),
                                                                                    Mapping) else None)
    return value


def policy_verdict(target: PolicyTarget, answer: Mapping[str, Any], group: str, group_exists: bool = True) -> Check:
    problems, assignments = [], []
    for evaluation in (answer.get("contentEvaluationResult") or {}).get("policyEvaluations") or []:
        effect = str((evaluation.get("effectDetails") or {}).get("policyEffect", ""))
        if evaluation.get("evaluationResult") == "NonCompliant" and effect.lower() == "deny":
            info = evaluation.get("policyInfo") or {}
            assignments.append(info.get("policyAssignmentId"))
            fields = [e.get("path") or e.get("expression") for e in (evaluation.get("evaluationDetails") or {})
                      .get("evaluatedExpressions") or [] if e.get("path") or e.get("expression")]
            problems.append(f"assignment {info.get('policyAssignmentId')} (definition "
                            f"{info.get('policyDefinitionId')}) denies it on {', '.join(fields) or 'its body'}")
    for restricted in answer.get("fieldRestrictions") or []:
        path = str(restricted.get("field", ""))
        ours = _field_value(target.content, path)
        for restriction in restricted.get("restrictions") or []:
            result = restriction.get("result")
            reason = restriction.get("reason") or ""
            assignment = (restriction.get("policy") or {}).get("policyAssignmentId")
            assignments.append(assignment)
            values = [str(v).lower().replace(" ", "") for v in restriction.get("values") or []]
            if result == "Deny" and ours is not None and str(ours).lower().replace(" ", "") in values:
                problems.append(f"{path} {ours!r} is denied by {assignment} ({reason})")
            elif result == "Required" and ours is None:
                example = restriction.get("defaultValue") or (restriction.get("values") or [None])[0]
                problems.append(f"{path} is required by {assignment} ({reason}"
                                + (f"; e.g. {example!r}" if example else "") + ")")
    name = f"policy {target.label}"
    if not problems:
        return Check(name, OK, "no assigned Deny policy refuses it")
    first = next((a for a in assignments if a), "ASSIGNMENT_ID")
    where = target.content.get("location")
    create = "" if group_exists else f"`az group create --name {group} --location {where}`, then "
    return Check(name, FAIL, "; ".join(problems) + ": change the stack so the field complies, or have the "
                             f"assignment's owner exempt the group ({create}`az policy exemption create --name "
                             f"dltrain-{group} --policy-assignment {first} --exemption-category Waiver "
                             f"--resource-group {group}`)")
