"""`python -m infra leftovers` at the wire (tests/infra/backends/arm_endpoint.py): after `pulumi destroy`, a retained
account in its group and a soft-deleted key vault are listed with the command that removes or purges each;
nothing left exits 0."""
import pytest

from infra.cli.main import main
from tests.infra.backends.arm_endpoint import SUBSCRIPTION, ArmEndpoint
from tests.infra.cli.test_preflight import DEV_GPU, clients

GROUP = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/rg-dltrain-nlp-nlp"


@pytest.fixture
def arm():
    endpoint = ArmEndpoint("westus2", DEV_GPU)
    yield endpoint
    endpoint.close()


def deleted_vault(name: str, group_id: str, purge_protection: bool) -> dict:
    return {"id": f"/subscriptions/{SUBSCRIPTION}/providers/Microsoft.KeyVault/locations/westus2/deletedVaults/{name}",
            "name": name, "type": "Microsoft.KeyVault/deletedVaults",
            "properties": {"vaultId": f"{group_id}/providers/Microsoft.KeyVault/vaults/{name}", "location": "westus2",
                           "deletionDate": "2026-11-20T10:00:59Z", "scheduledPurgeDate": "2027-02-18T10:00:59Z",
                           "tags": {}, "purgeProtectionEnabled": purge_protection}}


def test_a_retained_account_and_a_soft_deleted_vault_are_listed_with_their_commands(arm, capsys):
    arm.group = {"id": GROUP, "name": "rg-dltrain-nlp-nlp", "location": "westus2",
                 "properties": {"provisioningState": "Succeeded"}}
    arm.resources = [{"id": f"{GROUP}/providers/Microsoft.Storage/storageAccounts/stnlp1234", "name": "stnlp1234",
                      "type": "Microsoft.Storage/storageAccounts", "location": "westus2", "kind": "StorageV2",
                      "sku": {"name": "Standard_LRS"}, "tags": {"stack": "nlp"}}]
    arm.deleted_vaults = [deleted_vault("kv-nlp-1a2b3c4d", GROUP, False),
                          deleted_vault("kv-nlp-9f8e7d6c", GROUP, True),
                          deleted_vault("kv-other-00000000", GROUP.replace("nlp-nlp", "other-x"), False)]
    assert main(["leftovers", "--stack", "nlp"], preflight_services=lambda: clients(arm)) == 1
    out = capsys.readouterr().out
    assert "storage account stnlp1234 (retained): bills for the data left in it" in out
    assert "`az storage account delete --name stnlp1234 --resource-group rg-dltrain-nlp-nlp --yes`" in out
    assert f"`az group delete --name rg-dltrain-nlp-nlp --subscription {SUBSCRIPTION} --yes`" in out
    assert "key vault kv-nlp-1a2b3c4d (soft-deleted): $0, holds its name until 2027-02-18T10:00:59Z; remove: " \
           "`az keyvault purge --name kv-nlp-1a2b3c4d --location westus2`" in out
    # Purge protection: no command removes it, and none has to (the next `up` names the vault anew); no
    # "remove: `...`" that is not a command.
    assert "key vault kv-nlp-9f8e7d6c (soft-deleted, purge protection): $0, holds its name until " \
           "2027-02-18T10:00:59Z; nothing can purge it before then, and nothing needs to: the stack's next `up` " \
           "names its vault (Azure ML's, or a user-subscription Batch account's) from a new name generation" in out
    assert "remove: `nothing" not in out
    assert "kv-other" not in out  # another stack's vault
    assert "4 left" in out


def test_nothing_left_exits_0(arm, capsys):
    assert main(["leftovers", "--stack", "nlp"], preflight_services=lambda: clients(arm)) == 0
    assert "nothing: the stack left no resource" in capsys.readouterr().out
