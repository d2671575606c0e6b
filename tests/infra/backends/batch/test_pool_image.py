"""preflight's pool-image check at the wire (the real ARM pipeline against tests/infra/backends/arm_endpoint.py,
answering Virtual Machine Images - Get and Marketplace Agreements - Get as the specs' examples do): the pinned HPC
image version must be offered in the region (a 404 fails with the command that lists the versions), a deprecation
warns, and in user-subscription mode an image sold with a Marketplace plan needs its terms accepted in the
subscription (the `az vm image terms accept` command); batch-service mode never asks about terms."""
import pytest

from infra.backends import preflight
from infra.backends.batch.cluster import HPC_IMAGE_VERSION
from infra.core.preflight import subscription as verdicts
from infra.core.preflight.check import FAIL, OK, WARN
from infra.preview import offline
from tests.infra.backends.arm_endpoint import SUBSCRIPTION, ArmEndpoint, vm_image
from tests.infra.backends.batch.test_user_subscription import user_subscription
from tests.infra.backends.cost_endpoint import Token
from tests.infra.conftest import NOW, evaluation_for

PLAN = {"publisher": "microsoft-dsvm", "name": "2404", "product": "ubuntu-hpc"}  # were the image sold with a plan


def needs(ev) -> verdicts.Needs:
    return verdicts.needs(ev.config, [(r.type, r.inputs) for r in ev.resources], SUBSCRIPTION, offline.SUBSCRIPTION)


@pytest.fixture(scope="module")
def batch_service():
    return needs(evaluation_for("dev"))


@pytest.fixture(scope="module")
def user_sub():
    return needs(offline.evaluate(user_subscription(), now=NOW))


def image_check(needs_: verdicts.Needs, endpoint: ArmEndpoint) -> verdicts.Check:
    client = preflight.Arm(Token(), base_url=endpoint.url, connection_verify=endpoint.ca_file, retry_total=0)
    try:
        return {c.name: c for c in preflight.run(needs_, SUBSCRIPTION, client, None)}["pool image"]
    finally:
        client.close()


def calls(endpoint: ArmEndpoint, part: str) -> list[tuple[str, str]]:
    return [(p, v) for _, p, v, _ in endpoint.requests if part in p]


def test_the_pinned_version_must_be_offered_in_the_region(batch_service, arm):
    urn = f"microsoft-dsvm:ubuntu-hpc:2404:{HPC_IMAGE_VERSION}"
    assert dict(batch_service.pool_image) == {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2404",
                                              "version": HPC_IMAGE_VERSION}
    check = image_check(batch_service, arm)
    assert check.verdict == OK and check.text == f"{urn} is offered in westeurope", check
    assert calls(arm, "/artifacttypes/vmimage/") == [(
        f"/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Compute/locations/westeurope/publishers/microsoft-dsvm/"
        f"artifacttypes/vmimage/offers/ubuntu-hpc/skus/2404/versions/{HPC_IMAGE_VERSION}", "2024-07-01")]
    arm.vm_image = None  # the version left the marketplace
    check = image_check(batch_service, arm)
    assert check.verdict == FAIL and f"{urn} is not offered in westeurope" in check.text
    assert "az vm image list --location westeurope --publisher microsoft-dsvm --offer ubuntu-hpc --sku 2404 --all" \
        in check.text and "\n" not in check.text


def test_a_deprecation_warns_and_batch_service_mode_asks_nothing_of_terms(batch_service, arm):
    arm.vm_image = vm_image(PLAN, state="ScheduledForDeprecation", scheduled="2027-01-13T00:00:00+00:00")
    check = image_check(batch_service, arm)
    assert check.verdict == WARN and "ScheduledForDeprecation from 2027-01-13T00:00:00+00:00" in check.text
    assert calls(arm, "MarketplaceOrdering") == []  # the VMs are Batch's: no terms in this subscription


def test_user_subscription_mode_needs_the_plans_terms_accepted(user_sub, arm):
    check = image_check(user_sub, arm)  # the default image: no plan
    assert check.verdict == OK and "no Marketplace plan, so no terms to accept" in check.text
    assert calls(arm, "MarketplaceOrdering") == []
    arm.vm_image = vm_image(PLAN)
    check = image_check(user_sub, arm)
    assert check.verdict == FAIL and "has not accepted" in check.text and "marketplace purchase eligibility" in check.text
    assert "`az vm image terms accept --publisher microsoft-dsvm --offer ubuntu-hpc --plan 2404`" in check.text
    assert calls(arm, "MarketplaceOrdering") == [(
        f"/subscriptions/{SUBSCRIPTION}/providers/Microsoft.MarketplaceOrdering/offerTypes/virtualmachine/publishers/"
        "microsoft-dsvm/offers/ubuntu-hpc/plans/2404/agreements/current", "2021-01-01")]
    arm.terms_accepted = True
    check = image_check(user_sub, arm)
    assert check.verdict == OK and "Marketplace plan microsoft-dsvm:ubuntu-hpc:2404's terms are accepted" in check.text


def test_an_azureml_stack_has_no_pool_image():
    assert not needs(evaluation_for("nlp")).pool_image
