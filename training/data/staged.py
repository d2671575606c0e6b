"""What "staged" means, for `python -m training stage --mark` (the NFS server's staging unit, a job that stages
its own data) and for the deployer's gate (infra/backends/staging.py).

A dataset is staged when DEST holds the container as it was listed, and the container was not empty. The
listing is summed up as a fingerprint (every blob's name, size and ETag, in the service's listing order, which
is by name: https://learn.microsoft.com/rest/api/storageservices/list-blobs#remarks; an ETag changes with
every write of the blob: https://learn.microsoft.com/rest/api/storageservices/get-blob-properties#response-headers).
DEST/.staged records the fingerprint that was staged; a later run lists the container again and stages only
when the fingerprint differs (new, rewritten or deleted blobs), so a dataset uploaded after the stack exists
is picked up by the next run, and an unchanged one costs one listing. An empty container is never staged:
the run reports "waiting for data" and exits with EXIT_NO_DATA.

With a report container (the stack's `status`), every run also writes the report blob `<dataset>.staged` (JSON:
state, files, bytes, fingerprint, time, host) and honours a restage request: the blob `<dataset>.restage`,
written by `python -m infra restage`, makes the next run stage again whatever the fingerprint says. The
deployer compares the report's fingerprint with the container's current listing, so a job is never submitted
onto a copy older than the container.

Deletions: a blob deleted from the container changes the fingerprint, and the staging that follows deletes its
file from the datasets' folders of DEST (train/, val/, datasets/: training/data/stage.py prune), so a dataset
replaced or removed in the container is replaced or removed here; anything else in DEST stays.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from training.data.blob_reader import BlobItem, BlobReader

MARKER = ".staged"  # in DEST: what was staged (JSON), and the file jobs wait for
EXIT_NO_DATA = 4  # the container is empty: nothing staged, "waiting for data" (the unit counts it a success)
WAITING, STAGING, STAGED = "waiting for data", "staging", "staged"


def report_name(dataset: str) -> str:
    """The report blob in the status container (infra/backends/batch/spec.py: STAGED_BLOB)."""
    return f"{dataset}{MARKER}"


def request_name(dataset: str) -> str:
    """The blob `python -m infra restage` writes to ask the server to stage again."""
    return f"{dataset}.restage"


@dataclass(frozen=True)
class Listing:
    files: int
    bytes: int
    fingerprint: str  # sha256 over name, size and ETag of every blob, in listing order

    @staticmethod
    def of(blobs: Iterable[BlobItem]) -> "Listing":
        digest, files, size = hashlib.sha256(), 0, 0
        for blob in blobs:
            digest.update(f"{blob.name}\0{blob.size}\0{blob.etag}\n".encode())
            files, size = files + 1, size + blob.size
        return Listing(files, size, digest.hexdigest() if files else "")


def list_container(reader: BlobReader, prefix: str = "", retry: Callable = lambda op, f: f()) -> Listing:
    """The container's listing under `prefix` (folder placeholders, names ending in "/", left out as the
    stager leaves them out), a page at a time: memory stays flat."""
    def blobs():
        marker = None
        while marker != "":
            page, marker = retry("listing the container", lambda: reader.list_page(prefix, marker or ""))
            yield from (blob for blob in page if not blob.name.endswith("/"))
    return Listing.of(blobs())


@dataclass(frozen=True)
class Report:
    """The state of a dataset, as the marker in DEST and the report blob hold it."""

    state: str  # WAITING | STAGING | STAGED
    files: int = 0
    bytes: int = 0
    fingerprint: str = ""
    at: str = ""  # when this state was reached (UTC, ISO 8601)
    checked_at: str = ""  # when the container was last listed
    host: str = ""
    detail: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True) + "\n"

    @staticmethod
    def from_json(text: str) -> "Report | None":
        """None for anything that is not a report of this shape (an older server's plain-text line too)."""
        try:
            data = json.loads(text)
            return Report(**{k: data[k] for k in Report.__dataclass_fields__ if k in data}) \
                if isinstance(data, dict) and data.get("state") in (WAITING, STAGING, STAGED) else None
        except (ValueError, TypeError):
            return None

    @property
    def ready(self) -> bool:
        return self.state == STAGED and self.files > 0

    def line(self) -> str:
        if self.state == STAGED:
            return f"staged {self.files} files ({self.bytes / 1e9:.2f} GB) at {self.at} on {self.host or '?'}"
        if self.state == STAGING:
            return f"staging {self.files} files ({self.bytes / 1e9:.2f} GB) since {self.at} on {self.host or '?'}"
        return f"waiting for data since {self.at}: {self.detail or 'the container is empty'}"


def read_marker(dest: Path) -> Report | None:
    try:
        return Report.from_json((dest / MARKER).read_text())
    except OSError:
        return None


def write_marker(dest: Path, report: Report) -> None:
    """Written whole or not at all (a job that sees the marker sees a complete record)."""
    part = dest / f"{MARKER}.part"
    part.write_text(report.to_json())
    os.replace(part, dest / MARKER)


def remove_marker(dest: Path) -> None:
    (dest / MARKER).unlink(missing_ok=True)


class StatusBlobs:
    """The report and request blobs in the status container (the SDK: a few small requests per run)."""

    def __init__(self, client, dataset: str):
        self.client, self.dataset = client, dataset

    def write(self, report: Report) -> None:
        self.client.upload_blob(report_name(self.dataset), report.to_json().encode(), overwrite=True)

    def read(self) -> Report | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return Report.from_json(self.client.download_blob(report_name(self.dataset)).readall().decode())
        except ResourceNotFoundError:
            return None

    def request(self) -> str | None:
        """The ETag of a pending restage request, or None."""
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return self.client.get_blob_client(request_name(self.dataset)).get_blob_properties().etag
        except ResourceNotFoundError:
            return None

    def ask(self, by: str) -> None:
        self.client.upload_blob(request_name(self.dataset), f"restage asked by {by} at {now_iso()}\n".encode(),
                                overwrite=True)

    def answered(self, etag: str) -> None:
        """Remove the request that was served, unless a newer one replaced it meanwhile (then it is served next)."""
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceModifiedError, ResourceNotFoundError

        try:
            self.client.delete_blob(request_name(self.dataset), etag=etag,
                                    match_condition=MatchConditions.IfNotModified)
        except (ResourceModifiedError, ResourceNotFoundError):
            pass


def now_iso(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(text: str) -> datetime | None:
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except (TypeError, ValueError):
        return None


@dataclass
class Round:
    """One run of `stage --mark`: what it found and did; `exit_code` 0 or EXIT_NO_DATA."""

    line: str
    exit_code: int = 0
    staged: bool = False  # whether it transferred (ran the stager)


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def stage_round(dest: Path, source: str, listing: Callable[[], Listing], transfer: Callable[[], str],
                status: StatusBlobs | None = None, recheck_minutes: int = 0,
                clock: Callable[[], datetime] = _utc_now) -> Round:
    """Stage DEST from the container when its listing differs from what DEST/.staged records (or a restage is
    asked); never mark an empty container. `listing()` lists the container, `transfer()` runs the stager and
    returns its summary line; `source` names the container in reports (no SAS)."""
    now = clock()
    host = socket.gethostname()
    marker = read_marker(dest)
    request = status.request() if status else None
    checked = _parse(marker.checked_at) if marker else None
    if marker and marker.ready and not request and recheck_minutes and checked and \
            now - checked < timedelta(minutes=recheck_minutes):
        return Round(f"stage: {marker.line()}; the container is listed again after "
                     f"{now_iso(checked + timedelta(minutes=recheck_minutes))}")
    found = listing()
    if found.files == 0:
        remove_marker(dest)
        report = Report(WAITING, at=(marker.at if marker and marker.state == WAITING else now_iso(now)),
                        checked_at=now_iso(now), host=host,
                        detail=f"{source} has no blobs: upload the dataset (python -m training upload DIR URL)")
        if status:
            status.write(report)
            if request:
                status.answered(request)
        return Round(f"stage: {report.line()}", EXIT_NO_DATA)
    if marker and marker.ready and marker.fingerprint == found.fingerprint and not request:
        report = Report(STAGED, found.files, found.bytes, found.fingerprint, marker.at, now_iso(now), host)
        write_marker(dest, report)
        if status:
            status.write(report)
        return Round(f"stage: unchanged since {marker.line()}")
    # Changed, new or asked for: jobs must not start on a half-new copy, so the marker goes first.
    remove_marker(dest)
    why = "restage asked" if request else ("the container changed" if marker else "first staging")
    if status:
        status.write(Report(STAGING, found.files, found.bytes, found.fingerprint, now_iso(now), now_iso(now), host,
                            detail=why))
    summary = transfer()
    report = Report(STAGED, found.files, found.bytes, found.fingerprint, now_iso(clock()), now_iso(now), host,
                    detail=summary)
    write_marker(dest, report)
    if status:
        status.write(report)
        if request:
            status.answered(request)
    return Round(f"stage: {why}: {report.line()}; marked {dest / MARKER}", staged=True)
