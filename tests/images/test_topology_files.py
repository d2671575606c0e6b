"""Every NCCL topology file a job's environment names is where that backend's ranks can read it: on Batch the host's
/opt/microsoft (mounted into the container), on Azure ML the image's copy, which both images must carry."""
import re
from pathlib import PurePosixPath

import pytest

from infra import REPO_ROOT
from infra.core.skus import CATALOG, IMAGE_TOPOLOGY_DIR

SIZES = sorted(name for name, sku in CATALOG.items() if sku.nccl_topo_file)


def _image_copies(dockerfile: str) -> set[str]:
    """Where the Dockerfile copies images/nccl-topology/ to, as an absolute path (COPY's relative target is WORKDIR's)."""
    text = (REPO_ROOT / "images" / dockerfile).read_text()
    workdir = re.findall(r"^WORKDIR (\S+)", text, re.M)[-1]
    return {str(PurePosixPath(workdir) / target.rstrip("/"))
            for target in re.findall(r"^COPY images/nccl-topology/ (\S+)", text, re.M)}


def test_every_infiniband_size_names_a_topology_file():
    assert SIZES and all(CATALOG[name].infiniband for name in SIZES)


@pytest.mark.parametrize("size", SIZES)
def test_the_images_carry_each_sizes_topology_file_where_azure_ml_jobs_read_it(size):
    name = PurePosixPath(CATALOG[size].nccl_topo_file).name
    assert (REPO_ROOT / "images" / "nccl-topology" / name).is_file()
    for dockerfile in ("pytorch.Dockerfile", "tensorflow.Dockerfile"):
        assert _image_copies(dockerfile) == {IMAGE_TOPOLOGY_DIR}, dockerfile
    assert "!images/nccl-topology/" in (REPO_ROOT / ".dockerignore").read_text().splitlines()
