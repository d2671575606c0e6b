"""The Batch backend's NFS server component (infra/backends/batch/nfs.py): what it decides without declaring anything.
What it declares is in test_cluster.py, under the program's mocks."""
import pytest

from infra.backends.batch import nfs


@pytest.mark.parametrize("size,caching", [(512, "ReadOnly"), (4095, "ReadOnly"), (4096, "None")])
def test_host_caching_only_where_azure_allows_it(size, caching):
    assert nfs.data_disk_caching(size) == caching
