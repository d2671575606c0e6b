"""The stack's storage account, played by Azurite: the containers the program declares, the `scripts` blobs as
`pulumi up` uploads them, and each managed identity's access as the program's role assignments grant it.

Azurite has no Azure AD, so an identity's access is carried by a container SAS with exactly the permissions
its role allows (Storage Blob Data Reader: read + list; Contributor: also add, create, write, delete,
https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/storage): a request the role would
refuse is refused by Azurite the same way (403 AuthorizationPermissionMismatch).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from devtools.emulator import Azurite
from infra.preview.offline import Evaluation
from infra.components import roles
from infra.core.security.role_ids import role_key

ROLE_PERMISSIONS = {roles.BLOB_DATA_READER: "rl", roles.BLOB_DATA_CONTRIBUTOR: "racwdl",
                    roles.BLOB_DATA_WRITER: "racwdl"}
SAS_FUNCTION = "azure-native:storage:listStorageAccountServiceSAS"
PROBE = ".rehearsal-probe"  # a blob the deployer writes into each container, for the people's SAS to try


@dataclass(frozen=True)
class PeopleSas:
    """One container SAS the program asks listStorageAccountServiceSAS for (the stack's `sas` output)."""

    container: str
    permissions: str
    expiry: str
    url: str  # minted here by Azurite with those permissions and that expiry

    def allows(self) -> dict[str, bool]:
        """What the SAS can do here, tried one request each: list, read, write (a probe blob)."""
        from azure.core.exceptions import HttpResponseError
        from azure.storage.blob import ContainerClient

        client = ContainerClient.from_container_url(self.url)
        tries = {"list": lambda: next(iter(client.list_blobs()), None),
                 "read": lambda: client.download_blob(PROBE).readall(),
                 "write": lambda: client.upload_blob(f"{PROBE}-sas", b"1", overwrite=True)}
        allowed = {}
        for operation, attempt in tries.items():
            try:
                attempt()
                allowed[operation] = True
            except HttpResponseError as err:
                if err.status_code != 403:
                    raise
                allowed[operation] = False
        return allowed

    def expected(self) -> dict[str, bool]:
        """What its permission letters grant (https://learn.microsoft.com/rest/api/storageservices/create-service-sas#permissions-for-a-directory-container-or-blob)."""
        return {"list": "l" in self.permissions, "read": "r" in self.permissions, "write": "w" in self.permissions}


@dataclass(frozen=True)
class Grant:
    principal_id: str
    container: str
    permissions: str


def grants(ev: Evaluation) -> list[Grant]:
    """Every role assignment the program declares on a blob container, as SAS permission letters."""
    found = []
    for assignment in ev.of_type("azure-native:authorization:RoleAssignment"):
        scope, role = str(assignment.inputs.get("scope", "")), str(assignment.inputs.get("roleDefinitionId", ""))
        if not any(part in scope for part in ("/blobServices/default/containers/", "/blobContainers/")):
            continue  # not a container (the registry's AcrPull, for one)
        permissions = ROLE_PERMISSIONS.get(role_key(role, scope))  # a built-in by ID, the stack's custom role by key
        if permissions:
            found.append(Grant(str(assignment.inputs["principalId"]), scope.rsplit("/", 1)[-1], permissions))
    return found


def principal_of(ev: Evaluation, identity_resource_id: str) -> str:
    for identity in ev.of_type("azure-native:managedidentity:UserAssignedIdentity"):
        if identity.state.get("id") == identity_resource_id:
            return str(identity.state["principalId"])
    raise LookupError(f"no user-assigned identity {identity_resource_id} in the program")


def identities_by_client_id(ev: Evaluation) -> dict[str, str]:
    """Client ID -> principal ID of every user-assigned identity the program declares."""
    return {str(i.state["clientId"]): str(i.state["principalId"])
            for i in ev.of_type("azure-native:managedidentity:UserAssignedIdentity")}


class Account:
    """Azurite standing in for the stack's storage account."""

    def __init__(self, azurite: Azurite, ev: Evaluation):
        self.azurite, self.ev = azurite, ev
        self.grants = grants(ev)
        self.declared_urls = ev.outputs["containerUrls"]  # what the job spec names
        # The account's URLs here (the Azure AD front's, devtools/rehearsal/azure_ad.py) -> the declared URL each
        # stands for: a job submitted from a member file (whose URLs are these) names them.
        self.aliases: dict[str, str] = {}

    def create_containers(self) -> list[str]:
        names = sorted(c.inputs["containerName"] for c in self.ev.of_type("azure-native:storage:BlobContainer"))
        for name in names:
            self.azurite.create_container(name)
        return names

    def upload_scripts(self) -> int:
        """The `scripts` blobs exactly as declared: blob name and source file of each storage:Blob."""
        from azure.storage.blob import ContainerClient

        client = ContainerClient.from_container_url(self.azurite.container_url("scripts", "racwl"))
        blobs = [b for b in self.ev.of_type("azure-native:storage:Blob") if b.inputs["containerName"] == "scripts"]
        for blob in blobs:
            with open(blob.inputs["source"].path, "rb") as f:
                client.upload_blob(blob.inputs["blobName"], f, overwrite=True)
        return len(blobs)

    def container(self, declared_url: str) -> str:
        """The container a declared URL (https://<account>.blob.core.windows.net/<name>), or its URL here, names."""
        declared_url = self.aliases.get(declared_url, declared_url)
        name = declared_url.rstrip("/").rsplit("/", 1)[-1]
        if declared_url not in self.declared_urls.values():
            raise LookupError(f"{declared_url} is not a container of this stack's storage account")
        return name

    def permissions_of(self, principal_id: str, container: str) -> str:
        """The SAS permission letters an identity's role assignments grant on a container ("t" when none: a SAS
        that allows nothing useful, so every request is refused as Azure AD would refuse it)."""
        return "".join(sorted({p for g in self.grants if g.principal_id == principal_id
                               and g.container == container for p in g.permissions})) or "t"

    def as_identity(self, principal_id: str, declared_url: str) -> str:
        """The container URL an identity reaches it by, carrying exactly what its role grants (403 otherwise)."""
        container = self.container(declared_url)
        return self.azurite.container_url(container, self.permissions_of(principal_id, container))

    def people_sas(self) -> list[PeopleSas]:
        """Each SAS the program asks listStorageAccountServiceSAS for, minted with its container, permissions and
        expiry (its protocol, https only, cannot be honoured by Azurite's http endpoint)."""
        minted = []
        for invocation in self.ev.invocations:
            if invocation.token != SAS_FUNCTION:
                continue
            args = invocation.args
            container = str(args["canonicalizedResource"]).rsplit("/", 1)[-1]
            expiry = datetime.fromisoformat(str(args["sharedAccessExpiryTime"]).replace("Z", "+00:00"))
            minted.append(PeopleSas(container, str(args["permissions"]), str(args["sharedAccessExpiryTime"]),
                                    self.azurite.container_url(container, str(args["permissions"]), expiry=expiry)))
        return minted

    def write_probes(self) -> None:
        from azure.storage.blob import ContainerClient

        for container in self.declared_urls:
            ContainerClient.from_container_url(self.as_deployer(container)).upload_blob(PROBE, b"1", overwrite=True)

    def as_deployer(self, container: str, permissions: str = "racwdl") -> str:
        """The deployer signed in with Azure AD (Storage Blob Data Contributor on the account, in docs/deploying.md)."""
        return self.azurite.container_url(container, permissions)
