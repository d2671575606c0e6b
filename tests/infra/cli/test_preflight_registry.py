"""preflight's platform-registry check at the wire: a stack with `sharedImages` (trial, importing its PyTorch
image) asks ARM for the caller's permissions at the platform registry (Permissions - List For Resource, through the
real ARM pipeline against tests/infra/backends/arm_endpoint.py) and fails, with the grant's command, when the caller
may not read it or cannot see it; a stack without `sharedImages` asks nothing of it."""
import pytest

from infra.backends import preflight
from infra.core.preflight import subscription as verdicts
from infra.core.preflight.check import FAIL, OK, WARN
from infra.preview import offline
from tests.infra.backends.arm_endpoint import CONTRIBUTOR, OWNER, READER, SUBSCRIPTION, ArmEndpoint
from tests.infra.backends.cost_endpoint import Token
from tests.infra.components.test_registry_shared import PLATFORM, TORCH, with_shared
from tests.infra.conftest import NOW, evaluation_for

T4 = ("Standard_NC4as_T4_v3", "standardNCASv3_T4Family", 4)
ACR_PULL = [{"actions": ["Microsoft.ContainerRegistry/registries/pull/read"], "notActions": [], "dataActions": [],
             "notDataActions": []}]
# Container Registry Data Importer and Data Reader's actions (role 577a9874-89fd-4f24-9dbd-b5034d0ad23a).
IMPORTER = [{"actions": ["Microsoft.ContainerRegistry/registries/importImage/action",
                         "Microsoft.ContainerRegistry/registries/pull/read", "Microsoft.ContainerRegistry/registries/read"],
             "notActions": [], "dataActions": [], "notDataActions": []}]


def needs(ev) -> verdicts.Needs:
    return verdicts.needs(ev.config, [(r.type, r.inputs) for r in ev.resources], SUBSCRIPTION, offline.SUBSCRIPTION)


@pytest.fixture(scope="module")
def shared_needs():
    return needs(offline.evaluate(with_shared("trial", pytorch=TORCH), now=NOW))


@pytest.fixture
def arm():
    endpoint = ArmEndpoint("eastus", T4)
    yield endpoint
    endpoint.close()


def checks(needs_: verdicts.Needs, endpoint: ArmEndpoint) -> dict[str, verdicts.Check]:
    client = preflight.Arm(Token(), base_url=endpoint.url, connection_verify=endpoint.ca_file, retry_total=0)
    try:
        return {c.name: c for c in preflight.run(needs_, SUBSCRIPTION, client, None)}
    finally:
        client.close()


def permission_calls(endpoint: ArmEndpoint) -> list[tuple[str, str]]:
    return [(p, v) for m, p, v, _ in endpoint.requests if p.endswith("/Microsoft.Authorization/permissions")]


def test_the_caller_must_be_able_to_read_the_platform_registry(shared_needs, arm):
    assert shared_needs.platform_registry == PLATFORM
    arm.permissions_at[PLATFORM] = ACR_PULL  # pull alone: not the Reader the import page names
    found = checks(shared_needs, arm)
    registry = found["platform registry"]
    assert registry.verdict == FAIL, registry
    assert "you may not read dltrainplatform (Microsoft.ContainerRegistry/registries/read denied)" in registry.text
    assert f"--role Reader --scope {PLATFORM}`" in registry.text and "az role assignment create" in registry.text
    assert found["roles"].verdict == OK  # the stack's own group: Owner there (the endpoint's default)
    assert (PLATFORM + "/providers/Microsoft.Authorization/permissions", "2022-04-01") in permission_calls(arm)
    for granted in (READER, IMPORTER, CONTRIBUTOR, OWNER):  # Reader, or any role that holds its read actions
        arm.permissions_at[PLATFORM] = granted
        assert checks(shared_needs, arm)["platform registry"].verdict == OK


def test_a_network_restricted_registry_must_let_trusted_services_through(shared_needs, arm):
    """ACR import reads a source behind a firewall or private endpoint only through the trusted-services bypass."""
    arm.permissions_at[PLATFORM] = READER
    arm.registry_props = {"publicNetworkAccess": "Disabled", "networkRuleBypassOptions": "None"}
    registry = checks(shared_needs, arm)["platform registry"]
    assert registry.verdict == FAIL and "public network access disabled" in registry.text
    assert "`az acr update --name dltrainplatform --allow-trusted-services true`" in registry.text
    assert ("GET", PLATFORM, "2025-11-01") in [(m, p, v) for m, p, v, _ in arm.requests]
    arm.registry_props = {"networkRuleSet": {"defaultAction": "Deny", "ipRules": []},
                          "networkRuleBypassOptions": "AzureServices"}
    registry = checks(shared_needs, arm)["platform registry"]
    assert registry.verdict == OK and "firewall default action Deny; trusted services pass" in registry.text
    arm.registry_props = {"roleAssignmentMode": "AbacRepositoryPermissions"}
    registry = checks(shared_needs, arm)["platform registry"]
    assert registry.verdict == WARN and "Container Registry Repository Reader" in registry.text
    # a caller who may not read it is not asked about the registry's network (it cannot read it)
    arm.requests.clear()
    arm.permissions_at[PLATFORM] = ACR_PULL
    assert checks(shared_needs, arm)["platform registry"].verdict == FAIL
    assert ("GET", PLATFORM, "2025-11-01") not in [(m, p, v) for m, p, v, _ in arm.requests]


def test_a_registry_the_sign_in_cannot_see_fails_with_the_id_to_check(shared_needs, arm):
    arm.refuse["dltrainplatform/providers/Microsoft.Authorization"] = (
        404, "ResourceNotFound", "The Resource 'Microsoft.ContainerRegistry/registries/dltrainplatform' under resource "
                                 "group 'platform-images' was not found.")
    registry = checks(shared_needs, arm)["platform registry"]
    assert registry.verdict == FAIL and f"{PLATFORM} is not there for your sign-in" in registry.text
    assert "az acr show --name dltrainplatform --query id -o tsv" in registry.text
    assert f"--role Reader --scope {PLATFORM}" in registry.text and "\n" not in registry.text


def test_a_stack_that_builds_its_images_asks_nothing_of_a_platform_registry(arm):
    own = needs(evaluation_for("trial"))
    assert own.platform_registry == ""
    assert "platform registry" not in checks(own, arm)
    assert not [p for p, _ in permission_calls(arm) if "ContainerRegistry" in p]
