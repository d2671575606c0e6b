"""A password for an ACR token, as a Pulumi dynamic resource.

pulumi-azure-native can declare a registry token but not generate its password (ARM's
`generateCredentials` action; pulumi/pulumi-azure-native#3099), and pushing with the registry's admin
user is what we must not do. This resource calls that action once, on create, with the deployer's Azure
AD identity, and keeps the password as a secret output.

`generateCredentials` is a long-running operation (Registries - Generate Credentials: 200, or 202 with a Location
to poll; https://learn.microsoft.com/rest/api/containerregistry/registries/generate-credentials). It runs as
azure-mgmt-containerregistry's `registries.begin_generate_credentials` runs it: azure-mgmt-core's ARMPipelineClient
(bearer token for ARM, ARM's error format) and azure-core's LROPoller with azure-mgmt-core's ARMPolling,
final state via `location`, api-version 2025-11-01 (the generated client's). Not that package itself: it would be
one more pinned dependency in the deployer's .venv, beside the OpenTelemetry pins requirements.txt already holds so
that pip resolves azure-ai-ml with Pulumi, for this one call; azure-mgmt-core is already there (preflight uses it).
"""
from __future__ import annotations

import json
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider

ARM = "https://management.azure.com"
# azure-mgmt-containerregistry's api-version and final state for Registries - Generate Credentials
# (containerregistry stable/2025-11-01; its operations/_registries_operations.py).
API_VERSION = "2025-11-01"
FINAL_STATE_VIA = "location"
PASSWORD_NAME = "password1"


class AzureArmClient:
    """ARM's action POSTs with their long-running operation followed by azure-core's ARM poller. `credential` (a
    TokenCredential; default DefaultAzureCredential), `base_url` and `connection_verify` point it elsewhere (the
    tests' local endpoint and its certificate); `polling_interval` is the wait when ARM gives no Retry-After."""

    def __init__(self, credential: Any = None, base_url: str = ARM, connection_verify: Any = True,
                 polling_interval: float = 2):
        self.credential, self.base_url = credential, base_url.rstrip("/")
        self.connection_verify, self.polling_interval = connection_verify, polling_interval

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST the action at `path` (no host, no api-version) and return the operation's final JSON body; a
        refusal or a failed operation raises one RuntimeError naming the action and ARM's code and message."""
        from azure.core.exceptions import HttpResponseError
        from azure.core.pipeline import policies
        from azure.core.pipeline.transport import RequestsTransport
        from azure.core.polling import LROPoller
        from azure.core.rest import HttpRequest
        from azure.mgmt.core import ARMPipelineClient
        from azure.mgmt.core.exceptions import ARMErrorFormat
        from azure.mgmt.core.polling.arm_polling import ARMPolling
        from azure.mgmt.core.policies import ARMChallengeAuthenticationPolicy, ARMHttpLoggingPolicy

        if self.credential is None:
            from azure.identity import DefaultAzureCredential
            self.credential = DefaultAzureCredential()
        action = path.rsplit("/", 1)[-1]
        with ARMPipelineClient(base_url=self.base_url, transport=RequestsTransport(
                connection_verify=self.connection_verify, connection_timeout=10, read_timeout=60), policies=[
                policies.RequestIdPolicy(), policies.HeadersPolicy(), policies.UserAgentPolicy("dltrain-deployer"),
                policies.RetryPolicy(),
                ARMChallengeAuthenticationPolicy(self.credential, f"{ARM}/.default"),
                ARMHttpLoggingPolicy()]) as client:
            try:
                initial = client.send_request(HttpRequest("POST", f"{self.base_url}{path}",
                                                          params={"api-version": API_VERSION}, json=body),
                                              _return_pipeline_response=True)
                if initial.http_response.status_code not in (200, 202):
                    raise HttpResponseError(response=initial.http_response, error_format=ARMErrorFormat)
                poller = LROPoller(client, initial, lambda response: json.loads(response.http_response.text() or "{}"),
                                   ARMPolling(self.polling_interval, lro_options={"final-state-via": FINAL_STATE_VIA}))
                return poller.result()
            except HttpResponseError as error:
                raise RuntimeError(f"ARM {action} on {path.rsplit('/', 1)[0]} failed: {_arm_error(error)}") from None


def _arm_error(error: Any) -> str:
    """ARM's `code: message` from a refusal or a failed operation's status body ({status, error{code, message}})."""
    try:
        detail = error.response.json().get("error") or {}
    except Exception:  # not JSON: say what azure-core says
        detail = {}
    if detail.get("code") or detail.get("message"):
        return f"{detail.get('code', '')}: {detail.get('message', '')}".strip(": ")
    return str(error.message).splitlines()[0]


class TokenPasswordProvider(ResourceProvider):
    def __init__(self, client: AzureArmClient | None = None):
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
