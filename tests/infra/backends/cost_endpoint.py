"""The Cost Management query API at the wire: a local HTTPS endpoint that answers
POST /{scope}/providers/Microsoft.CostManagement/query as the service does, so the real azure-mgmt-costmanagement
client (infra/backends/spend.py) is what the tests exercise.

The answer's shape is the REST spec's (Azure/azure-rest-api-specs, specification/cost-management/resource-manager/
Microsoft.CostManagement/stable/2023-03-01/examples/BillingAccountQuery.json: id, name, type and properties with
columns [{name, type}] and rows), the errors ARM's ({"error": {"code", "message"}}, e.g. 403 AuthorizationFailed:
https://learn.microsoft.com/azure/azure-resource-manager/troubleshooting/common-deployment-errors). A request
without a bearer token is refused 401, as ARM refuses it; anything but the query answers 404.
"""
from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qs, urlparse

from devtools.rehearsal.local_https import LocalHttps, QuietHandler

QUERY_PATH = re.compile(r"/(subscriptions/[^/]+/resourceGroups/[^/]+)/providers/Microsoft\.CostManagement/query",
                        re.IGNORECASE)


class CostEndpoint:
    """`rows` (list of [cost, currency]) is what the next query answers; `refuse` = (status, code, message) makes
    every query fail so. `requests` lists (scope, api-version, body) as they arrived."""

    def __init__(self):
        self.rows: list[list[Any]] = []
        self.refuse: tuple[int, str, str] | None = None
        self.requests: list[tuple[str, str, dict]] = []
        endpoint = self

        class Handler(QuietHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else {}
                url = urlparse(self.path)
                match = QUERY_PATH.fullmatch(url.path)
                token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                if not match:
                    status, payload = 404, _error("NotFound", f"No route for {url.path}")
                elif not token:
                    status, payload = 401, _error("AuthenticationFailed", "Authentication failed. The "
                                                  "'Authorization' header is missing.")
                else:
                    endpoint.requests.append((match.group(1), parse_qs(url.query).get("api-version", [""])[0], body))
                    if endpoint.refuse:
                        status, (code, message) = endpoint.refuse[0], endpoint.refuse[1:]
                        payload = _error(code, message)
                    else:
                        status, payload = 200, endpoint.answer(match.group(1))
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._https = LocalHttps(Handler)
        self.url, self.ca_file = self._https.url, self._https.ca_file

    def answer(self, scope: str) -> dict[str, Any]:
        """A QueryResult as the spec's example writes one, for an ActualCost query summed to one row."""
        return {"id": f"{scope}/providers/Microsoft.CostManagement/query/00000000-0000-0000-0000-000000000001",
                "name": "00000000-0000-0000-0000-000000000001", "type": "microsoft.costmanagement/Query",
                "properties": {"nextLink": None,
                               "columns": [{"name": "Cost", "type": "Number"}, {"name": "Currency", "type": "String"}],
                               "rows": self.rows}}

    def close(self) -> None:
        self._https.close()


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


class Token:
    """A credential that always has a token (the endpoint checks that one is sent, not who issued it)."""

    def get_token(self, *scopes, **kwargs):
        from azure.core.credentials import AccessToken

        return AccessToken("test-token", 2**40)

    def get_token_info(self, *scopes, options=None):
        from azure.core.credentials import AccessTokenInfo

        return AccessTokenInfo("test-token", 2**40)


def spend_client(endpoint: CostEndpoint):
    """The real CostManagementClient at `endpoint`, trusting its certificate; no retries, so a refusal is one
    request."""
    from azure.mgmt.costmanagement import CostManagementClient

    from infra.backends.spend import CostManagementSpend

    return CostManagementSpend(CostManagementClient(Token(), base_url=endpoint.url, connection_verify=endpoint.ca_file,
                                                    retry_total=0))
