"""Preflight's calls: Azure Resource Manager and the Retail Prices API, read with the deployer's sign-in, and the
checks in order (infra/core/preflight/ gives each verdict). ARM is spoken through azure-mgmt-core's
ARMPipelineClient (the pipeline every azure-mgmt client runs on: bearer token for ARM, ARM's error format,
retries) with each REST spec's path and api-version, so one package serves every API here; the tests point it at a
local HTTPS endpoint that answers as the specs' examples do (tests/infra/backends/arm_endpoint.py).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from infra.core.preflight import image as preflight_image, registry as preflight_registry
from infra.core.preflight import subscription as verdicts
from infra.core.preflight.check import FAIL, WARN, Check
from infra.core.preflight.policy import policy_verdict
from infra.core.preflight.subscription import Needs

ARM = "https://management.azure.com"
ARM_SCOPE = f"{ARM}/.default"
RETAIL_PRICES = "https://prices.azure.com"
# Each API's version, the one whose REST spec (Azure/azure-rest-api-specs) the paths and answers follow.
API = {
    "providers": "2021-04-01",  # resources: Providers - List; Subscriptions - List; Resource Groups - Check Existence
    "skus": "2021-07-01",  # compute: Resource Skus - List
    "usages": "2024-07-01",  # compute: Usage - List
    # batch: Location - List Supported Virtual Machine Skus, Location - Get Quotas; Batch Account - Get, - List; Pool -
    # List By Batch Account. 2025-06-01: Batch retires the versions before it (https://github.com/Azure/Batch/issues/140;
    # docs/architecture.md). The account and pool `up` declares keep azure-native's 2024-07-01 (cluster.py says why).
    "batch": "2025-06-01",
    "permissions": "2022-04-01",  # authorization: Permissions - List For Resource Group, - List For Resource
    "images": "2024-07-01",  # compute: Virtual Machine Images - Get (the Batch pool's Marketplace image)
    "agreements": "2021-01-01",  # marketplaceordering: Marketplace Agreements - Get (user-subscription Batch)
    "registry": "2025-11-01",  # containerregistry: Registries - Get (sharedImages' platform registry)
    "roleAssignments": "2022-04-01",  # authorization: Role Assignments - List For Scope (user-subscription Batch)
    "policy": "2024-10-01",  # policyinsights: Policy Restrictions - Check At (Resource Group | Subscription) Scope
}


class Arm:
    """GET and POST on Azure Resource Manager with `credential` (a TokenCredential); `base_url` and
    `connection_verify` point it elsewhere (the tests' local endpoint and its certificate)."""

    def __init__(self, credential: Any, base_url: str = ARM, connection_verify: Any = True, retry_total: int = 3):
        from azure.core.pipeline import policies
        from azure.core.pipeline.transport import RequestsTransport
        from azure.mgmt.core import ARMPipelineClient
        from azure.mgmt.core.policies import ARMChallengeAuthenticationPolicy, ARMHttpLoggingPolicy

        self.base_url = base_url.rstrip("/")
        self.credential = credential  # its token's claims say who is signed in (preflight's deployer check)
        self._client = ARMPipelineClient(base_url=self.base_url, transport=RequestsTransport(
            connection_verify=connection_verify, connection_timeout=10, read_timeout=60), policies=[
            policies.HeadersPolicy(), policies.UserAgentPolicy("dltrain-preflight"),
            policies.RetryPolicy(retry_total=retry_total), ARMChallengeAuthenticationPolicy(credential, ARM_SCOPE),
            ARMHttpLoggingPolicy()])

    def _send(self, method: str, path: str, api_version: str, params: Mapping[str, str] | None = None,
              body: Any = None, missing_ok: bool = False) -> Any:
        from azure.core.exceptions import HttpResponseError
        from azure.core.rest import HttpRequest
        from azure.mgmt.core.exceptions import ARMErrorFormat

        url = path if path.startswith("http") else f"{self.base_url}{path}"
        query = None if "api-version=" in url else {"api-version": api_version, **(params or {})}
        response = self._client.send_request(HttpRequest(method, url, params=query, json=body))
        if missing_ok and response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise HttpResponseError(response=response, error_format=ARMErrorFormat)
        return response.json() if response.content else {}

    def get(self, path: str, api_version: str, params: Mapping[str, str] | None = None,
            missing_ok: bool = False) -> Any:
        return self._send("GET", path, api_version, params, missing_ok=missing_ok)

    def post(self, path: str, api_version: str, body: Any) -> Any:
        return self._send("POST", path, api_version, body=body)

    def list(self, path: str, api_version: str, params: Mapping[str, str] | None = None) -> list[dict]:
        """value[] of every page (nextLink, as ARM's list operations page)."""
        items: list[dict] = []
        page = self.get(path, api_version, params)
        while True:
            items += page.get("value") or []
            if not page.get("nextLink"):
                return items
            page = self.get(page["nextLink"], api_version)

    def close(self) -> None:
        self._client.close()


class RetailPrices:
    """The Azure Retail Prices API (no sign-in): GET /api/retail/prices?$filter=..."""

    def __init__(self, base_url: str = RETAIL_PRICES, connection_verify: Any = True):
        from azure.core import PipelineClient
        from azure.core.pipeline import policies
        from azure.core.pipeline.transport import RequestsTransport

        self._client = PipelineClient(base_url.rstrip("/"), transport=RequestsTransport(
            connection_verify=connection_verify, connection_timeout=10, read_timeout=30),
            policies=[policies.HeadersPolicy(), policies.RetryPolicy(retry_total=2)])
        self.base_url = base_url.rstrip("/")

    def items(self, size: str, region: str) -> list[dict]:
        from azure.core.exceptions import HttpResponseError
        from azure.core.rest import HttpRequest

        query = (f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}' and armSkuName eq '{size}' "
                 "and priceType eq 'Consumption'")
        url, params, items = f"{self.base_url}/api/retail/prices", {"$filter": query}, []
        while url:
            response = self._client.send_request(HttpRequest("GET", url, params=params))
            if response.status_code >= 400:
                raise HttpResponseError(response=response)
            page = response.json()
            items += page.get("Items") or []
            url, params = page.get("NextPageLink"), None
        return items

    def close(self) -> None:
        self._client.close()


def subscription_of(arm: Arm, hint: str | None) -> str:
    """`hint` (--subscription, the stack file's azure-native:subscriptionId or AZURE_SUBSCRIPTION_ID), else the
    one enabled subscription the sign-in sees (Subscriptions - List); several: a ValueError naming them."""
    if hint:
        return hint
    enabled = [s for s in arm.list("/subscriptions", API["providers"]) if s.get("state") == "Enabled"]
    if len(enabled) == 1:
        return str(enabled[0]["subscriptionId"])
    names = ", ".join(f"{s.get('subscriptionId')} ({s.get('displayName')})" for s in enabled) or "none"
    raise ValueError(f"your sign-in sees {len(enabled)} enabled subscriptions ({names}): pass --subscription ID, or "
                     "set azure-native:subscriptionId in the stack file")


def _guarded(name: str, check: Callable[[], list[Check]]) -> list[Check]:
    """A check Azure refuses to answer (403: no read access; anything else) fails alone, in one line; the others
    still run."""
    from azure.core.exceptions import HttpResponseError

    from infra.backends.shared import status_line

    try:
        return check()
    except HttpResponseError as err:
        return [Check(name, FAIL, f"Azure refused the question ({status_line(err)}): you need Reader on the "
                                  "subscription for preflight to answer it")]


def _permissions_at(arm: Arm, resource_id: str) -> list[dict] | None:
    """The caller's permissions at a resource (Permissions - List For Resource), or None where ARM answers that it
    is not there for the caller: 404, or 403 (its subscription is not visible to the sign-in)."""
    from azure.core.exceptions import HttpResponseError

    try:
        return arm.list(f"{resource_id.rstrip('/')}/providers/Microsoft.Authorization/permissions",
                        API["permissions"])
    except HttpResponseError as err:
        if err.status_code in (403, 404):
            return None
        raise


def _pool_image(arm: Arm, sub: str, needs: Needs) -> Check:
    image = needs.pool_image
    answer = arm.get(f"{sub}/providers/Microsoft.Compute/locations/{needs.location}/publishers/{image['publisher']}/"
                     f"artifacttypes/vmimage/offers/{image['offer']}/skus/{image['sku']}/versions/{image['version']}",
                     API["images"], missing_ok=True)
    plan = preflight_image.plan_of(answer)
    user_subscription = needs.pool_allocation == "user-subscription"
    agreement = arm.get(f"{sub}/providers/Microsoft.MarketplaceOrdering/offerTypes/virtualmachine/publishers/"
                        f"{plan['publisher']}/offers/{plan['product']}/plans/{plan['name']}/agreements/current",
                        API["agreements"]) if plan and user_subscription else None
    return preflight_image.pool_image_verdict(image, needs.location, answer, user_subscription, agreement)


def run(needs: Needs, subscription: str, arm: Arm, prices: RetailPrices | None,
        report: Callable[[Check], None] = lambda check: None) -> list[Check]:
    """Every check, in order of what most often stops `up`: providers, the size, quota, roles, Azure Policy, the
    price; `report` sees each as it is decided."""
    sub = f"/subscriptions/{subscription}"
    group_id = f"{sub}/resourceGroups/{needs.resource_group}"
    checks: list[Check] = []
    offers: dict[str, verdicts.Offer] = {}

    def step(name: str, check: Callable[[], list[Check]]) -> None:
        for one in _guarded(name, check):
            checks.append(one)
            report(one)

    step("providers", lambda: [verdicts.providers_verdict(needs.namespaces, arm.list(f"{sub}/providers",
                                                                                     API["providers"]))])

    def sizes() -> list[Check]:
        skus = arm.list(f"{sub}/providers/Microsoft.Compute/skus", API["skus"],
                        {"$filter": f"location eq '{needs.location}'"})
        role = "Batch pool" if needs.backend == "batch" else "Azure ML cluster"
        found = []
        for size, what, spot in [(needs.gpu.name, role, needs.spot)] + [(s, "NFS server", False)
                                                                          for s in needs.vm_sizes]:
            check, offer = verdicts.sku_verdict(size, needs.location, skus, what, spot)
            found.append(check)
            if offer:
                offers[size] = offer
        if needs.backend == "batch":
            found.append(verdicts.batch_sku_verdict(needs.gpu.name, needs.location, arm.list(
                f"{sub}/providers/Microsoft.Batch/locations/{needs.location}/virtualMachineSkus", API["batch"])))
        return found

    step("sizes", sizes)

    def quota() -> list[Check]:
        family = offers.get(needs.gpu.name, verdicts.Offer(needs.gpu.name, needs.gpu.quota_family, needs.gpu.vcpus))
        demands = [("NFS server", offers[s].family, offers[s].vcpus) for s in needs.vm_sizes if s in offers]
        spot_vcpus = 0
        found = []
        # AmlCompute nodes, and a user-subscription Batch account's ("The quotas in your subscription for regional
        # compute cores, per-series compute cores ... are used and enforced. Standard Batch core quotas don't apply":
        # https://learn.microsoft.com/azure/batch/batch-account-create-portal), count against the subscription's
        # compute quota.
        on_subscription = needs.backend == "azureml" or needs.pool_allocation == "user-subscription"
        if on_subscription:
            if needs.spot:
                spot_vcpus = needs.gpu_vcpus
            else:
                demands.append((f"{needs.max_nodes} x {needs.gpu.name}", family.family, needs.gpu_vcpus))
        if needs.backend == "batch":
            batch = f"{sub}/providers/Microsoft.Batch"
            found.append(verdicts.batch_accounts_verdict(needs, subscription, arm.get(
                f"{batch}/locations/{needs.location}/quotas", API["batch"]), arm.list(f"{batch}/batchAccounts",
                                                                                       API["batch"])))
            path = f"{group_id}/providers/Microsoft.Batch/batchAccounts/{needs.batch_account}"
            account = arm.get(path, API["batch"], missing_ok=True)
            if not on_subscription:  # the account's own core quota (batch-service)
                found.append(verdicts.batch_quota_verdict(needs, family.family, account))
            limits = verdicts.batch_limits_verdict(needs, account, arm.list(f"{path}/pools", API["batch"])
                                                   if account else [], needs.batch_pool)
            if limits:
                found.append(limits)
        if demands or spot_vcpus:
            usages = arm.list(f"{sub}/providers/Microsoft.Compute/locations/{needs.location}/usages", API["usages"])
            found.insert(0, verdicts.usage_verdict(demands, needs.location, usages, spot_vcpus))
        return found

    step("quota", quota)
    if needs.pool_allocation == "user-subscription":
        step("batch service role", lambda: [verdicts.batch_service_role_verdict(needs, subscription, arm.list(
            f"{sub}/providers/Microsoft.Authorization/roleAssignments", API["roleAssignments"],
            {"$filter": f"principalId eq '{needs.batch_service_object_id}'"}))])
    group_exists = arm.get(group_id, API["providers"], missing_ok=True) is not None

    def roles() -> list[Check]:
        scope = group_id if group_exists else sub
        actions = needs.write_actions if group_exists else (
            ("Microsoft.Resources/subscriptions/resourceGroups/write",) + needs.write_actions)
        permissions = arm.list(f"{scope}/providers/Microsoft.Authorization/permissions", API["permissions"])
        return [verdicts.permissions_verdict(actions, permissions, scope, group_exists)]

    step("roles", roles)
    if needs.pool_image:
        step(preflight_image.NAME, lambda: [_pool_image(arm, sub, needs)])
    if needs.platform_registry:
        def platform_registry() -> list[Check]:
            permissions = _permissions_at(arm, needs.platform_registry)
            registry = arm.get(needs.platform_registry, API["registry"], missing_ok=True) \
                if preflight_registry.may_read(permissions) else None
            return [preflight_registry.platform_registry_verdict(needs.platform_registry, permissions, registry)]

        step(preflight_registry.NAME, platform_registry)

    def policy() -> list[Check]:
        found = []
        for target in needs.policy_targets:
            on_group = group_exists and target.content["type"] != "Microsoft.Resources/resourceGroups"
            path = (group_id if on_group else sub) + "/providers/Microsoft.PolicyInsights/checkPolicyRestrictions"
            details = {"resourceContent": target.content, "apiVersion": target.api_version}
            if not on_group and target.content["type"] != "Microsoft.Resources/resourceGroups":
                details["scope"] = group_id  # where it will be created: the group `up` makes first
            found.append(policy_verdict(target, arm.post(path, API["policy"],
                                                                  {"resourceDetails": details}),
                                                        needs.resource_group, group_exists))
        return found

    step("policy", policy)
    if prices is not None:  # the price informs, it never stops `up`
        from azure.core.exceptions import AzureError

        from infra.backends.shared import status_line

        try:
            one = verdicts.price_verdict(needs.gpu, needs.location, needs.spot,
                                         prices.items(needs.gpu.name, needs.location))
        except AzureError as err:
            one = Check(f"price {needs.gpu.name}", WARN, f"the Retail Prices API did not answer ({status_line(err)})")
        checks.append(one)
        report(one)
    return checks
