"""The ACR token password dynamic provider at the wire: azure-mgmt-core's ARM pipeline and azure-core's ARM poller
against a local HTTPS endpoint answering Registries - Generate Credentials as containerregistry stable/2025-11-01
RegistryGenerateCredentials.json does (202 with Location, then the example's body; tests/infra/backends/
arm_endpoint.py), and a failed operation."""
import pytest

from infra.components.acr_token import API_VERSION, AzureArmClient, TokenPasswordProvider
from tests.infra.backends.arm_endpoint import ArmEndpoint
from tests.infra.backends.cost_endpoint import Token

REGISTRY = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/myResourceGroup/providers/"
            "Microsoft.ContainerRegistry/registries/myRegistry")
PROPS = {"registry_id": REGISTRY, "token_id": f"{REGISTRY}/tokens/myToken", "expiry": "2020-12-31T15:59:59.0707808Z",
         "username": None, "password": None}


@pytest.fixture
def arm():
    endpoint = ArmEndpoint("westeurope", ("Standard_ND96asr_v4", "standardNDASv4Family", 96))
    yield endpoint
    endpoint.close()


def provider(endpoint: ArmEndpoint) -> TokenPasswordProvider:
    return TokenPasswordProvider(AzureArmClient(Token(), base_url=endpoint.url, connection_verify=endpoint.ca_file,
                                                polling_interval=0))


def test_create_follows_the_202_location_to_password1(arm):
    arm.credentials_pending = 2  # the Location answers 202 twice before the example's 200
    result = provider(arm).create(PROPS)
    assert result.outs["password"] == "00000000000000000000000000000000" and result.outs["username"] == "myToken"
    assert result.id == f"{PROPS['token_id']}/password1"
    post, *polls = arm.requests
    assert post == ("POST", f"{REGISTRY}/generateCredentials", API_VERSION,
                    {"tokenId": PROPS["token_id"], "name": "password1", "expiry": PROPS["expiry"]})
    assert [(m, p.rsplit("/", 1)[-1]) for m, p, *_ in polls] == \
        [("GET", "registries-00000000-0000-0000-0000-000000000000")] * 3


def test_create_polls_the_async_operation_then_reads_the_location(arm):
    arm.credentials_async = [{"status": "InProgress"}, {"status": "Succeeded"}]
    arm.credentials_pending = 0
    assert provider(arm).create(PROPS).outs["password"] == "00000000000000000000000000000000"
    assert [p.rsplit("/", 1)[-1] for _, p, *_ in arm.requests[1:]] == [
        "async", "async", "registries-00000000-0000-0000-0000-000000000000"]


def test_a_failed_operation_is_one_clear_error(arm):
    arm.credentials_async = [{"status": "InProgress"}, {"status": "Failed", "error": {
        "code": "TokenNotFound", "message": "The token myToken was not found."}}]
    with pytest.raises(RuntimeError) as failed:
        provider(arm).create(PROPS)
    assert str(failed.value) == (f"ARM generateCredentials on {REGISTRY} failed: TokenNotFound: "
                                 "The token myToken was not found.")


def test_a_refused_post_is_one_clear_error(arm):
    arm.refuse["generateCredentials"] = (403, "AuthorizationFailed", "The client does not have authorization.")
    with pytest.raises(RuntimeError, match=r"^ARM generateCredentials on .* failed: AuthorizationFailed: The client"):
        provider(arm).create(PROPS)


def test_create_without_a_password_fails_clearly(arm):
    arm.credentials = {"username": "myToken", "passwords": []}
    with pytest.raises(RuntimeError, match="no password1"):
        provider(arm).create(PROPS)


def test_diff_replaces_on_new_token_or_expiry_only():
    provider = TokenPasswordProvider()
    assert provider.diff("id", PROPS, dict(PROPS)).changes is False
    diff = provider.diff("id", PROPS, {**PROPS, "expiry": "2027-02-01T00:00:00Z"})
    assert diff.changes is True and diff.replaces == ["expiry"]
