"""Who runs `pulumi up`, against the stack's deployerPrincipalType (User | ServicePrincipal), pure.

`up` assigns the deployer its own data-plane roles (plan lists them), and a role assignment's principalType must be
the principal's: Azure refuses an assignment whose principal type is wrong (docs/ci.md). A team's first deploy from
the pipeline with `deployerPrincipalType: User` (what new-team wrote before `--ci`) then fails half-way through `up`.
Two places can tell before that:

- plan, offline, from the environment the azure-native provider signs in with: ARM_CLIENT_ID with ARM_USE_OIDC,
  ARM_CLIENT_SECRET, ARM_CLIENT_CERTIFICATE_PATH or ARM_USE_MSI is a service principal (or managed identity, which
  role assignments also type ServicePrincipal); without them the provider uses the Azure CLI's sign-in, which plan
  does not ask (https://www.pulumi.com/registry/packages/azure-native/installation-configuration/).
- preflight, from the claims of the Azure Resource Manager token it signs in with: `idtyp` (`app` or `user`) where
  the token carries it, else `scp` (delegated permissions: only a user's token has them) against `roles`/none (an
  application's token) (https://learn.microsoft.com/entra/identity-platform/access-token-claims-reference: the
  page says claims are present only when a value fills them and `idtyp` is optional, so both are read).
"""
from __future__ import annotations

import base64
import json
from collections.abc import Mapping

USER, SERVICE_PRINCIPAL = "User", "ServicePrincipal"
_TRUE = ("1", "true", "yes")


def from_provider_environment(env: Mapping[str, str]) -> tuple[str, str] | None:
    """(principal type, how it was told) of the identity the azure-native provider signs in as from `env`, or None
    (the Azure CLI's sign-in, which is not asked offline)."""
    client = env.get("ARM_CLIENT_ID", "").strip()
    if not client:
        return None
    for name, means in (("ARM_USE_OIDC", "OIDC"), ("ARM_USE_MSI", "a managed identity")):
        if env.get(name, "").strip().lower() in _TRUE:
            return SERVICE_PRINCIPAL, f"ARM_CLIENT_ID with {name} ({means}): the azure-native provider signs in as it"
    for name in ("ARM_CLIENT_SECRET", "ARM_CLIENT_CERTIFICATE_PATH"):
        if env.get(name):
            return SERVICE_PRINCIPAL, f"ARM_CLIENT_ID with {name}: the azure-native provider signs in as it"
    return None


def claims_of(token: str) -> dict | None:
    """An Entra access token's (a JWT's) claims, or None when it is not one. The signature is not checked: the token
    is our own, read for who we are, never to grant anything."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, TypeError):
        return None
    return claims if isinstance(claims, dict) else None


def from_token(token: str) -> str | None:
    """The principal type an Entra access token was issued to, from its claims; None when it is not a JWT."""
    claims = claims_of(token)
    if claims is None:
        return None
    kind = str(claims.get("idtyp", "")).lower()
    if kind in ("app", "user"):
        return SERVICE_PRINCIPAL if kind == "app" else USER
    return USER if claims.get("scp") else SERVICE_PRINCIPAL


def mismatch(declared: str, found: str, how: str, stack: str) -> str | None:
    """The one line refusing a stack whose deployerPrincipalType is not who runs `up`, or None."""
    if declared == found:
        return None
    fix = ("`python -m infra new-team NAME --ci` writes it so for the pipeline" if found == SERVICE_PRINCIPAL else
           "User is what `az login` as a person needs")
    return (f"Pulumi.{stack}.yaml: deployerPrincipalType is {declared}, but `pulumi up` here signs in as a {found} "
            f"({how}); Azure refuses the deployer's role assignments with the wrong principalType half-way through "
            f"`up`: set deployerPrincipalType: {found} ({fix})")


# Role Based Access Control Administrator: the role the pipeline's deploy identity holds with a condition that admits
# only the roles the program assigns (infra/core/security/ci_roles.py, docs/ci.md); each new stack's custom role is a new GUID
# in it (role_ids.custom_role_id), so the condition must be updated before that stack's first deploy.
RBAC_ADMINISTRATOR = "f58310d9-a9f6-439a-9e8d-f62e7b41a168"


def object_id(token: str) -> str | None:
    """The `oid` claim (the principal's object ID) of an Entra access token, or None."""
    claims = claims_of(token)
    return str(claims.get("oid") or "") or None if claims is not None else None


def condition_gap(assignments: list[dict], needed: dict[str, str]) -> list[str] | None:
    """The names of the roles in `needed` (GUID -> name) that the signed-in principal's Role Based Access Control
    Administrator assignments do not admit, from their conditions (Role Assignments - List For Scope's
    `properties.condition`); None when it holds no such assignment, or one without a condition (then the `roles`
    check's permissions answer alone)."""
    conditions = []
    for assignment in assignments:
        props = assignment.get("properties") or {}
        if str(props.get("roleDefinitionId", "")).lower().rstrip("/").endswith(RBAC_ADMINISTRATOR):
            if not props.get("condition"):
                return None  # unconstrained: it may assign any role
            conditions.append(str(props["condition"]).lower())
    if not conditions:
        return None
    return [name for guid, name in sorted(needed.items(), key=lambda item: item[1])
            if not any(guid.lower() in condition for condition in conditions)]


def condition_line(missing: list[str], subscription: str) -> str:
    """What the pipeline's first job for a new stack says when the condition lacks its roles: what to run, who."""
    return (f"the deploy identity's Role Based Access Control Administrator condition does not admit "
            f"{', '.join(missing)}, which `up` assigns: the subscription's Owner (or a User Access Administrator) runs "
            f"`az role assignment update` on that assignment with the condition of `python -m infra ci-roles "
            f"--subscription {subscription} --condition-only` (docs/ci.md, Identities), once, before this stack's "
            "first deploy")
