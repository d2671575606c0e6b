"""A retained stack comes back after `destroy` only if its VNet and subnets keep their names: the retained storage
account's VNet rules name the subnets by ID, and adopting the account (adoptRetained, Pulumi's import) fails when
the program's inputs differ from the account's ("inputs to import do not match"). azure-native names a resource the
program leaves unnamed "the logical name plus a random suffix", drawn at each create
(https://www.pulumi.com/docs/iac/concepts/resources/names/), so each `up` after a destroy is evaluated here with a
fresh random suffix (offline.evaluate's autoname), as the engine sees it; the default mocks' stable hash could not
show it. The engine's rules are test_retained.py's (up, destroy)."""
import dataclasses
import secrets

import pytest

from infra.components.network import SUBNET_NAMES, VNET_NAME
from infra.core.config import stack as config
from infra.preview import offline
from tests.infra.components.test_retained import SUB, EngineError, destroy, up
from tests.infra.conftest import NOW


def random_autoname(logical: str) -> str:
    """azure-native's autoname: the logical name and random characters, new at every create."""
    return f"{logical}{secrets.token_hex(4)}"


def created(auto_named: bool, adopt: bool):
    """The vision stack (retainOutputs) in subscription SUB as one `up` creates it: a new random suffix each time."""
    cfg = dataclasses.replace(config.from_stack_file("vision"), subscription_id=SUB, adopt_retained=adopt,
                              network_auto_named=auto_named)
    return offline.evaluate(cfg, now=NOW, autoname=random_autoname)


def subnet_rules(resources) -> list[str]:
    account = next(r for r in resources if r.type == "azure-native:storage:StorageAccount")
    return [rule["virtualNetworkResourceId"] for rule in account.inputs["networkRuleSet"]["virtualNetworkRules"]]


@pytest.fixture(scope="module")
def fixed():
    return created(False, False), created(False, True)


def test_up_destroy_up_adopts_the_retained_account_with_the_subnets_it_names(fixed):
    first, adopting = fixed
    azure: dict = {}
    state = destroy(up({}, first.resources, azure), first.resources, azure)
    # The new up draws other suffixes for the unnamed resources, but the VNet and subnets keep their names...
    assert subnet_rules(adopting.resources) == subnet_rules(first.resources)
    assert all(f"/virtualNetworks/{VNET_NAME}/subnets/{name}" in " ".join(subnet_rules(first.resources))
               for name in SUBNET_NAMES.values())
    # ...so the retained account is adopted with the inputs it was created with.
    assert up(state, adopting.resources, azure)


def test_auto_named_subnets_would_have_failed_the_adoption():
    """networkAutoNamed (a stack deployed before the names were fixed): the old behaviour, which the engine refuses."""
    first, adopting = created(True, False), created(True, True)
    azure: dict = {}
    state = destroy(up({}, first.resources, azure), first.resources, azure)
    assert subnet_rules(adopting.resources) != subnet_rules(first.resources)
    with pytest.raises(EngineError, match="inputs to import do not match"):
        up(state, adopting.resources, azure)


def test_the_plan_shows_the_named_vnet_and_subnets(fixed):
    first, _ = fixed
    vnet = first.one("azure-native:network:VirtualNetwork")
    assert vnet.inputs["virtualNetworkName"] == VNET_NAME and vnet.state["name"] == VNET_NAME
    names = {r.inputs["subnetName"] for r in first.of_type("azure-native:network:Subnet")}
    assert names == set(SUBNET_NAMES.values())
    from infra.cli import plan

    shown, _ = plan.render(first)
    assert f"virtualNetworkName={VNET_NAME}" in shown
    assert all(f"subnetName={name}" in shown for name in SUBNET_NAMES.values())
