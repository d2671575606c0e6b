"""gpuSku's refusal of an unknown size offers only sizes a stack can still deploy: a retired one would be refused
in turn (issue 60)."""
from infra.core import skus


def test_an_unknown_size_is_offered_only_sizes_that_are_not_retired():
    retired = [name for name, sku in skus.CATALOG.items() if sku.retired]
    assert retired  # NCv3, retired on 2025-09-30
    line = skus.unknown_size("Standard_NC24rs_v4")
    assert not any(name in line for name in retired), line
    assert "Standard_ND96asr_v4" in line.split("known sizes: ")[1]
    assert skus.unknown_size("Standard_ND96asr_v5").startswith(
        "unknown size 'Standard_ND96asr_v5'; did you mean Standard_ND96asr_v4")
