"""preflight's check of the platform registry a `sharedImages` stack imports from (pure; the call is in
infra/backends/preflight.py): may the identity running `up` read it?

`up` imports each image with the deployer's own Entra identity, naming the platform registry by resource ID
(infra/components/image_import.py). ACR's import page, "Import from an Azure container registry in the same AD
tenant": "Your identity must have Microsoft Entra permissions to read from the source registry (Reader role) and to
import to the target registry (Contributor role, or a custom role that allows the importImage action)"
(https://learn.microsoft.com/azure/container-registry/container-registry-import-images). The target is the stack's
own registry, inside the group the `roles` check already covers; the source is outside every stack, granted once
by whoever administers it, so `up` would fail there only in its import, after the registry is created.

The page names a role, not the actions ACR checks on the source: the check asks for the registry's read and pull
actions, which Reader holds (`*/read`) and so does every wider role that works (Contributor, Owner, Container
Registry Data Importer and Data Reader); AcrPull alone (pull/read only) is not the Reader the page asks for. The
answer is Permissions - List For Resource on the registry (https://learn.microsoft.com/rest/api/authorization/
permissions/list-for-resource, 2022-04-01: the caller's value[{actions, notActions}] there, inherited ones included).
Once readable, the registry itself (Registries - Get, containerregistry 2025-11-01 RegistryGet.json: properties
{publicNetworkAccess, networkRuleSet.defaultAction, privateEndpointConnections, networkRuleBypassOptions,
roleAssignmentMode}): "If the source registry and/or the target registry has a private endpoint or registry firewall
rules are applied, ensure that the restricted registry allows trusted services to access the network" (the import
page), i.e. networkRuleBypassOptions AzureServices (`az acr update --allow-trusted-services true`,
https://learn.microsoft.com/azure/container-registry/allow-access-trusted-services).
Not covered: a registry in ABAC mode (roleAssignmentMode AbacRepositoryPermissions), where repository content is
granted by data actions instead; the docs read here do not say what import needs from such a source, so it warns.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from infra.core.preflight.check import FAIL, OK, WARN, Check, allowed
from infra.core.config.shared_images import SOURCE_REGISTRY_ROLE

NAME = "platform registry"
READ_ACTIONS = ("Microsoft.ContainerRegistry/registries/read", "Microsoft.ContainerRegistry/registries/pull/read")
ROLE = SOURCE_REGISTRY_ROLE  # Reader: the role the import page names for the source registry (config/shared_images.py)


def grant_command(registry_id: str) -> str:
    return (f"az role assignment create --assignee <object ID of whoever runs `up`: `az ad signed-in-user show "
            f"--query id -o tsv`, or the CI identity's> --role {ROLE} --scope {registry_id}")


def may_read(permissions: Sequence[Mapping[str, Any]] | None) -> bool:
    return permissions is not None and all(allowed(action, permissions) for action in READ_ACTIONS)


def platform_registry_verdict(registry_id: str, permissions: Sequence[Mapping[str, Any]] | None,
                              registry: Mapping[str, Any] | None = None) -> Check:
    """`permissions`: the caller's at the registry, or None where Azure says the registry is not there for it
    (404, or 403: a sign-in without access to the registry's subscription cannot see it either); `registry`: its
    Registries - Get body (read once the caller may)."""
    name = registry_id.rstrip("/").rsplit("/", 1)[-1]
    fix = (f"sharedImages imports from it with your identity, which needs {ROLE} there (the role ACR's import page "
           f"names for the source registry): whoever administers it runs `{grant_command(registry_id)}`")
    if permissions is None:
        return Check(NAME, FAIL, f"{registry_id} is not there for your sign-in (not found, or no access to it); "
                                 f"check sharedImages' registry (`az acr show --name {name} --query id -o tsv`). "
                                 f"If it is right, {fix}")
    denied = [action for action in READ_ACTIONS if not allowed(action, permissions)]
    if denied:
        return Check(NAME, FAIL, f"you may not read {name} ({', '.join(denied)} denied), so `up` fails at its image "
                                 f"import: {fix}")
    props = (registry or {}).get("properties") or {}
    restricted = [why for why, applies in (
        ("public network access disabled", str(props.get("publicNetworkAccess", "")).lower() == "disabled"),
        ("firewall default action Deny", str((props.get("networkRuleSet") or {}).get("defaultAction", "")).lower()
         == "deny"),
        ("a private endpoint", bool(props.get("privateEndpointConnections")))) if applies]
    if restricted and str(props.get("networkRuleBypassOptions", "")).lower() != "azureservices":
        return Check(NAME, FAIL, f"{name} is network-restricted ({', '.join(restricted)}) and does not let trusted "
                                 "Azure services through, so ACR import cannot read it: whoever administers it runs "
                                 f"`az acr update --name {name} --allow-trusted-services true`")
    if str(props.get("roleAssignmentMode", "")).lower() == "abacrepositorypermissions":
        return Check(NAME, WARN, f"you may read {name}, but it grants repositories by ABAC conditions "
                                 "(roleAssignmentMode AbacRepositoryPermissions), where the docs read here do not say "
                                 "what import needs: if `up` fails at its import, grant Container Registry Repository "
                                 "Reader there")
    return Check(NAME, OK, f"you may read {name}, the sharedImages registry `up` imports from" +
                 (f" (restricted: {', '.join(restricted)}; trusted services pass)" if restricted else ""))
