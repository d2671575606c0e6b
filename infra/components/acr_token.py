"""A password for an ACR token, as a Pulumi dynamic resource.

pulumi-azure-native can declare a registry token but not generate its password (ARM's
`generateCredentials` action; pulumi/pulumi-azure-native#3099), and pushing with the registry's admin
user is what we must not do. This resource calls that action once, on create, with the deployer's Azure
AD identity, and keeps the password as a secret output. ARM is reached through one seam, `ArmClient`,
which the tests replace.
"""
from __future__ import annotations

import json
import time
import urllib.request
from typing import Any, Protocol

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider

ARM = "https://management.azure.com"
API_VERSION = "2023-07-01"
PASSWORD_NAME = "password1"


class ArmClient(Protocol):
    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST an ARM action at `path` (no host, no api-version) and return the final JSON body."""


class AzureArmClient:
    """ARM over HTTPS with DefaultAzureCredential; follows the long-running-operation protocol."""

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        from azure.identity import DefaultAzureCredential

        token = DefaultAzureCredential().get_token(f"{ARM}/.default").token
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        request = urllib.request.Request(f"{ARM}{path}?api-version={API_VERSION}", data=json.dumps(body).encode(),
                                         headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            status, location, payload = response.status, response.headers.get("Location"), response.read()
        while status == 202 and location:  # accepted: poll until the operation returns its result
            time.sleep(2)
            with urllib.request.urlopen(urllib.request.Request(location, headers=headers), timeout=60) as response:
                status, location, payload = response.status, response.headers.get("Location") or location, response.read()
        return json.loads(payload or b"{}")


class TokenPasswordProvider(ResourceProvider):
    def __init__(self, client: ArmClient | None = None):
        self._client = client

    def create(self, props: dict[str, Any]) -> CreateResult:
        client = self._client or AzureArmClient()
        result = client.post(f"{props['registry_id']}/generateCredentials",
                             {"tokenId": props["token_id"], "name": PASSWORD_NAME, "expiry": props["expiry"]})
        password = next((p["value"] for p in result.get("passwords", []) if p.get("name") == PASSWORD_NAME), None)
        if not password:
            raise RuntimeError(f"generateCredentials returned no {PASSWORD_NAME} for token {props['token_id']}")
        return CreateResult(id_=f"{props['token_id']}/{PASSWORD_NAME}",
                            outs={**props, "username": result.get("username", ""), "password": password})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [key for key in ("registry_id", "token_id", "expiry") if olds.get(key) != news.get(key)]
        return DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=False)

    # Deleting needs no call: the password dies with its token, and a replacement overwrites password1.


class TokenPassword(pulumi.dynamic.Resource):
    username: pulumi.Output[str]
    password: pulumi.Output[str]

    def __init__(self, name: str, registry_id: pulumi.Input[str], token_id: pulumi.Input[str], expiry: str,
                 opts: pulumi.ResourceOptions | None = None):
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=["password"]))
        super().__init__(TokenPasswordProvider(), name,
                         {"registry_id": registry_id, "token_id": token_id, "expiry": expiry,
                          "username": None, "password": None}, opts)
