"""Azure Resource Manager and the Retail Prices API at the wire, for preflight: a local HTTPS endpoint that answers
the paths infra/backends/preflight.py asks as the services do, so the real ARM pipeline (azure-mgmt-core's
ARMPipelineClient: bearer token, ARM error format) is what the tests exercise.

Shapes, from Azure/azure-rest-api-specs examples:
- resources 2021-04-01 GetProviders.json (value[{id, namespace, registrationState}]), GetSubscriptions.json
  (value[{subscriptionId, displayName, state}]), a resource group GET (404 ResourceGroupNotFound when missing);
- compute Skus 2021-07-01 ListAvailableResourceSkusForARegion.json (value[{resourceType, name, tier, size, family,
  locations, locationInfo, capabilities[{name, value}], restrictions[{type, values, restrictionInfo, reasonCode}]}]);
- compute usageExamples Usage_List (value[{unit, currentValue, limit, name{value, localizedValue}}]);
- batch 2025-06-01 LocationListVirtualMachineSkus.json (value[{name, familyName, capabilities}]),
  BatchAccountGet.json (properties.dedicatedCoreQuotaPerVMFamily[{name, coreQuota}], lowPriorityCoreQuota, poolQuota,
  activeJobAndJobScheduleQuota ...), LocationGetQuotas.json ({accountQuota}), BatchAccountList.json (value[{id, name,
  type, location, properties}]), PoolList.json (value[{id, name, type, etag, properties}]);
- resources Resources - List By Resource Group (value[{id, name, type, location, kind, sku, tags}]) and keyvault
  2024-11-01 listDeletedVaults.json (value[{id, name, type, properties{vaultId, location, deletionDate,
  scheduledPurgeDate, tags, purgeProtectionEnabled}}]), for leftovers;
- machinelearningservices stable/2025-12-01 Compute/get/AmlCompute.json (properties.properties{vmSize, scaleSettings,
  allocationState, allocationStateTransitionTime, errors, currentNodeCount, targetNodeCount, nodeStateCounts}),
  a compute not there 404;
- authorization 2022-04-01 RoleAssignments_ListForScope (value[{properties{roleDefinitionId, principalId,
  principalType, scope}, id, type, name}]), filtered by `$filter=principalId eq '...'`;
- authorization Permissions - List For Resource Group / For Resource (value[{actions, notActions, dataActions,
  notDataActions}]: `permissions`, or `permissions_at` the scope);
- compute 2024-07-01 VirtualMachineImage_Get_MaximumSet_Gen.json (properties{plan, osDiskImage, hyperVGeneration,
  imageDeprecationStatus}, name, location, id): `vm_image` for any image version, None a 404;
- marketplaceordering 2021-01-01 GetMarketplaceTerms.json (properties{publisher, product, plan, accepted, ...}):
  `terms_accepted`;
- containerregistry 2025-11-01 RegistryGet.json for any registry, its properties overridden by `registry_props`;
- policyinsights 2024-10-01 PolicyRestrictions_CheckAtResourceGroupScope.json (fieldRestrictions,
  contentEvaluationResult.policyEvaluations);
- the Retail Prices API's documented answer (BillingCurrency, Items[{armSkuName, armRegionName, retailPrice,
  productName, skuName, type, unitOfMeasure ...}], NextPageLink):
  https://learn.microsoft.com/rest/api/cost-management/retail-prices/azure-retail-prices;
- containerregistry stable/2025-11-01 RegistryGenerateCredentials.json (202 with Location, then 200 {username,
  passwords[{expiry, name, value}]}), a long-running operation as ARM runs one
  (https://learn.microsoft.com/azure/azure-resource-manager/management/async-operations): the Location answers 202
  until done, an Azure-AsyncOperation (when `credentials_async`) answers {status: InProgress | Succeeded | Failed,
  error{code, message}}.
A request without a bearer token is refused 401 (as ARM does; the prices API needs none); an unknown path 404.
"""
from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlparse

from devtools.rehearsal.local_https import LocalHttps, QuietHandler

SUBSCRIPTION = "35ee058e-5fa0-414c-8145-3ebb8d09b6e2"  # the specs' examples' subscription
OWNER = [{"actions": ["*"], "notActions": [], "dataActions": [], "notDataActions": []}]
# Contributor's permissions as Azure lists them (built-in roles: Contributor).
CONTRIBUTOR = [{"actions": ["*"], "notActions": ["Microsoft.Authorization/*/Delete", "Microsoft.Authorization/*/Write",
                                                  "Microsoft.Authorization/elevateAccess/Action",
                                                  "Microsoft.Blueprint/blueprintAssignments/write",
                                                  "Microsoft.Blueprint/blueprintAssignments/delete",
                                                  "Microsoft.Compute/galleries/share/action",
                                                  "Microsoft.Purview/consents/write",
                                                  "Microsoft.Purview/consents/delete"],
                "dataActions": [], "notDataActions": []}]
READER = [{"actions": ["*/read"], "notActions": [], "dataActions": [], "notDataActions": []}]
POLICY_BASE = "/subscriptions/d8db6de6-2b96-46af-b825-07aef2033c0b/providers/microsoft.authorization"


def vm_sku(name: str, family: str, vcpus: int, location: str, restrictions: list | None = None,
           low_priority: bool = True) -> dict[str, Any]:
    """One Resource SKUs entry as ListAvailableResourceSkusForARegion.json writes it."""
    return {"resourceType": "virtualMachines", "locations": [location],
            "capabilities": [{"name": "vCPUs", "value": str(vcpus)}, {"name": "MemoryGB", "value": "900"},
                             {"name": "LowPriorityCapable", "value": str(low_priority)},
                             {"name": "RdmaEnabled", "value": "True"}, {"name": "vCPUsAvailable", "value": str(vcpus)}],
            "locationInfo": [{"location": location, "zones": ["1", "2", "3"]}],
            "name": name, "tier": "Standard", "size": name.removeprefix("Standard_"), "family": family,
            "restrictions": restrictions or []}


def not_for_subscription(location: str, kind: str = "Location", zones: list[str] | None = None) -> dict[str, Any]:
    """A restriction as Azure writes one (`az vm list-skus` prints the API's own objects)."""
    info: dict[str, Any] = {"locations": [location]}
    if zones:
        info["zones"] = zones
    return {"type": kind, "values": [location], "restrictionInfo": info, "reasonCode": "NotAvailableForSubscription"}


def usage(name: str, current: int, limit: int, localized: str = "") -> dict[str, Any]:
    return {"unit": "Count", "currentValue": current, "limit": limit,
            "name": {"value": name, "localizedValue": localized or name}}


def price_item(sku: str, region: str, price: float, meter: str, windows: bool = False) -> dict[str, Any]:
    short = sku.removeprefix("Standard_").replace("_", " ")
    return {"currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": price, "unitPrice": price,
            "armRegionName": region, "location": region, "effectiveStartDate": "2026-01-01T00:00:00Z",
            "meterId": "000009d0-057f-5f2b-b7e9-9e26add324a8", "meterName": f"{short}{meter}",
            "productId": "DZH318Z0BQ4L", "skuId": "DZH318Z0BQ4L/00BQ",
            "productName": f"Virtual Machines {short} Series" + (" Windows" if windows else ""),
            "skuName": f"{short}{meter}", "serviceName": "Virtual Machines", "serviceId": "DZH313Z7MMC8",
            "serviceFamily": "Compute", "unitOfMeasure": "1 Hour", "type": "Consumption",
            "isPrimaryMeterRegion": True, "armSkuName": sku}


def deny(field_path: str, effect: str = "Deny", definition: str = "104a3c0b") -> dict[str, Any]:
    """A NonCompliant policy evaluation as PolicyRestrictions_CheckAtResourceGroupScope.json writes one."""
    return {"policyInfo": {"policyDefinitionId": f"{POLICY_BASE}/policyDefinitions/{definition}",
                           "policySetDefinitionId": f"{POLICY_BASE}/policySetDefinitions/2162358E",
                           "policyDefinitionReferenceId": "defref222",
                           "policyAssignmentId": f"{POLICY_BASE}/policyAssignments/2FF66C37"},
            "evaluationResult": "NonCompliant",
            "evaluationDetails": {"evaluatedExpressions": [{"result": "False", "expressionKind": "field",
                                                            "expression": field_path, "path": field_path,
                                                            "operator": "exists", "targetValue": "true"}]},
            "effectDetails": {"policyEffect": effect}}


def sas_expiry_policy(body: dict[str, Any]) -> dict[str, Any]:
    """Azure Policy's built-in "Storage SAS tokens should adhere to 7 day maximum validity" (Deny): a storage
    account without properties.sasPolicy is NonCompliant."""
    content = body["resourceDetails"]["resourceContent"]
    evaluations = []
    if content.get("type") == "Microsoft.Storage/storageAccounts" and \
            not (content.get("properties") or {}).get("sasPolicy"):
        evaluations.append(deny("Microsoft.Storage/storageAccounts/sasPolicy"))
    return {"fieldRestrictions": [], "contentEvaluationResult": {"policyEvaluations": evaluations}}


class ArmEndpoint:
    """The state each answer is made from (tests change it); `requests` lists (method, path, api-version, body)."""

    def __init__(self, location: str, gpu: tuple[str, str, int], vm: tuple[str, str, int] | None = None):
        self.subscriptions = [{"id": f"/subscriptions/{SUBSCRIPTION}", "subscriptionId": SUBSCRIPTION,
                               "displayName": "Example Subscription", "state": "Enabled",
                               "tenantId": "00000000-0000-0000-0000-000000000001"}]
        self.providers = {ns: "Registered" for ns in (
            "Microsoft.Authorization", "Microsoft.Batch", "Microsoft.Compute", "Microsoft.ContainerRegistry",
            "Microsoft.Insights", "Microsoft.KeyVault", "Microsoft.MachineLearningServices",
            "Microsoft.ManagedIdentity", "Microsoft.Network", "Microsoft.OperationalInsights", "Microsoft.Resources",
            "Microsoft.Storage", "Microsoft.Logic", "Microsoft.Consumption")}
        self.skus = [vm_sku(gpu[0], gpu[1], gpu[2], location)] + ([vm_sku(vm[0], vm[1], vm[2], location)] if vm else [])
        self.skus.append(vm_sku("Standard_A1", "standardA0_A7Family", 1, location))
        self.usages = [usage("cores", 10, 1000, "Total Regional vCPUs"), usage(gpu[1], 0, 400),
                       usage("lowPriorityCores", 0, 400, "Total Regional Low-priority vCPUs")]
        if vm:
            self.usages.append(usage(vm[1], 4, 100))
        self.batch_skus = [{"name": gpu[0], "familyName": gpu[1], "capabilities": [{"name": "vCPUs",
                                                                                      "value": str(gpu[2])}]}]
        self.batch_account: dict[str, Any] | None = None  # None: 404 (not created yet)
        self.batch_account_quota = 1  # Location - Get Quotas: accountQuota (LocationGetQuotas.json's 1)
        self.batch_accounts: list[dict[str, Any]] = []  # the subscription's others (Batch Account - List)
        self.batch_pools: list[dict[str, Any]] = []  # the stack's account's (Pool - List By Batch Account)
        self.group: dict[str, Any] | None = None  # None: 404 ResourceGroupNotFound
        self.permissions: list[dict[str, Any]] = copy.deepcopy(OWNER)
        # The caller's permissions at one scope (a resource ID, any case) where they differ from `permissions`.
        self.permissions_at: dict[str, list[dict[str, Any]]] = {}
        self.policy: Callable[[dict[str, Any]], dict[str, Any]] = lambda body: {
            "fieldRestrictions": [], "contentEvaluationResult": {"policyEvaluations": []}}
        self.prices = [price_item(gpu[0], location, 27.2, ""), price_item(gpu[0], location, 5.44, " Spot"),
                       price_item(gpu[0], location, 31.0, "", windows=True)]
        self.role_assignments: list[dict[str, Any]] = []  # the subscription's (role_assignment() makes one)
        self.vm_image: dict[str, Any] | None = vm_image()  # the pool's image version in the region; None: 404
        self.terms_accepted = False  # the image plan's Marketplace terms in this subscription
        self.registry_props: dict[str, Any] = {}  # Registries - Get: what differs from the example's properties
        self.computes: dict[str, dict[str, Any]] = {}  # an Azure ML workspace's, by name (Compute - Get's body)
        self.resources: list[dict[str, Any]] = []  # in the group (Resources - List By Resource Group)
        self.deleted_vaults: list[dict[str, Any]] = []  # keyvault 2024-11-01 listDeletedVaults.json's value
        self.refuse: dict[str, tuple[int, str, str]] = {}  # a path's part -> (status, code, message)
        # Registries - Generate Credentials: the Location's answers before its 200 (202 each), the operation's
        # statuses in turn when it also gives Azure-AsyncOperation, and the final body (the example's).
        self.credentials_pending = 1
        self.credentials_async: list[dict[str, Any]] | None = None
        self.credentials = {"username": "myToken", "passwords": [
            {"expiry": "2020-12-31T15:59:59.0707808Z", "name": "password1", "value": "00000000000000000000000000000000"},
            {"expiry": "2020-12-31T15:59:59.0707808Z", "name": "password2", "value": "00000000000000000000000000000000"}]}
        self.requests: list[tuple[str, str, str, Any]] = []
        endpoint = self

        class Handler(QuietHandler):
            def _answer(self, method: str):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                url = urlparse(self.path)
                query = parse_qs(url.query)
                token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                endpoint.requests.append((method, url.path, query.get("api-version", [""])[0], body))
                headers: list[dict[str, str]] = []
                if url.path == "/api/retail/prices":
                    status, payload = 200, {"BillingCurrency": "USD", "CustomerEntityId": "Default",
                                            "CustomerEntityType": "Retail", "Items": endpoint.priced(query),
                                            "NextPageLink": None, "Count": len(endpoint.prices)}
                elif not token:
                    status, payload = 401, _error("AuthenticationFailed", "Authentication failed. The "
                                                  "'Authorization' header is missing.")
                else:
                    refused = next((v for k, v in endpoint.refuse.items() if k in url.path), None)
                    status, payload, *headers = (refused[0], _error(*refused[1:])) if refused else \
                        endpoint.route(method, url.path, query, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in (headers[0] if headers else {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._answer("GET")

            def do_POST(self):
                self._answer("POST")

        self._https = LocalHttps(Handler)
        self.url, self.ca_file = self._https.url, self._https.ca_file

    def priced(self, query: dict[str, list[str]]) -> list[dict[str, Any]]:
        wanted = (query.get("$filter") or [""])[0]
        return [i for i in self.prices if f"armSkuName eq '{i['armSkuName']}'" in wanted and
                f"armRegionName eq '{i['armRegionName']}'" in wanted]

    def generate_credentials(self, registry: str) -> tuple[int, Any, dict[str, str]]:
        operation = f"{self.url}{registry}/operationStatuses/registries-00000000-0000-0000-0000-000000000000"
        headers = {"Location": f"{operation}?api-version=2025-11-01", "Retry-After": "0"}
        if self.credentials_async is not None:
            headers["Azure-AsyncOperation"] = f"{operation}/async?api-version=2025-11-01"
        return 202, {}, headers

    def credentials_location(self, operation: str) -> tuple[int, Any, dict[str, str]]:
        if self.credentials_pending > 0:
            self.credentials_pending -= 1
            return 202, {}, {"Location": f"{self.url}{operation}?api-version=2025-11-01", "Retry-After": "0"}
        return 200, self.credentials, {}

    def credentials_status(self) -> tuple[int, Any, dict[str, str]]:
        answers = self.credentials_async or [{"status": "Succeeded"}]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        return 200, answer, {"Retry-After": "0"}

    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple:
        sub = r"/subscriptions/(?P<sub>[^/]+)"
        group = sub + r"/resourceGroups/(?P<rg>[^/]+)"
        registry = group + r"/providers/Microsoft\.ContainerRegistry/registries/[^/]+"
        routes: list[tuple[str, str, Callable[[re.Match], tuple[int, Any]]]] = [
            ("GET", r"/subscriptions", lambda m: (200, {"value": self.subscriptions})),
            ("GET", sub + r"/providers", lambda m: (200, {"value": [
                {"id": f"/subscriptions/{m['sub']}/providers/{ns}", "namespace": ns, "registrationState": state,
                 "resourceTypes": []} for ns, state in self.providers.items()]})),
            ("GET", sub + r"/providers/Microsoft\.Compute/skus", lambda m: (200, {"value": self.skus,
                                                                                  "nextLink": None})),
            ("GET", sub + r"/providers/Microsoft\.Compute/locations/[^/]+/usages", lambda m: (200, {
                "value": self.usages})),
            ("GET", sub + r"/providers/Microsoft\.Batch/locations/[^/]+/virtualMachineSkus", lambda m: (200, {
                "value": self.batch_skus})),
            ("GET", sub + r"/providers/Microsoft\.Batch/locations/[^/]+/quotas", lambda m: (200, {
                "accountQuota": self.batch_account_quota})),
            ("GET", sub + r"/providers/Microsoft\.Batch/batchAccounts", lambda m: (200, {"value": self.batch_accounts + (
                [self.batch_account] if self.batch_account else [])})),
            ("GET", group + r"/providers/Microsoft\.Batch/batchAccounts/[^/]+/pools", lambda m: (200, {
                "value": self.batch_pools})),
            ("GET", group + r"/providers/Microsoft\.Batch/batchAccounts/(?P<name>[^/]+)", lambda m: (
                (200, self.batch_account) if self.batch_account else (404, _error(
                    "ResourceNotFound", f"The Resource 'Microsoft.Batch/batchAccounts/{m['name']}' under resource "
                                        f"group '{m['rg']}' was not found.")))),
            ("GET", group + r"/providers/Microsoft\.MachineLearningServices/workspaces/[^/]+/computes/(?P<name>[^/]+)",
             lambda m: (200, self.computes[m["name"]]) if m["name"] in self.computes else (404, _error(
                 "ResourceNotFound", f"The Resource 'Microsoft.MachineLearningServices/workspaces/computes/"
                                     f"{m['name']}' was not found."))),
            ("GET", group + r"/resources", lambda m: (200, {"value": self.resources})),
            ("GET", sub + r"/providers/Microsoft\.Compute/locations/(?P<loc>[^/]+)/publishers/[^/]+/artifacttypes/"
                          r"vmimage/offers/[^/]+/skus/[^/]+/versions/(?P<version>[^/]+)", lambda m: (
                (200, {**self.vm_image, "name": m["version"], "location": m["loc"], "id": path})
                if self.vm_image is not None else (404, _error("NotFound", "Artifact: VMImage was not found.")))),
            ("GET", sub + r"/providers/Microsoft\.MarketplaceOrdering/offerTypes/virtualmachine/publishers/"
                          r"(?P<pub>[^/]+)/offers/(?P<offer>[^/]+)/plans/(?P<plan>[^/]+)/agreements/current",
             lambda m: (200, {"id": path, "name": m["plan"], "type": "Microsoft.MarketplaceOrdering/offertypes",
                              "properties": {"publisher": m["pub"], "product": m["offer"], "plan": m["plan"],
                                            "licenseTextLink": "test.licenseLink",
                                            "privacyPolicyLink": "test.privacyPolicyLink",
                                            "marketplaceTermsLink": "test.marketplaceTermsLink",
                                            "retrieveDatetime": "2017-08-15T11:33:07.12132Z",
                                            "signature": "ASDFSDAFWEFASDGWERLWER",
                                            "accepted": self.terms_accepted}})),
            ("GET", sub + r"/providers/Microsoft\.KeyVault/deletedVaults", lambda m: (200, {
                "value": self.deleted_vaults})),
            ("GET", group, lambda m: (200, self.group) if self.group else (404, _error(
                "ResourceGroupNotFound", f"Resource group '{m['rg']}' could not be found."))),
            ("GET", sub + r"/providers/Microsoft\.Authorization/roleAssignments", lambda m: (200, {
                "value": [a for a in self.role_assignments if f"principalId eq '{a['properties']['principalId']}'"
                          in (query.get("$filter") or [""])[0]]})),
            ("GET", r"(?P<scope>.+)/providers/Microsoft\.Authorization/permissions", lambda m: (200, {
                "value": {k.lower(): v for k, v in self.permissions_at.items()}.get(m["scope"].lower(),
                                                                                   self.permissions)})),
            ("POST", r"(?P<scope>.+)/providers/Microsoft\.PolicyInsights/checkPolicyRestrictions", lambda m: (
                200, self.policy(body))),
            ("GET", registry, lambda m: (200, registry_body(path, self.registry_props))),
            ("POST", rf"(?P<registry>{registry})/generateCredentials", lambda m: self.generate_credentials(
                m["registry"])),
            ("GET", registry + r"/operationStatuses/[^/]+/async", lambda m: self.credentials_status()),
            ("GET", registry + r"/operationStatuses/[^/]+", lambda m: self.credentials_location(m[0])),
        ]
        for verb, pattern, answer in routes:
            match = re.fullmatch(pattern, path, re.IGNORECASE)
            if verb == method and match:
                return answer(match)
        return 404, _error("NotFound", f"No route for {path}")

    def close(self) -> None:
        self._https.close()


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def aml_compute(name: str, current: int, target: int, state: str = "Resizing",
                errors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Compute - Get's answer for an AmlCompute cluster as the 2025-12-01 example writes it (Compute/get/
    AmlCompute.json), with its allocation: `errors` as ARM ErrorResponse entries ({error{code, message}})."""
    return {"id": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/rg/providers/Microsoft.MachineLearningServices/"
                  f"workspaces/ws/computes/{name}",
            "type": "Microsoft.MachineLearningServices/workspaces/computes", "name": name, "location": "westus2",
            "properties": {"description": "some compute", "createdOn": "2021-04-01T22:00:00.0000000+00:00",
                           "modifiedOn": "2021-04-01T22:00:00.0000000+00:00", "computeType": "AmlCompute",
                           "provisioningState": "Succeeded", "properties": {
                               "vmSize": "Standard_ND96asr_v4", "vmPriority": "LowPriority", "osType": "Linux",
                               "virtualMachineImage": None, "isolatedNetwork": False,
                               "subnet": {"id": "test-subnet-resource-id"},
                               "scaleSettings": {"maxNodeCount": target, "minNodeCount": 0,
                                                 "nodeIdleTimeBeforeScaleDown": "PT5M"},
                               "remoteLoginPortPublicAccess": "Disabled", "allocationState": state,
                               "allocationStateTransitionTime": "2026-11-26T22:28:08.998Z", "errors": errors,
                               "currentNodeCount": current, "targetNodeCount": target,
                               "nodeStateCounts": {"preparingNodeCount": 0, "runningNodeCount": 0,
                                                   "idleNodeCount": current, "unusableNodeCount": 0,
                                                   "leavingNodeCount": 0, "preemptedNodeCount": 0},
                               "enableNodePublicIp": False}}}


def registry_body(registry_id: str, props: dict[str, Any]) -> dict[str, Any]:
    """Registries - Get's body as RegistryGet.json (2025-11-01) has it, for `registry_id`, `props` overriding."""
    name = registry_id.rstrip("/").rsplit("/", 1)[-1]
    return {"id": registry_id, "name": name, "type": "Microsoft.ContainerRegistry/registries", "location": "westus",
            "tags": {"key": "value"}, "sku": {"name": "Standard", "tier": "Standard"},
            "properties": {"loginServer": f"{name.lower()}.azurecr.io", "creationDate": "2021-06-15T21:38:26.1537861Z",
                           "provisioningState": "Succeeded", "adminUserEnabled": False,
                           "networkRuleSet": {"defaultAction": "Allow", "ipRules": []},
                           "encryption": {"status": "disabled"}, "status": None, "dataEndpointEnabled": False,
                           "dataEndpointHostNames": [], "privateEndpointConnections": [],
                           "publicNetworkAccess": "Enabled", "networkRuleBypassOptions": "AzureServices",
                           "networkRuleBypassAllowedForTasks": False, "zoneRedundancy": "Disabled",
                           "anonymousPullEnabled": False, "roleAssignmentMode": "LegacyRegistryPermissions",
                           **props}}


def vm_image(plan: dict[str, str] | None = None, state: str = "Active", scheduled: str = "") -> dict[str, Any]:
    """A Virtual Machine Images - Get body as the example shapes it (a Linux image; the route adds name, location,
    id): `plan` {publisher, name, product} only for an image sold with one."""
    status: dict[str, Any] = {"imageState": state}
    if scheduled:
        status["scheduledDeprecationTime"] = scheduled
    props: dict[str, Any] = {"osDiskImage": {"operatingSystem": "Linux"}, "dataDiskImages": [],
                             "automaticOSUpgradeProperties": {"automaticOSUpgradeSupported": False},
                             "hyperVGeneration": "V2", "disallowed": {"vmDiskType": "None"}, "features": [],
                             "imageDeprecationStatus": status}
    if plan:
        props["plan"] = plan
    return {"properties": props, "tags": {}}


def role_assignment(principal: str, role: str, scope: str) -> dict[str, Any]:
    """One Role Assignments - List For Scope entry as RoleAssignments_ListForScope.json (2022-04-01) writes it."""
    return {"properties": {"roleDefinitionId": f"{scope}/providers/Microsoft.Authorization/roleDefinitions/{role}",
                           "principalId": principal, "principalType": "ServicePrincipal", "scope": scope},
            "id": f"{scope}/providers/Microsoft.Authorization/roleAssignments/b0f43c54-e787-4862-89b1-a653fa9cf747",
            "type": "Microsoft.Authorization/roleAssignments", "name": "b0f43c54-e787-4862-89b1-a653fa9cf747"}
