"""Globally unique names hold across subscriptions and tenants, computed offline from the stack file, and a stack
deployed before keeps its names (infra/core/naming.py, docs/naming.md)."""
from infra.core import naming
from infra.core.config import stack as config
from tests.infra.conftest import evaluation_for

SUB_A = "0a1b2c3d-0000-4000-8000-00000000000a"
SUB_B = "0a1b2c3d-0000-4000-8000-00000000000b"
GLOBAL = {"storage": naming.storage_account, "registry": naming.registry, "batch": naming.batch_account,
          "nfs": naming.nfs_storage_account}


def _names(subscription):
    names = {kind: f("dev", "dev", "westeurope", subscription) for kind, f in GLOBAL.items()}
    return {**names, "vault": naming.key_vault("dev", "dev", "westeurope", "g1", subscription)}


def test_without_a_subscription_the_names_are_the_ones_deployed_stacks_have():
    # The dev stack's storage account as deployed before the subscription joined the hash (test_preflight pins it).
    assert naming.storage_account("dev", "dev", "westeurope") == "stdeve54846c5"
    assert _names(None) == _names("")


def test_each_subscription_gets_its_own_globally_unique_names():
    unset, a, b = _names(None), _names(SUB_A), _names(SUB_B)
    for kind in unset:
        assert len({unset[kind], a[kind], b[kind]}) == 3, kind
    assert all(len(name) <= 24 for name in a.values())
    assert naming.resource_group("dev", "dev") == "rg-dltrain-dev-dev"  # per subscription already


def test_plan_names_differ_across_subscriptions_from_the_stack_file_alone(tmp_path):
    from infra import REPO_ROOT
    from tests.infra.components.test_retained import SUB, vision_in_subscription

    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    body = (REPO_ROOT / "Pulumi.vision.yaml").read_text()
    (tmp_path / "Pulumi.a.yaml").write_text(body + f"  azure-native:subscriptionId: {SUB}\n")
    cfg = config.from_stack_file("a", tmp_path)
    assert cfg.naming_subscription == SUB

    def evaluated(ev):
        return {t: sorted(r.inputs[key] for r in ev.of_type(t)) for t, key in (
            ("azure-native:storage:StorageAccount", "accountName"), ("azure-native:batch:BatchAccount", "accountName"),
            ("azure-native:containerregistry:Registry", "registryName"))}

    # The program's names for the stack in subscription SUB (an evaluation test_retained shares), against its
    # cached plan without one; that another subscription differs again is the pure functions' test above.
    in_sub, unset = evaluated(vision_in_subscription(False)), evaluated(evaluation_for("vision"))
    for token in in_sub:
        assert in_sub[token] and set(in_sub[token]).isdisjoint(unset[token]), token
    t, s_, loc = cfg.team, "vision", cfg.location  # the evaluated stack (the file here is stack "a")
    assert naming.storage_account(t, s_, loc, SUB) in in_sub["azure-native:storage:StorageAccount"]
    assert in_sub["azure-native:batch:BatchAccount"] == [naming.batch_account(t, s_, loc, SUB)]
    assert in_sub["azure-native:containerregistry:Registry"] == [naming.registry(t, s_, loc, SUB)]
    # namesWithoutSubscription: a stack deployed before keeps its names when it adds its subscription.
    (tmp_path / "Pulumi.a.yaml").write_text(body + f"  azure-native:subscriptionId: {SUB}\n"
                                                   "  azure-dl-training:namesWithoutSubscription: true\n")
    pinned = config.from_stack_file("a", tmp_path)
    assert pinned.subscription_id == SUB and pinned.naming_subscription is None
