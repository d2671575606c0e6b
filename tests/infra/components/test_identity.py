"""The nodes' identity is its own component (infra/components/identity.py): every user of it gets the same one,
and an existing stack moves it from under the Registry, where it used to be, instead of replacing it."""
import pulumi

from infra import stack
from infra.core.config import stack as config
from infra.preview import offline
from tests.infra.conftest import NOW

# The identity's URN in a dev stack deployed before it had its own component: the Registry's child.
BEFORE = ("urn:pulumi:dev::azure-dl-training::dltrain:index:Environment$dltrain:registry:Registry"
          "$azure-native:managedidentity:UserAssignedIdentity::dltrain-dev-reg-pull-id")


def test_the_node_identity_is_its_own_component_and_every_grant_and_output_uses_it(ev):
    [identity] = [r for r in ev.of_type("azure-native:managedidentity:UserAssignedIdentity")
                  if r.name.endswith("-nodes-pull-id")]
    component = ev.one("dltrain:identity:NodeIdentity")
    assert identity.parent_urn == component.urn
    registry = ev.one("dltrain:registry:Registry")
    assert not [r for r in ev.of_type("azure-native:managedidentity:UserAssignedIdentity")
                if r.parent_urn == registry.urn]  # moved out, not copied
    assert (ev.outputs["pullIdentityId"], ev.outputs["pullIdentityClientId"]) == (
        identity.state["id"], identity.state["clientId"])
    acr_pull = ev.one("azure-native:authorization:RoleAssignment", "acr-pull")
    node_grants = [r for r in ev.of_type("azure-native:authorization:RoleAssignment") if "-data-nodes-" in r.name]
    assert node_grants and acr_pull.inputs["principalId"] == identity.state["principalId"]
    assert {g.inputs["principalId"] for g in node_grants} == {identity.state["principalId"]}, identity.urn


def test_an_existing_stack_keeps_its_identity_through_an_alias_to_its_urn_under_the_registry(monkeypatch):
    cfg = config.from_stack_file("dev")
    aliases: list[str] = []
    real_deploy = stack.deploy

    def deploy(config_, now):
        env = real_deploy(config_, now)
        pulumi.Output.all(*env.node_identity.identity._aliases).apply(aliases.extend)
        return env

    monkeypatch.setattr(stack, "deploy", deploy)
    offline.evaluate(cfg, now=NOW)
    # The SDK adds the provider's own type aliases (older API versions); ours is the one under the Registry.
    moved = [urn for urn in aliases if "dltrain:registry:Registry" in urn]
    # Pulumi's mocks put the root stack's type into its children's URNs; the engine leaves it out
    # (https://www.pulumi.com/docs/iac/concepts/resources/names/#urns), so this is what the engine sees.
    assert [urn.replace("::pulumi:pulumi:Stack$", "::") for urn in moved] == [BEFORE]
