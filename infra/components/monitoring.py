"""Monitoring: a Log Analytics workspace and Application Insights, fed by diagnostic settings.

Storage access logs (who read or wrote which blob, with which SAS) matter for a data path built on SAS;
every other resource type that has resource logs (Batch account, Azure ML workspace, registry, Key Vault, the
budget guard's Logic App) sends them to the same workspace.
"""
from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_azure_native import applicationinsights, monitor, operationalinsights

from infra.core.config.sections import MonitoringConfig

BLOB_LOG_CATEGORIES = ("StorageRead", "StorageWrite", "StorageDelete")
# Batch: service logs (pool resizes, task starts and ends), audit (who changed what) and metrics (nodes).
# `ServiceLog` is the category's name; `ServiceLogs` is deprecated
# (https://learn.microsoft.com/azure/batch/batch-diagnostics#service-log-events).
BATCH_LOG_CATEGORIES = ("ServiceLog", "AuditLog")
# Azure ML workspace: cluster and job events, GPU/CPU utilisation, run status changes
# (https://learn.microsoft.com/azure/azure-monitor/reference/supported-logs/microsoft-machinelearningservices-workspaces-logs).
AML_LOG_CATEGORIES = ("AmlComputeClusterEvent", "AmlComputeJobEvent", "AmlComputeCpuGpuUtilization",
                      "AmlRunStatusChangedEvent")

# Resource logs of the other types that have them (Azure Policy's "Resource logs in ... should be enabled" family):
# the registry's logins and pushes/pulls
# (https://learn.microsoft.com/azure/azure-monitor/reference/supported-logs/microsoft-containerregistry-registries-logs),
# the Key Vault's audit of every access
# (https://learn.microsoft.com/azure/azure-monitor/reference/supported-logs/microsoft-keyvault-vaults-logs) and the
# budget guard's runs (https://learn.microsoft.com/azure/azure-monitor/reference/supported-logs/microsoft-logic-workflows-logs).
REGISTRY_LOG_CATEGORIES = ("ContainerRegistryLoginEvents", "ContainerRegistryRepositoryEvents")
KEY_VAULT_LOG_CATEGORIES = ("AuditEvent",)
# The registry and the Key Vault send them as the category group allLogs (their categories above, and any Azure adds):
# Azure Policy's built-in "Resource logs should be enabled for Audit on supported resources" (Azure/azure-policy
# built-in-policies/policyDefinitions/Monitoring/DiagnosticSettingsExistsAudit_Audit.json, 187242f4-89c6-4c43-9a4e-
# 188c0efacc5f) counts only logs[*] with categoryGroup audit or allLogs for these types, so a list of categories
# reads to it as no logs at all.
ALL_LOGS = "allLogs"
LOGIC_APP_LOG_CATEGORIES = ("WorkflowRuntime",)


@dataclass
class MonitoringArgs:
    monitoring: MonitoringConfig
    resource_group_name: pulumi.Input[str]
    location: str
    tags: dict[str, str]


class Monitoring(pulumi.ComponentResource):
    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("dltrain:monitoring:Monitoring", name, None, opts)
        self._name = name
        child = pulumi.ResourceOptions(parent=self)
        common = dict(resource_group_name=args.resource_group_name, location=args.location, tags=args.tags)

        self.workspace = operationalinsights.Workspace(
            f"{name}-logs", **common,
            sku=operationalinsights.WorkspaceSkuArgs(name=operationalinsights.WorkspaceSkuNameEnum.PER_GB2018),
            retention_in_days=args.monitoring.log_retention_days, opts=child)
        self.app_insights = applicationinsights.Component(
            f"{name}-appinsights", **common, kind="other",
            application_type=applicationinsights.ApplicationType.OTHER,
            workspace_resource_id=self.workspace.id,
            ingestion_mode=applicationinsights.IngestionMode.LOG_ANALYTICS, opts=child)
        self.register_outputs({"workspace_id": self.workspace.id, "app_insights_id": self.app_insights.id})

    def watch_storage(self, label: str, account_id: pulumi.Input[str]) -> list[monitor.DiagnosticSetting]:
        """Send the account's metrics and its blob service's access logs to the workspace."""
        child = pulumi.ResourceOptions(parent=self)
        name = f"{self._name}-{label}"
        return [
            monitor.DiagnosticSetting(
                f"{name}-account-diag", resource_uri=account_id, workspace_id=self.workspace.id,
                metrics=[monitor.DiagnosticsMetricSettingsArgs(category="Transaction", enabled=True)], opts=child),
            monitor.DiagnosticSetting(
                f"{name}-blob-diag", resource_uri=pulumi.Output.concat(account_id, "/blobServices/default"),
                workspace_id=self.workspace.id,
                logs=[monitor.DiagnosticsLogSettingsArgs(category=c, enabled=True) for c in BLOB_LOG_CATEGORIES],
                metrics=[monitor.DiagnosticsMetricSettingsArgs(category="Transaction", enabled=True)], opts=child),
        ]

    def watch_batch(self, label: str, account_id: pulumi.Input[str]) -> monitor.DiagnosticSetting:
        """Send the Batch account's service logs, audit log and metrics (node counts, tasks) to the workspace."""
        return self._watch(label, account_id, BATCH_LOG_CATEGORIES)

    def watch_azureml(self, label: str, workspace_id: pulumi.Input[str]) -> monitor.DiagnosticSetting:
        """Send the Azure ML workspace's cluster, job and utilisation logs and its metrics to the workspace."""
        return self._watch(label, workspace_id, AML_LOG_CATEGORIES)

    def watch_registry(self, label: str, registry_id: pulumi.Input[str]) -> monitor.DiagnosticSetting:
        """Send the registry's login and repository events and its metrics to the workspace."""
        return self._watch(label, registry_id, REGISTRY_LOG_CATEGORIES, group=ALL_LOGS)

    def watch_key_vault(self, label: str, vault_id: pulumi.Input[str]) -> monitor.DiagnosticSetting:
        """Send the Key Vault's audit events and metrics to the workspace."""
        return self._watch(label, vault_id, KEY_VAULT_LOG_CATEGORIES, group=ALL_LOGS)

    def watch_logic_app(self, label: str, workflow_id: pulumi.Input[str]) -> monitor.DiagnosticSetting:
        """Send the Logic App's run history (the budget guard's calls and their outcomes) to the workspace."""
        return self._watch(label, workflow_id, LOGIC_APP_LOG_CATEGORIES)

    def _watch(self, label: str, resource_id: pulumi.Input[str], categories: tuple[str, ...],
               group: str | None = None) -> monitor.DiagnosticSetting:
        """`categories`, or the category group `group` (which holds them) where a built-in audit looks for one."""
        logs = [monitor.DiagnosticsLogSettingsArgs(category_group=group, enabled=True)] if group else \
            [monitor.DiagnosticsLogSettingsArgs(category=c, enabled=True) for c in categories]
        return monitor.DiagnosticSetting(
            f"{self._name}-{label}-diag", resource_uri=resource_id, workspace_id=self.workspace.id,
            logs=logs,
            metrics=[monitor.DiagnosticsMetricSettingsArgs(category="AllMetrics", enabled=True)],
            opts=pulumi.ResourceOptions(parent=self))
