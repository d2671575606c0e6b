"""The Batch backend tests' own fixtures."""
import pytest

from infra.backends.batch import operate
from tests.infra.backends.arm_endpoint import ArmEndpoint


@pytest.fixture(autouse=True)
def pauses(monkeypatch):
    """What `submit` waits after ending an overdue job (operate.pause), recorded instead of slept."""
    waited: list[float] = []
    monkeypatch.setattr(operate, "pause", waited.append)
    return waited


@pytest.fixture
def arm():
    """The local ARM endpoint in westeurope with the dev stack's A100 family (96 vCPUs a node) and the NFS server's
    D-series family: preflight's management calls answered as the REST specs' examples do."""
    endpoint = ArmEndpoint("westeurope", ("Standard_ND96asr_v4", "standardNDASv4Family", 96),
                           ("Standard_D16s_v5", "standardDSv5Family", 16))
    yield endpoint
    endpoint.close()
