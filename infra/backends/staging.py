"""Is the training data ready for a job? Asked before a job is submitted (`infra submit`, the TrainingJob and
AmlTrainingJob resources of `pulumi up`), so that no GPU node is held while there is nothing to train on.

- Every backend: the `data` container must hold at least one blob (the deployer lists it with Azure AD), and its
  root, the dataset `default` when it holds anything (training/data/datasets.py), be in the layout the trainer
  reads once it is staged as it is (no backend extracts archives): class folders under `train/` (training/data/
  layout.py, the check `python -m infra upload` runs on the folder before it uploads), and `val/`, when there,
  with classes of train/, or a sharded root (shards/train-*.tar, training/data/layout.py). A named dataset's layout
  is checked as it goes up; `submit --dataset` checks it is there, and a submit without --dataset that its root
  holds one (Readiness.default: a container of named datasets alone passes the gate, but a job on `default` would
  stop on every GPU node: require_staged refuses it). With dataTier node-local (the default) nothing else is
  asked: every node stages the job's dataset from `data` itself at the job's start.
- Batch with `nfsKind: vm` and dataTier nfs: the NFS server's staging unit (infra/backends/batch/nfs_user_data.py,
  training/data/staged.py) must report the dataset staged (the blob `containers.STAGED_BLOB` in `status`, written
  with its own identity), and the fingerprint it staged must be the container's listing now: data uploaded since is
  not on NFS yet.

`data_ready(data_url, status_url)` is the one seam: the job resources and `infra submit` take it as a callable,
the tests hand them their own. `request_restage` writes the request the server's unit polls for
(`python -m infra restage`): the deployer cannot reach the server, the server reads `status`.
"""
from __future__ import annotations

import getpass
from dataclasses import dataclass

from infra.backends.batch.nfs_user_data import STAGE_RECHECK_MINUTES
from infra.core.containers import DATASET, STAGED_BLOB

# How soon the staging unit sees a change by itself (it lists `data` this often; a restage request: a minute).
RECHECK_MINUTES = STAGE_RECHECK_MINUTES


@dataclass(frozen=True)
class Readiness:
    ready: bool
    line: str  # what is staged, or why nothing can train yet
    default: bool = True  # the root holds the dataset `default` (train/ or shards/); False: named datasets alone
    named: tuple[str, ...] = ()  # the named datasets seen (datasets/NAME/), for the refusal's line


def _status(status_url: str, operation: str, use):
    """`use(StatusBlobs)` on the `status` container, retried like every transfer; a failure that outlives the
    retries is one line (training.errors.UsageError)."""
    from training.data import staged, transfer

    target = transfer.ContainerTarget.parse(status_url, "status container")
    blobs = staged.StatusBlobs(target.client(workers=1), DATASET)
    with transfer.stopping_cleanly(operation):
        target.check_reachable()  # in seconds, not six attempts' minutes, when the account cannot be reached at all
        return transfer.with_retries(operation, transfer.Stats(), lambda: use(blobs))


def listing(data_url: str, seen=None):
    """The `data` container's listing (files, bytes, fingerprint), as the staging unit computes it
    (staged.list_container: folder placeholders left out); `seen(name)` is told each blob's name on the way."""
    from training.data import staged, transfer
    from training.data.blob_reader import BlobReader

    target = transfer.ContainerTarget.parse(data_url, "data container")
    reader = BlobReader(target, 1)

    def retry(operation, attempt):
        return transfer.with_retries(operation, transfer.Stats(), attempt)

    def blobs():
        marker = None
        while marker != "":
            page, marker = retry("listing the container", lambda: reader.list_page("", marker or ""))
            for blob in page:
                if not blob.name.endswith("/"):
                    if seen:
                        seen(blob.name)
                    yield blob

    with transfer.stopping_cleanly("listing `data`"):
        target.check_reachable()
        return staged.Listing.of(blobs())


def data_ready(data_url: str, status_url: str = "") -> Readiness:
    """Whether a job may start now: `data` is not empty and, with a `status_url` (the NFS server's reports),
    the server has staged exactly what `data` holds now."""
    from training.data import datasets, layout

    found = layout.Layout()  # of the dataset `default`, the root: the named ones' were checked as they went up
    roots: set[str] = set()  # the root's top folders (train/ or shards/: a dataset `default`)
    named: set[str] = set()

    def seen(name: str) -> None:
        if name.startswith(datasets.NAMED):
            named.add(name[len(datasets.NAMED):].split("/", 1)[0])
        elif name != datasets.MANIFEST:
            found.add(name)
            roots.add(name.split("/", 1)[0])

    now = listing(data_url, seen)
    if now.files == 0:
        return Readiness(False, "the `data` container is empty: upload the dataset first (`python -m infra upload "
                                "--stack STACK DIR`)")
    problem = found.problem(images=False) if found.files else None  # the trainer checks the files themselves
    if problem:
        return Readiness(False, f"the `data` container is not a dataset the trainer reads: {problem}; "
                                f"{layout.EXPECTED} (`python -m infra upload --stack STACK DIR` checks a folder "
                                "before it uploads)")
    has = dict(default=bool(roots & {"train", datasets.SHARDS}), named=tuple(sorted(named)))
    if not status_url:
        return Readiness(True, f"`data` holds {now.files} files ({now.bytes / 1e9:.2f} GB)", **has)
    report = _status(status_url, "reading the NFS server's report in `status`", lambda blobs: blobs.read())
    if report is None:
        return Readiness(False, f"the NFS server has not reported on the data yet (no {STAGED_BLOB} in `status`: "
                                "its staging unit starts a minute after the server boots; `journalctl -u "
                                "dltrain-stage` on it)")
    if not report.ready:
        return Readiness(False, f"the NFS server reports: {report.line()}")
    if report.fingerprint != now.fingerprint:
        return Readiness(False, f"`data` changed since the NFS server staged it ({report.files} files staged, "
                                f"{now.files} now): it stages the change within {RECHECK_MINUTES} minutes")
    return Readiness(True, f"the NFS server {report.line()}", **has)


def read_report(status_url: str):
    """The NFS server's last report (training.data.staged.Report), or None."""
    return _status(status_url, "reading the NFS server's report in `status`", lambda blobs: blobs.read())


def request_restage(status_url: str) -> None:
    """Ask the NFS server to stage `data` again (its unit serves the request within a minute)."""
    _status(status_url, "writing the restage request into `status`", lambda blobs: blobs.ask(getpass.getuser()))


def restage_pending(status_url: str) -> bool:
    return _status(status_url, "reading `status`", lambda blobs: blobs.request()) is not None


def no_default_line(readiness: Readiness, stack: str) -> str:
    """Why a job on the dataset `default` cannot train on a `data` container of named datasets alone."""
    return (f"--dataset default: the `data` container's root holds no dataset (no train/ or shards/; its named "
            f"datasets: {', '.join(readiness.named) or 'none'}); submit with --dataset NAME (`python -m infra datasets "
            f"--stack {stack}` lists them), or upload one to the root (`python -m infra upload --stack {stack} DIR`)")


def not_ready_message(readiness: Readiness, then: str) -> str:
    return f"no job was submitted, so no GPU node waits: {readiness.line}; {then}"
