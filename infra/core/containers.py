"""The storage account's containers, who may do what in them, and what `pulumi up` puts in `scripts` (pure).

`data` holds the dataset as uploaded, `scripts` the training runtime the jobs and the NFS server run, `outputs`
what jobs write back, `status` what machines report to the deployer.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from infra import REPO_ROOT

# The storage layout that the Batch pool's nodes, the NFS server and the deployer share: the runtime sits under
# SCRIPTS_PREFIX in `scripts`; the `data` container is staged into <share>/DATASET, marked done by STAGED_MARKER
# in that folder and reported as the blob STAGED_BLOB in `status` (training/data/staged.py writes both).
SCRIPTS_PREFIX = "training/"
DATASET = "imagenet"
STAGED_MARKER = ".staged"
STAGED_BLOB = DATASET + STAGED_MARKER

# Container -> SAS permissions (least privilege): readers list and read, the job output only creates and
# writes (it can neither read back nor delete what other runs wrote).
SAS_PERMISSIONS: dict[str, str] = {"data": "rl", "scripts": "rl", "outputs": "cw"}
# `status`: what machines report to the deployer (the NFS server: "the data is staged"). No SAS: the NFS server
# writes it with its identity, deployers read it with Azure AD.
STATUS = "status"
CONTAINERS = (*SAS_PERMISSIONS, STATUS)
RUNTIME_PACKAGE = REPO_ROOT / "training"  # what runs on the cluster; devtools/ stays on developers' machines


def runtime_files(package: Path = RUNTIME_PACKAGE) -> dict[str, Path]:
    """Blob name in `scripts` -> file: the whole runtime package, subpackages included, its Python files only
    (requirements files go into the images, caches nowhere). Batch keeps the folders below the blob prefix
    (storageContainerUrl + blobPrefix), and so does the NFS server's download."""
    return {SCRIPTS_PREFIX + path.relative_to(package).as_posix(): path
            for path in sorted(package.rglob("*.py")) if "__pycache__" not in path.parts}


def sas_expiry(now: datetime, hours: int) -> str:
    """SAS expiry as Azure wants it; rounded down to the hour so re-runs within the hour give the same token."""
    return (now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")

# Backend azureml: the containers the job reads and writes, as Azure ML datastores (by identity, no secret).
# Jobs name them azureml://datastores/<name>/paths/...
AML_DATASTORES = {"data": "trainingdata", "outputs": "trainingoutputs"}
