"""Fixtures the backend tests share."""
import pytest

from tests.infra.backends.batch.fake_batch import FakeBatch


@pytest.fixture
def batch():
    """The real `AzureBatch` client at a local Batch endpoint, stopped (and its certificate folder removed) after."""
    service = FakeBatch()
    yield service
    service.close()
