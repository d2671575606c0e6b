"""One platform image copied into a team's registry by ACR import, as a Pulumi dynamic resource (sharedImages).

pulumi-azure-native has no resource or function for it: ACR import is an action, `POST .../registries/{name}/
importImage` (Registries - Import Image, https://learn.microsoft.com/rest/api/containerregistry/registries/
import-image), and the provider's containerregistry module (3.29.0, the pinned one) holds the resources and their
get*/list* functions only (list_registry_credentials, list_webhook_events, ...; its ImportPipeline is ACR Transfer
through a storage account, another thing). So this resource makes that POST on create, with the deployer's Entra
identity, through the same ARM client as the token password (acr_token.AzureArmClient: azure-mgmt-core's pipeline,
azure-core's ARM poller; the action answers 200, or 202 with a Location to poll), and keeps what it imported.

The body (containerregistry stable/2025-11-01 examples/ImportImageByManifestDigest.json): the platform registry by
`resourceId` (Entra authentication to the source needs it: container-registry-import-images, "Import from an Azure
container registry in the same AD tenant"), `sourceImage` `<repository>@sha256:...`, and
`untaggedTargetRepositories: [<framework>]`, "a manifest only copy. No tag will be created", with mode `NoForce`
("any existing target tags will fail the operation before any copying begins"): with no target tag there is none to
overwrite, so an import can never move what another one wrote, and running it again for the same digest overwrites
nothing (the docs do not say whether ACR answers such a repeat with success; Pulumi runs create once per digest).
The manifest is copied as it is, so its digest (its content's sha256) is the same in the team's registry, and the job
runs `<team registry>/<framework>@<digest>`.

Deleting needs no call: the image goes with the registry, and a replaced digest stays there untagged (storage only;
ACR's untagged-manifest retention policy is off unless a registry turns it on:
https://learn.microsoft.com/azure/container-registry/container-registry-retention-policy).
"""
from __future__ import annotations

from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider

from infra.components.acr_token import AzureArmClient

MODE = "NoForce"
# What the import depends on: a change to any of these is another image (or another registry), so a new import.
IDENTITY = ("registry_id", "source_registry_id", "source_image", "framework")


def import_body(props: dict[str, Any]) -> dict[str, Any]:
    """Registries - Import Image's request body for one image, by digest, into the framework's repository, untagged."""
    return {"source": {"resourceId": props["source_registry_id"], "sourceImage": props["source_image"]},
            "untaggedTargetRepositories": [props["framework"]], "mode": MODE}


class ImageImportProvider(ResourceProvider):
    def __init__(self, client: AzureArmClient | None = None):
        self._client = client

    def create(self, props: dict[str, Any]) -> CreateResult:
        (self._client or AzureArmClient()).post(f"{props['registry_id']}/importImage", import_body(props))
        digest = props["source_image"].rpartition("@")[2]
        return CreateResult(id_=f"{props['registry_id']}/repositories/{props['framework']}@{digest}", outs=props)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [key for key in IDENTITY if olds.get(key) != news.get(key)]
        # A new digest is imported beside the old one before the old resource goes (which deletes nothing).
        return DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=False)


class ImageImport(pulumi.dynamic.Resource):
    ref: pulumi.Output[str]

    def __init__(self, name: str, registry_id: pulumi.Input[str], login_server: pulumi.Input[str],
                 source_registry_id: str, source_image: str, framework: str,
                 opts: pulumi.ResourceOptions | None = None):
        digest = source_image.rpartition("@")[2]
        super().__init__(ImageImportProvider(), name, {
            "registry_id": registry_id, "source_registry_id": source_registry_id, "source_image": source_image,
            "framework": framework,
            # What the job runs once the import is done: this registry's copy, by the same digest.
            "ref": pulumi.Output.concat(login_server, f"/{framework}@{digest}")}, opts)
