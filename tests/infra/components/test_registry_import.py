"""The image import dynamic provider at the wire: azure-mgmt-core's ARM pipeline and azure-core's ARM poller against
a local HTTPS endpoint answering Registries - Import Image as containerregistry stable/2025-11-01
ImportImageByManifestDigest.json does (200 {}, or 202 with a Location polled until 200), and a refusal."""
import pytest

from infra.components.acr_token import API_VERSION, AzureArmClient
from infra.components.image_import import ImageImportProvider, import_body
from tests.infra.backends.arm_endpoint import ArmEndpoint
from tests.infra.backends.cost_endpoint import Token

REGISTRY = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/myResourceGroup/providers/"
            "Microsoft.ContainerRegistry/registries/myRegistry")
SOURCE = ("/subscriptions/10000000-0000-0000-0000-000000000000/resourceGroups/sourceResourceGroup/providers/"
          "Microsoft.ContainerRegistry/registries/sourceRegistry")
DIGEST = "sha256:" + "0" * 64
PROPS = {"registry_id": REGISTRY, "source_registry_id": SOURCE, "source_image": f"sourceRepository@{DIGEST}",
         "framework": "pytorch", "ref": f"myregistry.azurecr.io/pytorch@{DIGEST}"}


class ImportEndpoint(ArmEndpoint):
    """ARM as the preflight tests run it, plus the import action: 202 and a Location (the example's second answer)
    that answers 202 `pending` times, then 200 {}; or 200 {} at once (the example's first answer)."""

    def __init__(self):
        super().__init__("westeurope", ("Standard_ND96asr_v4", "standardNDASv4Family", 96))
        self.accepted = True
        self.pending = 1

    def route(self, method, path, query, body):
        if method == "POST" and path.endswith("/importImage"):
            if not self.accepted:
                return 200, {}
            operation = f"{self.url}{path.rsplit('/', 1)[0]}/operationStatuses/registries-0000"
            return 202, {}, {"Location": f"{operation}?api-version={API_VERSION}", "Retry-After": "0"}
        if method == "GET" and "/operationStatuses/" in path:
            if self.pending > 0:
                self.pending -= 1
                return 202, {}, {"Location": f"{self.url}{path}?api-version={API_VERSION}", "Retry-After": "0"}
            return 200, {}, {}
        return super().route(method, path, query, body)


@pytest.fixture
def arm():
    endpoint = ImportEndpoint()
    yield endpoint
    endpoint.close()


def provider(endpoint) -> ImageImportProvider:
    return ImageImportProvider(AzureArmClient(Token(), base_url=endpoint.url, connection_verify=endpoint.ca_file,
                                              polling_interval=0))


def test_create_posts_the_digest_untagged_without_force_and_follows_the_location(arm):
    arm.pending = 2
    result = provider(arm).create(PROPS)
    assert result.id == f"{REGISTRY}/repositories/pytorch@{DIGEST}" and result.outs["ref"] == PROPS["ref"]
    post, *polls = arm.requests
    assert post == ("POST", f"{REGISTRY}/importImage", API_VERSION, {
        "source": {"resourceId": SOURCE, "sourceImage": f"sourceRepository@{DIGEST}"},
        "untaggedTargetRepositories": ["pytorch"], "mode": "NoForce"})
    assert [m for m, *_ in polls] == ["GET"] * 3
    assert "targetTags" not in post[3]  # no tag: nothing an import could overwrite


def test_an_import_done_at_once_is_one_call(arm):
    arm.accepted = False
    provider(arm).create(PROPS)
    assert [(m, p) for m, p, *_ in arm.requests] == [("POST", f"{REGISTRY}/importImage")]


def test_a_refused_import_is_one_clear_line(arm):
    arm.refuse["importImage"] = (403, "AuthorizationFailed", "The client 'x' does not have authorization to perform "
                                 "action 'Microsoft.ContainerRegistry/registries/importImage/action'.")
    with pytest.raises(RuntimeError) as refused:
        provider(arm).create(PROPS)
    assert str(refused.value).startswith(f"ARM importImage on {REGISTRY} failed: AuthorizationFailed: The client")
    assert "\n" not in str(refused.value)


def test_a_new_digest_or_source_is_a_new_import_the_ref_alone_is_not():
    provider = ImageImportProvider()
    assert provider.diff("id", PROPS, dict(PROPS)).changes is False
    moved = {**PROPS, "source_image": "sourceRepository@sha256:" + "1" * 64}
    diff = provider.diff("id", PROPS, moved)
    assert diff.changes and diff.replaces == ["source_image"] and diff.delete_before_replace is False
    assert provider.diff("id", PROPS, {**PROPS, "source_registry_id": SOURCE + "2"}).replaces == ["source_registry_id"]


def test_the_body_is_the_specs_example_shape_without_its_tags():
    body = import_body(PROPS)
    # ImportImageByManifestDigest.json's parameters, less its targetTags and with NoForce for its Force.
    assert set(body) == {"source", "untaggedTargetRepositories", "mode"} and set(body["source"]) == {
        "resourceId", "sourceImage"}
