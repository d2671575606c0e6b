"""Preflight verdicts on a subscription, pure: what a stack needs from it (`needs`, from the resources the program
declares) and, per check, the verdict on Azure's answer (each `*_verdict` takes the JSON the REST API returns, as
its spec's examples write it): resource providers, sizes, quotas, the Batch account's limits and roles, the
deployer's permissions, the list price. A verdict is a `Check` (check.py); Azure Policy's what-if is policy.py's.
The calls live in infra/backends/preflight.py; `python -m infra preflight` prints one line per check
(infra/cli/preflight.py).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infra.core.preflight.check import FAIL, OK, WARN, Check, allowed
from infra.core.preflight.policy import POLICY_TYPES, PolicyTarget, arm_body
from infra.core.skus import CATALOG, GpuSku

# The resource provider of each azure-native module the program uses (its ARM namespace: the module's resources'
# type prefix in https://learn.microsoft.com/azure/templates/, e.g. microsoft.insights/diagnosticsettings for
# azure-native:monitor:DiagnosticSetting, and privatedns zones are Microsoft.Network/privateDnsZones).
NAMESPACES = {
    "applicationinsights": "Microsoft.Insights", "authorization": "Microsoft.Authorization",
    "batch": "Microsoft.Batch", "compute": "Microsoft.Compute", "consumption": "Microsoft.Consumption",
    "containerregistry": "Microsoft.ContainerRegistry", "costmanagement": "Microsoft.CostManagement",
    "insights": "Microsoft.Insights", "keyvault": "Microsoft.KeyVault", "logic": "Microsoft.Logic",
    "machinelearningservices": "Microsoft.MachineLearningServices", "managedidentity": "Microsoft.ManagedIdentity",
    "monitor": "Microsoft.Insights", "network": "Microsoft.Network", "operationalinsights":
    "Microsoft.OperationalInsights", "privatedns": "Microsoft.Network", "resources": "Microsoft.Resources",
    "storage": "Microsoft.Storage", "web": "Microsoft.Web",
}


@dataclass(frozen=True)
class Needs:
    """What the stack asks of the subscription, from the declared resources."""

    location: str
    resource_group: str
    gpu: GpuSku
    max_nodes: int
    spot: bool
    backend: str
    namespaces: tuple[str, ...]
    vm_sizes: tuple[str, ...] = ()  # plain VMs the stack creates (the NFS server)
    batch_account: str = ""  # "" when the stack has none (backend azureml)
    batch_pool: str = ""  # its pool's name
    pool_allocation: str = "batch-service"  # the Batch account's (batchPoolAllocation)
    batch_service_object_id: str = ""  # user-subscription: the "Microsoft Azure Batch" service principal's object ID
    platform_registry: str = ""  # sharedImages: the registry `up` imports from (preflight/registry.py checks it)
    # The Batch pool's Marketplace image {publisher, offer, sku, version} (preflight/image.py checks it); {} if none
    pool_image: Mapping[str, str] = field(default_factory=dict)
    write_actions: tuple[str, ...] = ()  # what the deployer must be allowed to do at the group's scope
    policy_targets: tuple[PolicyTarget, ...] = field(default=())

    @property
    def gpu_vcpus(self) -> int:
        return self.gpu.vcpus * self.max_nodes


def needs(config: Any, resources: Iterable[tuple[str, Mapping[str, Any]]], subscription: str,
          mock_subscription: str) -> Needs:
    """What a stack (its StackConfig `config` and the (type, inputs) the program declares) asks of a subscription."""
    resources = list(resources)
    modules = {t.split(":")[1] for t, _ in resources if t.startswith("azure-native:")}
    namespaces = tuple(sorted({NAMESPACES.get(m, m) for m in modules}))
    group = next((i.get("resourceGroupName", "") for t, i in resources
                  if t == "azure-native:resources:ResourceGroup"), "")
    vm_sizes = tuple(i.get("hardwareProfile", {}).get("vmSize", "") for t, i in resources
                     if t == "azure-native:compute:VirtualMachine")
    batch_account = next((i.get("accountName", "") for t, i in resources if t == "azure-native:batch:BatchAccount"), "")
    batch_pool = next((i.get("poolName", "") for t, i in resources if t == "azure-native:batch:Pool"), "")
    pool_image = next(((i.get("deploymentConfiguration") or {}).get("virtualMachineConfiguration", {})
                       .get("imageReference") or {} for t, i in resources if t == "azure-native:batch:Pool"), {})
    targets = []
    writes = ["Microsoft.Authorization/roleAssignments/write"]
    if any(t == "azure-native:authorization:RoleDefinition" for t, _ in resources):
        writes.append("Microsoft.Authorization/roleDefinitions/write")
    for type_, inputs in resources:
        if type_ not in POLICY_TYPES:
            continue
        arm_type, name_key, api_version = POLICY_TYPES[type_]
        body = arm_body(arm_type, inputs, name_key, subscription, mock_subscription)
        noun = arm_type.split("/")[-1]
        targets.append(PolicyTarget(f"{noun} {body['name']}", api_version, body))
        if f"{arm_type}/write" not in writes:
            writes.append(f"{arm_type}/write")
    return Needs(location=config.location, resource_group=group, gpu=CATALOG[config.nodes.gpu_sku],
                 max_nodes=config.nodes.max_nodes, spot=config.nodes.spot, backend=config.backend,
                 namespaces=namespaces, vm_sizes=vm_sizes, batch_account=batch_account, batch_pool=batch_pool,
                 pool_allocation=config.nodes.pool_allocation if batch_account else "batch-service",
                 batch_service_object_id=config.nodes.batch_service_object_id if batch_account else "",
                 platform_registry=config.registry.shared_images.registry_id if config.registry.shared_images else "",
                 pool_image={k: str(pool_image[k]) for k in ("publisher", "offer", "sku", "version") if k in pool_image},
                 write_actions=tuple(writes), policy_targets=tuple(targets))


# (a) Resource providers:
# https://learn.microsoft.com/azure/azure-resource-manager/management/resource-providers-and-types
# ("Before you use a resource provider, make sure your Azure subscription is registered for it"); the answer is
# Providers - List (GET /subscriptions/{id}/providers): value[].namespace, value[].registrationState.
def providers_verdict(needed: Sequence[str], providers: Sequence[Mapping[str, Any]]) -> Check:
    state = {str(p.get("namespace", "")).lower(): str(p.get("registrationState", "")) for p in providers}
    missing = [(ns, state.get(ns.lower(), "NotRegistered")) for ns in needed
               if state.get(ns.lower(), "NotRegistered") != "Registered"]
    if not missing:
        return Check("providers", OK, f"{len(needed)} resource providers registered ({', '.join(needed)})")
    fixes = " && ".join(f"az provider register --namespace {ns} --wait" for ns, _ in missing)
    listed = ", ".join(f"{ns} ({st})" for ns, st in missing)
    return Check("providers", FAIL, f"not registered: {listed}; run `{fixes}` (needs Contributor on the "
                                    "subscription)")


def _capability(sku: Mapping[str, Any], name: str) -> str | None:
    return next((str(c.get("value")) for c in sku.get("capabilities") or [] if c.get("name") == name), None)


@dataclass(frozen=True)
class Offer:
    """A size as the Resource SKUs API offers it in the region: its quota family and vCPUs."""

    size: str
    family: str
    vcpus: int


# (b) The size in the region, to this subscription: Resource SKUs - List
# (https://learn.microsoft.com/rest/api/compute/resource-skus/list, GET /subscriptions/{id}/providers/
# Microsoft.Compute/skus?$filter=location eq '{region}'): restrictions[] of type Location (the size is not offered
# to this subscription in the region: reasonCode NotAvailableForSubscription, or QuotaId for the subscription's
# offer) or Zone (not in the zones listed: this stack asks for no zone, so only a note).
def sku_verdict(size: str, location: str, skus: Sequence[Mapping[str, Any]], role: str,
                spot: bool = False) -> tuple[Check, Offer | None]:
    name = f"size {size}"
    match = [s for s in skus if s.get("resourceType") == "virtualMachines" and str(s.get("name", "")).lower() ==
             size.lower() and location.lower() in [str(loc).lower() for loc in s.get("locations") or []]]
    listing = f"`az vm list-skus --size {size} --all --output table`"
    if not match:
        return Check(name, FAIL, f"not offered in {location} ({role}): pick a region that lists it ({listing}) or "
                                 "another size in the stack file"), None
    sku = match[0]
    offer = Offer(size, str(sku.get("family", "")), int(_capability(sku, "vCPUs") or 0))
    for restriction in sku.get("restrictions") or []:
        if restriction.get("type") == "Location":
            reason = restriction.get("reasonCode", "")
            return Check(name, FAIL, f"offered in {location} but not to this subscription ({reason}): ask Azure "
                                     "support for access to the size in the region (https://learn.microsoft.com/"
                                     "troubleshoot/azure/general/region-access-request-process) or pick a region "
                                     f"where {listing} shows no restriction"), offer
    if spot and _capability(sku, "LowPriorityCapable") == "False":
        return Check(name, FAIL, f"cannot run as Spot (LowPriorityCapable False in {location}): set spot: false"), offer
    zones = sorted({z for r in sku.get("restrictions") or [] if r.get("type") == "Zone"
                    for z in (r.get("restrictionInfo") or {}).get("zones") or []})
    note = f"; not in zones {','.join(zones)} (this stack asks for no zone)" if zones else ""
    return Check(name, OK, f"offered in {location} to this subscription ({role}; family {offer.family}, "
                           f"{offer.vcpus} vCPUs){note}"), offer


# (b) ... and to Batch pools: Location - List Supported Virtual Machine Skus
# (https://learn.microsoft.com/rest/api/batchmanagement/location/list-supported-virtual-machine-skus).
def batch_sku_verdict(size: str, location: str, batch_skus: Sequence[Mapping[str, Any]]) -> Check:
    found = next((s for s in batch_skus if str(s.get("name", "")).lower() == size.lower()), None)
    if found is None:
        return Check(f"batch size {size}", FAIL, f"Batch does not offer it for pools in {location} (`az batch location "
                                          f"list-skus --location {location} --output table`): pick a region that "
                                          "lists it, or backend: azureml")
    end = found.get("batchSupportEndOfLife")
    return Check(f"batch size {size}", WARN if end else OK,
                 f"Batch pools in {location} may use it" + (f"; Batch support ends {end}" if end else ""))


def _usage(usages: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    return next((u for u in usages if str((u.get("name") or {}).get("value", "")).lower() == name.lower()), None)


QUOTA_DOC = "https://learn.microsoft.com/azure/quotas/per-vm-quota-requests"
SPOT_QUOTA_DOC = "https://learn.microsoft.com/azure/quotas/spot-quota"


# (c) Quota: Usage - List (https://learn.microsoft.com/rest/api/compute/usage/list, GET /subscriptions/{id}/
# providers/Microsoft.Compute/locations/{region}/usages): per family (name.value = the Resource SKUs' family),
# `cores` (Total Regional vCPUs) and `lowPriorityCores` (Spot vCPUs, one pool for every family:
# https://learn.microsoft.com/azure/virtual-machines/spot-vms#pricing-and-quota), each with currentValue and limit.
def usage_verdict(demands: Sequence[tuple[str, str, int]], location: str, usages: Sequence[Mapping[str, Any]],
                  spot_vcpus: int = 0) -> Check:
    """`demands`: (what, family, vCPUs) on dedicated quota; `spot_vcpus`: vCPUs on the Spot quota."""
    per_family: dict[str, int] = {}
    for _, family, vcpus in demands:
        per_family[family] = per_family.get(family, 0) + vcpus
    asks = [(family, vcpus, "dedicated") for family, vcpus in per_family.items()]
    if demands:
        asks.append(("cores", sum(per_family.values()), "regional"))
    if spot_vcpus:
        asks.append(("lowPriorityCores", spot_vcpus, "Spot"))
    short, known = [], []
    for quota, vcpus, kind in asks:
        usage = _usage(usages, quota)
        if usage is None:
            short.append(f"{quota} ({kind}) is not in the region's usages: the subscription has no quota for it "
                         f"in {location}; request {vcpus} vCPUs ({SPOT_QUOTA_DOC if kind == 'Spot' else QUOTA_DOC})")
            continue
        free = int(usage.get("limit", 0)) - int(usage.get("currentValue", 0))
        known.append(f"{quota} {vcpus}/{free} free")
        if vcpus > free:
            short.append(f"{quota} ({kind}) needs {vcpus} vCPUs, {free} free (limit {usage.get('limit')}, in use "
                         f"{usage.get('currentValue')}): request a limit of at least "
                         f"{int(usage.get('currentValue', 0)) + vcpus} in {location} "
                         f"({SPOT_QUOTA_DOC if kind == 'Spot' else QUOTA_DOC})")
    what = ", ".join(w for w, _, _ in demands) + (" (Spot)" if spot_vcpus else "")
    if short:
        return Check("quota", FAIL, "; ".join(short))
    return Check("quota", OK, f"{what or 'nothing'} fits the subscription's vCPU quota in {location} "
                              f"({', '.join(known) or 'no VM'})")


BATCH_QUOTA_DOC = "https://learn.microsoft.com/azure/batch/batch-quota-limit#increase-a-quota"


# (c) ... on Batch (pool allocation mode BatchService), the nodes count against the Batch account's own quota:
# Batch Account - Get (https://learn.microsoft.com/rest/api/batchmanagement/batch-account/get):
# properties.dedicatedCoreQuotaPerVMFamily[{name, coreQuota}] when dedicatedCoreQuotaPerVMFamilyEnforced, else
# dedicatedCoreQuota; lowPriorityCoreQuota for Spot.
def batch_quota_verdict(needs_: Needs, family: str, account: Mapping[str, Any] | None) -> Check:
    vcpus = needs_.gpu_vcpus
    if account is None:
        return Check("batch quota", WARN, f"Batch account {needs_.batch_account} does not exist yet: `up` creates it "
                                          "with Batch's default quotas, and a new account's GPU family quota may be "
                                          f"0; after `up`, rerun preflight (it needs {vcpus} "
                                          f"{'Spot' if needs_.spot else family} vCPUs: {BATCH_QUOTA_DOC})")
    props = account.get("properties") or {}
    if needs_.spot:
        limit, quota = int(props.get("lowPriorityCoreQuota") or 0), "lowPriorityCoreQuota (Spot)"
    elif props.get("dedicatedCoreQuotaPerVMFamilyEnforced"):
        entry = next((q for q in props.get("dedicatedCoreQuotaPerVMFamily") or []
                      if str(q.get("name", "")).lower() == family.lower()), {})
        limit, quota = int(entry.get("coreQuota") or 0), f"dedicated {family}"
    else:
        limit, quota = int(props.get("dedicatedCoreQuota") or 0), "dedicatedCoreQuota"
    if vcpus > limit:
        return Check("batch quota", FAIL, f"Batch account {needs_.batch_account}: {quota} is {limit} vCPUs, maxNodes "
                                          f"{needs_.max_nodes} x {needs_.gpu.vcpus} needs {vcpus}: request {quota} "
                                          f"{vcpus} for the account ({BATCH_QUOTA_DOC}), lower maxNodes, or use "
                                          "backend: azureml (the subscription's own quota)")
    return Check("batch quota", OK, f"Batch account {needs_.batch_account}: {quota} {limit} vCPUs >= {vcpus}")


def _region(name: Any) -> str:
    return str(name or "").replace(" ", "").lower()  # ARM writes "westeurope", a portal "West Europe"


# Batch accounts per region per subscription: 1-3 by default, at most 50 by support request ("Batch service quotas
# and limits", https://learn.microsoft.com/azure/batch/batch-quota-limit#resource-quotas). The quota is Batch
# Management's Location - Get Quotas (GET /subscriptions/{id}/providers/Microsoft.Batch/locations/{location}/quotas:
# {accountQuota}, LocationGetQuotas.json of 2025-06-01), the accounts there Batch Account - List (value[{name,
# location}], BatchAccountList.json). A stack whose account exists already holds its place.
def batch_accounts_verdict(needs_: Needs, subscription: str, quotas: Mapping[str, Any],
                           accounts: Sequence[Mapping[str, Any]]) -> Check:
    limit = int(quotas.get("accountQuota") or 0)
    here = sorted(str(a.get("name", "?")) for a in accounts if _region(a.get("location")) == _region(needs_.location))
    if needs_.batch_account in here:
        return Check("batch accounts", OK, f"{needs_.batch_account} exists; {len(here)} of {limit} Batch accounts in "
                                           f"{needs_.location}")
    if len(here) >= limit:
        return Check("batch accounts", FAIL, f"subscription {subscription} has {len(here)} Batch account(s) in "
                                             f"{needs_.location} ({', '.join(here) or 'none'}) and may have {limit} "
                                             f"there: `up` cannot create {needs_.batch_account}; deploy the stack to "
                                             "another region (location) or subscription (azure-native:subscriptionId), "
                                             f"use backend: azureml, or request {len(here) + 1} Batch accounts per "
                                             f"region in {needs_.location} ({BATCH_QUOTA_DOC})")
    return Check("batch accounts", OK, f"{len(here)} of {limit} Batch accounts in {needs_.location}: room for "
                                       f"{needs_.batch_account}")


# User-subscription mode: the "Microsoft Azure Batch" service principal's role on the subscription, a subscription
# owner's one-time grant (https://learn.microsoft.com/azure/batch/batch-account-create-portal, "Allow Batch to access
# the subscription": Contributor or Owner; the narrower built-in Azure Batch Service Orchestration Role grants "the
# required permissions to Azure Batch Resource Provider to manage compute and other backing resources in the
# subscription"). Role Assignments - List For Scope on the subscription filtered by principalId
# (https://learn.microsoft.com/rest/api/authorization/role-assignments/list-for-scope) lists the assignments at,
# above and below it: value[].properties{roleDefinitionId, principalId, scope}.
BATCH_SERVICE_ROLES = {"a35466a1-cfd6-450a-b35e-683fcdf30363": "Azure Batch Service Orchestration Role",
                       "b24988ac-6180-42a0-ab88-20f7382dd24c": "Contributor",
                       "8e3af657-a8ff-443c-a75c-2fe8c4bcb635": "Owner"}


def batch_service_role_verdict(needs_: Needs, subscription: str, assignments: Sequence[Mapping[str, Any]]) -> Check:
    sub = f"/subscriptions/{subscription}".lower()
    for assignment in assignments:
        props = assignment.get("properties") or {}
        role = str(props.get("roleDefinitionId", "")).rstrip("/").rsplit("/", 1)[-1].lower()
        scope = str(props.get("scope", "")).rstrip("/").lower()
        covers = scope in (sub, "") or scope.startswith("/providers/microsoft.management/managementgroups/")
        if role in BATCH_SERVICE_ROLES and covers and str(props.get("principalId", "")).lower() == \
                needs_.batch_service_object_id.lower():
            return Check("batch service role", OK, f"the Batch service ({needs_.batch_service_object_id}) holds "
                                                   f"{BATCH_SERVICE_ROLES[role]} on {props.get('scope')}: it may "
                                                   "create the pool's VMs in this subscription (user-subscription)")
    return Check("batch service role", FAIL, f"the Batch service (\"Microsoft Azure Batch\", object "
                                             f"{needs_.batch_service_object_id}) has no role on subscription "
                                             f"{subscription}, so a user-subscription pool cannot allocate nodes: a "
                                             "subscription owner runs once `az role assignment create "
                                             f"--assignee-object-id {needs_.batch_service_object_id} "
                                             "--assignee-principal-type ServicePrincipal --role "
                                             "a35466a1-cfd6-450a-b35e-683fcdf30363 --scope /subscriptions/"
                                             f"{subscription}` (Azure Batch Service Orchestration Role), or use "
                                             "batchPoolAllocation: batch-service")


# An existing account's other limits (Batch Account - Get: properties.poolQuota, activeJobAndJobScheduleQuota; the
# pools it has, Pool - List By Batch Account's value[].name): for new accounts Azure has reduced the defaults, "in
# some cases to zero" (batch-quota-limit). The stack needs one pool (infra/backends/batch/cluster.py POOL) and room
# for at least one active job.
def batch_limits_verdict(needs_: Needs, account: Mapping[str, Any] | None, pools: Sequence[Mapping[str, Any]],
                         pool: str) -> Check | None:
    if account is None:
        return None  # batch quota already says: known after `up`
    props = account.get("properties") or {}
    names = {str(p.get("name", "")) for p in pools}
    pool_quota, jobs = int(props.get("poolQuota") or 0), int(props.get("activeJobAndJobScheduleQuota") or 0)
    short = []
    if pool not in names and len(names) >= pool_quota:
        short.append(f"poolQuota is {pool_quota} and it has {len(names)} pool(s), so `up` cannot create pool {pool}: "
                     f"request poolQuota {len(names) + 1}")
    if jobs < 1:
        short.append(f"activeJobAndJobScheduleQuota is {jobs}, so no job can be submitted: request at least 1")
    if short:
        return Check("batch limits", FAIL, f"Batch account {needs_.batch_account}: " + "; ".join(short) +
                                           f" ({BATCH_QUOTA_DOC}), or use backend: azureml")
    return Check("batch limits", OK, f"Batch account {needs_.batch_account}: poolQuota {pool_quota} "
                                     f"({len(names)} in use), activeJobAndJobScheduleQuota {jobs}")


# (d) Role assignments: Permissions - List For Resource Group (https://learn.microsoft.com/rest/api/authorization/
# permissions/list-for-resource-group): value[{actions, notActions}] of the caller. Creating a role assignment
# needs Microsoft.Authorization/roleAssignments/write: Owner, User Access Administrator or Role Based Access
# Control Administrator
# (https://learn.microsoft.com/azure/role-based-access-control/role-assignments-portal#prerequisites).
def permissions_verdict(actions: Sequence[str], permissions: Sequence[Mapping[str, Any]], scope: str,
                        group_exists: bool) -> Check:
    denied = [a for a in actions if not allowed(a, permissions)]
    where = "the resource group" if group_exists else "the subscription (the group does not exist yet)"
    if not denied:
        return Check("roles", OK, f"you may create role assignments and the stack's resources at {where}")
    roles = ("'User Access Administrator' (or Owner)" if any(a.startswith("Microsoft.Authorization/") for a in denied)
             else "Contributor")
    return Check("roles", FAIL, f"at {where} you may not: {', '.join(denied)}; ask an Owner to run `az role "
                                f"assignment create --assignee $(az ad signed-in-user show --query id -o tsv) --role "
                                f"{roles.split(' (')[0]} --scope {scope}`" + (" and Contributor likewise" if
                                roles != "Contributor" and any(not a.startswith("Microsoft.Authorization/")
                                                               for a in denied) else ""))


# (f) The list price: Azure Retail Prices API (https://learn.microsoft.com/rest/api/cost-management/retail-prices/
# azure-retail-prices): Items[] with armSkuName, armRegionName, retailPrice (USD), unitOfMeasure "1 Hour",
# productName (Windows sizes end "... Windows"), skuName (Spot meters end " Spot", retired low priority ones " Low
# Priority"), type "Consumption".
PRICE_DRIFT = 0.2  # warn when Azure's price and the catalog's differ by more than this fraction


def price_verdict(gpu: GpuSku, location: str, spot: bool, items: Sequence[Mapping[str, Any]]) -> Check:
    linux = [i for i in items if i.get("type", "Consumption") == "Consumption" and "windows" not in
             str(i.get("productName", "")).lower() and str(i.get("armSkuName", "")).lower() == gpu.name.lower()]
    regular = [i for i in linux if not str(i.get("skuName", "")).endswith(("Spot", "Low Priority"))]
    spot_items = [i for i in linux if str(i.get("skuName", "")).endswith("Spot")]
    name = f"price {gpu.name}"
    if not regular:
        return Check(name, WARN, f"the Retail Prices API lists no Linux pay-as-you-go price in {location}: the size "
                                 "may not be sold there; plan's estimate stands")
    price = float(regular[0]["retailPrice"])
    text = f"${price:.2f}/h pay-as-you-go in {location}"
    if spot_items:
        text += f", Spot ${float(spot_items[0]['retailPrice']):.2f}/h" + (" (this stack's)" if spot else "")
    drift = abs(price - gpu.price_per_hour) / gpu.price_per_hour
    text += f"; plan estimates ${gpu.price_per_hour:.2f}/h (East US catalog, infra/core/skus.py)"
    if drift > PRICE_DRIFT:
        return Check(name, WARN, f"{text}: {drift:.0%} apart, budget with Azure's figure")
    return Check(name, OK, text)
