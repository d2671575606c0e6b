"""Storage: the StorageV2 account with the blob containers that carry the data path, and their SAS.

`data` holds the dataset as uploaded (ImageNet layout or tarballs), `scripts` what jobs fetch, `outputs`
what jobs write back (models, metrics, logs), `status` what machines report (the NFS server's staging).
People reach the first three by SAS, one per container, least permission,
https only, bounded expiry, minted by Azure from the account key without the key ever leaving Azure
(`listServiceSas`). The SAS values are Pulumi secrets: encrypted in state, masked in output. Results go to
`outputs` (Batch output files, Azure ML's output datastore): no file share (an Azure Files SMB mount on a
Batch pool needs the account key).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

import pulumi
from pulumi_azure_native import storage

from infra.components import roles
from infra.core.security import firewalls as security_firewalls, sas as security_sas
from infra.core.config.sections import StorageConfig
from infra.core.containers import CONTAINERS, SAS_PERMISSIONS, runtime_files, sas_expiry


SOFT_DELETE_DAYS = 7  # how long a deleted blob or container stays restorable (and billed)


@dataclass
class StorageArgs:
    storage: StorageConfig
    resource_group_name: pulumi.Input[str]
    location: str
    tags: dict[str, str]
    account_name: str
    subnet_ids: list[pulumi.Input[str]]  # subnets admitted through the storage firewall
    allowed_ip_ranges: tuple[str, ...]  # the deployers' egress (allowedIpRanges), admitted too
    now: datetime | None = None  # for the SAS expiry; tests pin it
    adopted: dict[str, str] = field(default_factory=dict)  # adoptRetained: the retained IDs (naming.retained_ids)


class Storage(pulumi.ComponentResource):
    def __init__(self, name: str, args: StorageArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("dltrain:storage:Storage", name, None, opts)
        cfg = args.storage
        # retainOutputs: `pulumi destroy` forgets the account, its settings and containers and leaves them (and the
        # models) in Azure; adoptRetained takes them back (infra/stack.py says how).
        child = pulumi.ResourceOptions(parent=self, retain_on_delete=cfg.retain_outputs)

        def kept(key: str) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(import_=args.adopted.get(key)))

        self._name = name
        encrypted = storage.EncryptionServiceArgs(enabled=True, key_type=storage.KeyType.ACCOUNT)

        self.account = storage.StorageAccount(
            f"{name}-account",
            account_name=args.account_name,
            resource_group_name=args.resource_group_name,
            location=args.location,
            tags=args.tags,
            kind=storage.Kind.STORAGE_V2,
            sku=storage.SkuArgs(name=storage.SkuName.STANDARD_LRS),
            access_tier=storage.AccessTier.HOT,
            enable_https_traffic_only=True,
            minimum_tls_version=storage.MinimumTlsVersion.TLS1_2,
            allow_blob_public_access=False,
            # The SAS lifetime the stack issues as the account's SAS expiration policy, Block: the stack's own SAS
            # fit it by construction (signed start, sasExpiryHours long); config/schema.py's ORG_SAS_POLICY_HOURS
            # says why.
            sas_policy=storage.SasPolicyArgs(sas_expiration_period=security_sas.sas_expiration_period(cfg.sas_expiry_hours),
                                             expiration_action=storage.ExpirationAction.BLOCK),
            # Deny by default: only the VNet subnets and the deployers' listed IPs get through; trusted Azure
            # services (Batch output upload, diagnostics) bypass the firewall.
            network_rule_set=storage.NetworkRuleSetArgs(
                default_action=storage.DefaultAction.DENY,
                bypass=storage.Bypass.AZURE_SERVICES,
                virtual_network_rules=[storage.VirtualNetworkRuleArgs(virtual_network_resource_id=subnet_id,
                                                                      action=storage.Action.ALLOW)
                                       for subnet_id in args.subnet_ids],
                # Single addresses bare: the storage firewall refuses /31 and /32
                # (security_firewalls.firewall_ip_rules).
                ip_rules=[storage.IPRuleArgs(i_p_address_or_range=rule, action=storage.Action.ALLOW)
                          for rule in security_firewalls.firewall_ip_rules(args.allowed_ip_ranges)],
            ),
            encryption=storage.EncryptionArgs(
                key_source=storage.KeySource.MICROSOFT_STORAGE,
                require_infrastructure_encryption=True,  # a second, infrastructure-level layer of AES-256
                services=storage.EncryptionServicesArgs(blob=encrypted, file=encrypted),
            ),
            opts=kept("account"))

        # The role that writes blobs without the container Actions of Storage Blob Data Contributor
        # (security/role_ids.py):
        # every grant that writes blobs in this account names it (grant()).
        self.writer_role, self.writer_role_id = roles.custom_role(
            f"{name}-blob-writer", roles.BLOB_DATA_WRITER, resource_group_name=args.resource_group_name, parent=self)

        self.containers = {
            container: storage.BlobContainer(
                f"{name}-{container}", container_name=container, account_name=self.account.name,
                resource_group_name=args.resource_group_name, public_access=storage.PublicAccess.NONE,
                opts=kept(f"container-{container}"))
            for container in CONTAINERS
        }

        # Soft delete of blobs and of whole containers: a deleted one can be restored for SOFT_DELETE_DAYS
        # (Blob Services - Set Service Properties: deleteRetentionPolicy, containerDeleteRetentionPolicy, days
        # 1-365: https://learn.microsoft.com/rest/api/storagerp/blob-services/set-service-properties;
        # https://learn.microsoft.com/azure/storage/blobs/soft-delete-container-overview). Only admins
        # (Contributor) can delete a container at all (role_ids.BLOB_DATA_WRITER); this undoes a mistake.
        retention = storage.DeleteRetentionPolicyArgs(enabled=True, days=SOFT_DELETE_DAYS)
        self.blob_service = storage.BlobServiceProperties(
            f"{name}-blob-service", account_name=self.account.name, resource_group_name=args.resource_group_name,
            blob_services_name="default", delete_retention_policy=retention,
            container_delete_retention_policy=retention, opts=kept("blob-service"))

        # The training runtime in `scripts`: a job fetches the current one, so a fix needs no image rebuild.
        self.scripts = [
            storage.Blob(f"{name}-script-{blob_name.replace('/', '-')}", account_name=self.account.name,
                         container_name=self.containers["scripts"].name, resource_group_name=args.resource_group_name,
                         blob_name=blob_name, source=pulumi.FileAsset(str(path)),
                         type=storage.BlobType.BLOCK, content_type="text/x-python",
                         # Code, uploaded again by every `up`: not retained, so nothing of it needs adopting.
                         opts=pulumi.ResourceOptions(parent=self))
            for blob_name, path in runtime_files().items()
        ]

        self.container_urls = {
            container: pulumi.Output.concat(self.account.primary_endpoints.blob, c.name)
            for container, c in self.containers.items()
        }
        # Signed start and expiry: the hour of `up` and sasExpiryHours after it. Under Block a SAS without a signed
        # start is out of policy (security/resources.py), and its validity (expiry - start) is exactly the account's
        # period.
        now = args.now or datetime.now(timezone.utc)
        start, expiry = sas_expiry(now, 0), sas_expiry(now, cfg.sas_expiry_hours)
        self.sas = {
            container: self._container_sas(args.resource_group_name, container, permissions, start, expiry)
            for container, permissions in SAS_PERMISSIONS.items()
        }
        self.register_outputs({
            "account_name": self.account.name,
            "container_urls": self.container_urls,
            "sas": self.sas,
        })

    def grant(self, label: str, principal_id: pulumi.Input[str], container: str | None, role: str,
              principal_type: str = roles.SERVICE_PRINCIPAL, description: str | None = None,
              condition: str | None = None):
        """A principal's access to one container, or to the whole account where `container` is None (Storage
        Blob Data Reader or the stack's Blob Data Writer); a managed identity unless `principal_type` says otherwise."""
        scope = self.account.id if container is None else self.containers[container].id
        return roles.assign(f"{self._name}-{label}", role=role, principal_id=principal_id, scope=scope, parent=self,
                            principal_type=principal_type, description=description, condition=condition,
                            definition=self.writer_role_id if role == roles.BLOB_DATA_WRITER else None)

    def _container_sas(self, resource_group_name, container: str, permissions: str, start: str,
                       expiry: str) -> pulumi.Output[str]:
        token = storage.list_storage_account_service_sas_output(
            account_name=self.account.name,
            resource_group_name=resource_group_name,
            canonicalized_resource=pulumi.Output.concat("/blob/", self.account.name, "/", container),
            resource=storage.SignedResource.C,
            permissions=permissions,
            protocols=storage.HttpProtocol.HTTPS,
            shared_access_start_time=start,
            shared_access_expiry_time=expiry,
            opts=pulumi.InvokeOutputOptions(parent=self, depends_on=[self.containers[container]]),
        ).service_sas_token
        return pulumi.Output.secret(token)
