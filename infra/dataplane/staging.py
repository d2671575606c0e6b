"""Has the NFS server finished staging the data? Asked before a job is submitted, so that no GPU node is held
while the data is still arriving.

The server's staging unit (infra/core/nfs_user_data.py) writes `batch_spec.STAGED_BLOB` into the `status` container with its
own identity once the whole `data` container is on NFS; deployers read it with Azure AD. `staged` is the one
seam: the TrainingJob provider and `infra submit` take it as a callable, the tests hand them their own.
"""
from __future__ import annotations

from infra.core.batch_spec import STAGED_BLOB


def staged(status_container_url: str) -> bool:
    """Whether the NFS server has reported the data staged (Azure AD, or a SAS in the URL)."""
    from training.data import transfer

    target = transfer.ContainerTarget.parse(status_container_url, "status container")
    return target.client(workers=1).get_blob_client(STAGED_BLOB).exists()


def not_staged_message(then: str) -> str:
    return (f"the NFS server has not finished staging the data yet (no {STAGED_BLOB} in the `status` container), "
            "so no job was submitted and no GPU node waits for it: follow the staging on the server "
            f"(`journalctl -u dltrain-stage`), then {then}")
