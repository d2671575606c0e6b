"""The Batch backend tests' own fixtures."""
import pytest

from infra.backends.batch import operate


@pytest.fixture(autouse=True)
def pauses(monkeypatch):
    """What `submit` waits after ending an overdue job (operate.pause), recorded instead of slept."""
    waited: list[float] = []
    monkeypatch.setattr(operate, "pause", waited.append)
    return waited
