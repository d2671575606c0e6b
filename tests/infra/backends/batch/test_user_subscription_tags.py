"""User-subscription mode, what Azure would do with it: Batch creates the pool's VMs, disks and NICs in the team's
subscription and only the pool's `resourceTags` reach them (Pool.resourceTags: "propagated to the backing Azure
resources associated with the pool", and refused unless the account is in UserSubscription mode), so cost reports
and a tag-requiring Deny policy see the team's tags; and `batchServiceObjectId` set to the Batch service's app ID
(the GUID every tenant shares, which `plan` prints) is refused in one line before anything is created."""
import pytest

from infra.backends.batch.cluster import BATCH_SERVICE_APP_ID
from infra.cli.main import main
from tests.infra.backends.batch.test_user_subscription import ev, stack_file  # noqa: F401 - the module's evaluation
from tests.infra.conftest import evaluation_for


def test_a_user_subscription_pool_tags_the_vms_batch_creates(ev):  # noqa: F811
    pool = ev.one("azure-native:batch:Pool").inputs
    assert pool["resourceTags"] == ev.config.tags and pool["tags"] == ev.config.tags
    assert {"team", "stack"} <= set(pool["resourceTags"])
    from infra.cli import plan

    shown, _ = plan.render(ev)
    assert f"resourceTags.team={ev.config.team}" in shown  # plan shows it beside the pool


def test_a_batch_service_pool_sets_no_resource_tags():
    pool = evaluation_for("dev").one("azure-native:batch:Pool").inputs
    assert "resourceTags" not in pool  # Batch refuses it outside UserSubscription mode


@pytest.mark.parametrize("value", [BATCH_SERVICE_APP_ID, BATCH_SERVICE_APP_ID.upper()])
def test_the_batch_app_id_is_refused_in_one_line_naming_the_fix(tmp_path, capsys, value):
    project = stack_file(tmp_path, "batchPoolAllocation: user-subscription", f"batchServiceObjectId: {value}")
    assert main(["plan", "--stack", "dev", "--project-dir", str(project)]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "batchServiceObjectId" in err, err
    assert "application (client) ID" in err and f"az ad sp show --id {BATCH_SERVICE_APP_ID} --query id" in err


def test_the_account_waits_out_the_vault_grants_propagation(ev):  # noqa: F811
    """The account validates its vault when created; the Batch service's grant there takes minutes to take effect
    (infra/components/propagation.py), so the account depends on a wait created after the grant, not on the grant."""
    grant = next(r for r in ev.of_type("azure-native:authorization:RoleAssignment") if r.name.endswith("-batch-service-kv"))
    wait = next(r for r in ev.of_type("pulumi-python:dynamic:Resource") if "propagation_s" in r.inputs)
    account = ev.one("azure-native:batch:BatchAccount")
    assert wait.inputs["grant"] == grant.state["id"] and wait.inputs["propagation_s"] == 300
    assert wait.urn in account.dependencies and grant.urn in wait.dependencies


def test_the_wait_sleeps_on_create_only_and_again_for_a_new_grant(monkeypatch):
    from infra.components import propagation

    slept = []
    monkeypatch.setattr(propagation, "sleep", slept.append)
    provider = propagation.PropagationProvider()
    created = provider.create({"grant": "/g/1", "propagation_s": 300})
    assert slept == [300.0] and created.id == "/g/1"
    assert not provider.diff("/g/1", {"grant": "/g/1", "propagation_s": 300}, {"grant": "/g/1", "propagation_s": 300}).changes
    again = provider.diff("/g/1", {"grant": "/g/1"}, {"grant": "/g/2"})
    assert again.changes and again.replaces == ["grant"]


def test_the_accounts_vault_reference_is_the_uri_the_vault_reports(monkeypatch):
    """In a sovereign cloud the vault's DNS suffix is not vault.azure.net: the reference takes properties.vaultUri."""
    from infra.preview import offline
    from tests.infra.backends.batch.test_user_subscription import user_subscription
    from tests.infra.conftest import NOW

    created = offline.AzureMocks.new_resource

    def china(self, args):
        rid, state = created(self, args)
        if args.typ == "azure-native:keyvault:Vault":
            state["properties"]["vaultUri"] = f"https://{state['name']}.vault.azure.cn/"
        return rid, state

    monkeypatch.setattr(offline.AzureMocks, "new_resource", china)
    ev = offline.evaluate(user_subscription(), now=NOW)  # noqa: F811
    vault = ev.one("azure-native:keyvault:Vault")
    reference = ev.one("azure-native:batch:BatchAccount").inputs["keyVaultReference"]
    assert reference["url"] == f"https://{vault.inputs['vaultName']}.vault.azure.cn/"
