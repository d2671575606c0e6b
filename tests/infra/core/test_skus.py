"""The GPU size catalog (infra/core/skus.py): rows consistent with each other and with what plan refuses."""
import pytest

from infra.core import skus
from infra.core.config.schema import ConfigError
from tests.infra.core.config.test_stack import BASE, parse

LIVE = [s for s in skus.CATALOG.values() if not s.retired]


@pytest.mark.parametrize("sku", skus.CATALOG.values(), ids=lambda s: s.name)
def test_every_row_names_its_quota_family_and_a_price(sku):
    assert sku.quota_family.lower().startswith("standard") and sku.quota_family.lower().endswith("family")
    assert sku.price_per_hour > 0 and sku.vcpus > 0 and sku.gpus >= 1


@pytest.mark.parametrize("sku", [s for s in LIVE if s.infiniband], ids=lambda s: s.name)
def test_every_infiniband_size_is_an_8_gpu_node_with_its_topology_file(sku):
    assert sku.gpus == 8 and sku.nccl_topo_file.startswith("/opt/microsoft/") and "r" in sku.name.split("_")[1]


@pytest.mark.parametrize("sku", [s for s in skus.CATALOG.values() if s.retired], ids=lambda s: s.name)
def test_a_retired_size_is_refused_naming_a_live_successor(sku):
    successor = skus.CATALOG[sku.successor]
    assert not successor.retired and successor.infiniband >= sku.infiniband
    with pytest.raises(ConfigError) as raised:
        parse("x", {**BASE, "gpuSku": sku.name, "maxNodes": 1})
    assert str(raised.value) == f"config key 'gpuSku': {sku.name} was retired on {sku.retired_on}; use {sku.successor}"


def test_the_2026_sizes_are_in_the_catalog():
    h200 = skus.CATALOG["Standard_ND96isr_H200_v5"]
    assert (h200.gpus, h200.gpu_model, h200.infiniband, h200.vcpus, h200.quota_family) == (
        8, "H200 141GB", True, 96, "standardNDISRH200V5Family")
    nc40, nc80 = skus.CATALOG["Standard_NC40ads_H100_v5"], skus.CATALOG["Standard_NC80adis_H100_v5"]
    assert (nc40.gpus, nc80.gpus, nc40.quota_family, nc80.quota_family) == (
        1, 2, "StandardNCadsH100v5Family", "StandardNCadsH100v5Family")
    assert not nc40.infiniband and not nc80.infiniband
    # Prices nobody checked here are said to be rough (plan prints it beside the node price).
    assert not h200.price_checked and not nc80.price_checked and nc40.price_checked


def test_an_estimated_price_says_it_is_one_and_how_it_was_made():
    """ND H200 v5 has no published East US price seen here: plan prints the estimate's basis and where to ask."""
    note = skus.price_note(skus.CATALOG["Standard_ND96isr_H200_v5"])
    assert note.startswith(" (an estimate, ND H100 v5's price x 1.12: no published East US pay-as-you-go price")
    assert "armSkuName eq 'Standard_ND96isr_H200_v5'" in note
    h100 = skus.CATALOG["Standard_ND96isr_H100_v5"]
    assert skus.CATALOG["Standard_ND96isr_H200_v5"].price_per_hour == pytest.approx(h100.price_per_hour * 1.12, 0.01)
    assert "twice NC40ads H100 v5's price" in skus.price_note(skus.CATALOG["Standard_NC80adis_H100_v5"])
    assert [s.name for s in skus.CATALOG.values() if not s.price_checked and not s.price_basis] == []
    assert skus.price_note(h100) == ""


def test_a_multi_node_h200_stack_passes_and_a_multi_node_nc_h100_one_is_refused():
    cfg = parse("x", {**BASE, "gpuSku": "Standard_ND96isr_H200_v5", "maxNodes": 2})
    assert cfg.nodes.sku.name == "Standard_ND96isr_H200_v5"
    with pytest.raises(ConfigError, match="no InfiniBand"):
        parse("x", {**BASE, "gpuSku": "Standard_NC80adis_H100_v5", "maxNodes": 2})
    assert "Standard_ND96isr_H200_v5" in skus.CATALOG
