"""This month's spend on a stack's resource group, from the Cost Management query API, with the real
azure-mgmt-costmanagement client (POST {scope}/providers/Microsoft.CostManagement/query:
https://learn.microsoft.com/rest/api/cost-management/query/usage). Signed in with Azure AD like every job verb;
Reader on the resource group may read its costs (https://learn.microsoft.com/azure/cost-management-billing/costs/
assign-access-acm-data: "Reader ... can view cost data"), which teamMembers have. The tests point the same client
at a local HTTPS endpoint answering as the service does (tests/infra/backends/cost_endpoint.py).
"""
from __future__ import annotations

from typing import Any

from infra.core.budget import QUERY, Spend, SpendUnreadable, spend_from_query


def scope(subscription_id: str, resource_group: str) -> str:
    """The query's scope, as the REST spec's examples write it (no leading slash: the URL template adds one)."""
    return f"subscriptions/{subscription_id}/resourceGroups/{resource_group}"


class CostManagementSpend:
    """Month-to-date spend through a CostManagementClient (`client`, else one for Azure's public cloud signed in
    with DefaultAzureCredential)."""

    def __init__(self, client: Any = None):
        if client is None:
            from azure.identity import DefaultAzureCredential
            from azure.mgmt.costmanagement import CostManagementClient

            client = CostManagementClient(DefaultAzureCredential())
        self.client = client

    def month_to_date(self, query_scope: str) -> Spend:
        result = self.client.query.usage(query_scope, QUERY)
        # 204 No Content (the SDK's None) is documented beside 200 for the query; it carries no rows: nothing yet.
        return spend_from_query(result.as_dict() if result is not None else {"properties": {"columns": [
            {"name": "Cost"}], "rows": []}})

    def close(self) -> None:
        self.client.close()


def read(spend: CostManagementSpend, query_scope: str) -> tuple[Spend | None, str | None]:
    """(spend, None), or (None, why not) when Azure refuses or the answer lacks what the guard needs: the guard
    decides what that means (infra/core/budget.py)."""
    from azure.core.exceptions import AzureError

    from infra.backends.shared import status_line

    try:
        return spend.month_to_date(query_scope), None
    except SpendUnreadable as err:
        return None, str(err)
    except AzureError as err:
        return None, status_line(err)
