"""`python -m training node-stage DATA_CONTAINER_URL --dataset NAME --dest DIR [--threads N]`: put one dataset of
the `data` container onto this node's local volume, once per node and dataset version (issue 56, docs/data.md
"Staging on the nodes").

The interface (what the pool's start task, the job's coordination command and Azure ML's command run, per node):

  python -m training node-stage https://ACCOUNT.blob.core.windows.net/data --dataset NAME \\
      --dest "$AZ_BATCH_NODE_SHARED_DIR/local-data"

  DATA_CONTAINER_URL  the `data` container. Without a SAS (on Azure) the node's managed identity signs in through
                      Azure AD: AZURE_CLIENT_ID=<client ID of the pool's user-assigned identity> picks it
                      (DefaultAzureCredential reads it: azure-identity 1.27 `_credentials/default.py`,
                      managed_identity_client_id "Defaults to the value of the environment variable AZURE_CLIENT_ID";
                      learn.microsoft.com/dotnet/api/azure.identity.defaultazurecredentialoptions
                      .managedidentityclientid says the same); it needs Storage Blob Data Reader on `data`.
                      With a SAS it needs read+list (sp=rl); `env:VAR` reads the URL from $VAR so a SAS never
                      shows in `ps`. A SAS is never printed.
  --dataset NAME      `default` (the container's root) or a name (datasets/NAME/ in the container).
  --dest DIR          the node's local volume (infra/backends/batch/local_volume.sh makes it).
  --threads N         parallel downloads (default 16: shards are ~128 MB, so 16 in flight keep a node's network
                      busy while memory stays at one read buffer per thread).

  Result: DIR/datasets/NAME (DIR/datasets/default for `default`) holds the dataset as the trainer reads it
  (`--data DIR/datasets/NAME`): dataset.json + shards/ for a sharded dataset, train/ val/ + dataset.json for a
  per-file one. DIR/datasets/NAME/.staged holds the manifest's content hash, written last: a node whose marker holds
  the dataset's hash prints "DIR/datasets/NAME holds NAME (HASH): copy skipped" and copies nothing.
  Exit status: 0 staged or already there (one line on stdout; progress lines on stderr every 10 s on long copies);
  2 with one line "error: ..." on stderr for anything it cannot mend: no such dataset, a shard still unlike its
  manifest MD5 after 3 downloads, not enough space, storage refusing access, retries exhausted. Two runs on one
  DIR/datasets/NAME wait for each other (a lock file), so a start task and a job task never write it together.

How: the manifest (dataset.json, read with blob_reader's GETs) lists every shard with its size and MD5
(training/data/shards.py, /tmp/team contract). Each tar and its DALI .idx is streamed straight into
shards/FILE.part and renamed once whole; a tar whose MD5 differs from the manifest's is fetched again, up to
SHARD_TRIES downloads (training/data/stage.py does not retry a mismatch, as TLS checks the bytes in transit; a
shard is fetched again here because at 100+ GB per node a bad write on the node or a blob replaced mid-copy by a
new upload is worth a second read, and the third failure names the shard). An .idx is checked against its blob's
Content-MD5 when it has one. Files present with the manifest's size and MD5 (an interrupted run) are kept. Files of
an older version that the manifest no longer lists are deleted; each split's index is written once as flat arrays
(shard_samples.FLAT_DIR, keyed by the content hash) for the node's ranks to load in one read; then dataset.json and
last .staged are written.
A per-file dataset (`"format": "files"`, or no format) is copied by the existing stager (training/data/stage.py)
into the same folder, and marked the same way. Transient errors are retried as every transfer here retries them
(training/data/transfer.py: backoff, 6 attempts); permanent ones (403, 404, full disk) stop at once in one line.
"""
from __future__ import annotations

import argparse
import base64
import binascii
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from training.data import datasets, shards, stage, transfer
from training.data.blob_reader import BlobHttpError, BlobItem, BlobReader
from training.data.shard_samples import ShardSamples
from training.errors import UsageError

STAGED = ".staged"  # DIR/datasets/NAME/.staged: the content hash of the dataset staged there, written last
LOCK = ".node-stage.lock"
SHARD_TRIES = 3  # downloads of one file whose MD5 differs from the manifest's, before the run stops
DEFAULT_THREADS = 16
PROGRESS_INTERVAL_S = 10.0
VERB = "node-stage"


@dataclass(frozen=True)
class Item:
    """One file of a sharded dataset to fetch: its name relative to the dataset's prefix, size and MD5 (hex;
    "" for an .idx, checked against its blob's Content-MD5 when it has one)."""
    name: str
    size: int  # -1: not in the manifest
    md5: str


def dataset_folder(dest: Path, name: str) -> Path:
    """Where node-stage puts dataset NAME under DEST: DEST/datasets/NAME, `default` included (so one local volume
    holds several datasets side by side, each with its own marker)."""
    return dest / datasets.NAMED / datasets.check_name(name)


def marker_hash(folder: Path) -> str:
    """The content hash in FOLDER/.staged, or "" when there is none."""
    try:
        return (folder / STAGED).read_text().strip()
    except OSError:
        return ""


def sharded_dataset(manifest: dict, source: str) -> shards.ShardedDataset:
    """A sharded dataset.json read by training/data/shards.py, which also checks the content hash against the
    shards it lists. A manifest that is not a whole sharded one stops in one line naming it."""
    try:
        return shards.from_manifest(manifest, source)
    except UsageError as err:
        raise transfer.PermanentError(str(err)) from None


def shard_items(dataset: shards.ShardedDataset, source: str) -> list[Item]:
    """Every tar (with the manifest's MD5 and size) and its .idx, in manifest order; a shard name that would land
    outside the dataset's folder stops in one line naming `source`."""
    items: list[Item] = []
    for split in shards.SPLITS:
        for shard in dataset.shards.get(split, ()):
            for relative in (shard.name, shard.index):
                if relative.startswith("/") or ".." in relative.split("/"):
                    raise transfer.PermanentError(f"{source}: shard name {relative!r} would be written outside the "
                                                  "dataset")
            items += [Item(shard.name, shard.bytes, shard.md5.lower()), Item(shard.index, -1, "")]
    return items


class Tally:
    """Files and bytes done out of the total, for the progress line (transfer.Progress calls `line`)."""

    def __init__(self, files: int, total_bytes: int):
        self.files, self.total_bytes = files, total_bytes
        self.done = self.fetched_bytes = self.kept = self.refetched = 0
        self.started = time.monotonic()
        self.lock = threading.Lock()

    def add(self, *, fetched_bytes: int = 0, kept: int = 0, refetched: int = 0, done: int = 0) -> None:
        with self.lock:
            self.fetched_bytes += fetched_bytes
            self.kept += kept
            self.refetched += refetched
            self.done += done

    def line(self, verb: str) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-6)
        return (f"{verb}: {self.done}/{self.files} files, {self.fetched_bytes / 1e9:.2f}/{self.total_bytes / 1e9:.2f} "
                f"GB fetched, {self.fetched_bytes / 1e9 / elapsed:.2f} GB/s, {self.kept} kept, {self.refetched} "
                f"fetched again, {elapsed:.0f} s")


# What to do about a blob unlike its manifest. An upload of a new version writes its shards over the old ones under
# the same names and its manifest last (training/data/sharding.py), so a node that stages meanwhile reads the old
# manifest beside new shards: the staging stops (no marker), and the next run finds the new manifest.
AGAIN = ("if an upload of this dataset is under way (it replaces the shards in place, its manifest last), run "
         "node-stage again once it has finished; else upload the dataset again (`python -m infra upload --format "
         "shards` or `python -m infra shard`)")


class BadShard(transfer.PermanentError):
    """A file still unlike its manifest MD5 (or its blob's Content-MD5) after SHARD_TRIES downloads."""


class ShardFetcher:
    """Fetches one Item into FOLDER (run on transfer.run_bounded's threads)."""

    def __init__(self, reader: BlobReader, prefix: str, folder: Path, stats: transfer.Stats, tally: Tally):
        self.reader, self.prefix, self.folder, self.stats, self.tally = reader, prefix, folder, stats, tally

    def __call__(self, item: Item) -> None:
        target = self.folder / item.name
        if item.md5 and target.is_file() and target.stat().st_size == item.size and shards.md5_file(target) == item.md5:
            self.tally.add(kept=1, done=1)  # whole from an interrupted run: renamed only once its MD5 matched
            return
        blob = self.prefix + item.name
        for tries in range(1, SHARD_TRIES + 1):
            got, size, stored = transfer.with_retries(f"download of {blob}", self.stats,
                                                      lambda: self._download(blob, target))
            expected = item.md5 or stored
            part = target.with_name(target.name + ".part")
            if (not expected or got == expected) and (item.size < 0 or size == item.size):
                os.replace(part, target)
                self.tally.add(fetched_bytes=size, done=1)
                return
            part.unlink(missing_ok=True)
            whose = "the manifest's" if item.md5 else "its Content-MD5"
            if tries < SHARD_TRIES:
                self.tally.add(refetched=1)
                print(f"{VERB}: {item.name}: {size} bytes with MD5 {got}, unlike {whose} {expected} "
                      f"({item.size if item.size >= 0 else '?'} bytes): fetching it again ({tries + 1} of "
                      f"{SHARD_TRIES})", file=sys.stderr, flush=True)
                continue
            raise BadShard(f"{blob}: MD5 {got} after {SHARD_TRIES} downloads, but {whose} is {expected}: the blob "
                           f"differs from the dataset's manifest; {AGAIN}")

    def _download(self, blob: str, target: Path) -> tuple[str, int, str]:
        """Stream `blob` into TARGET.part: (MD5 hex, bytes, the blob's Content-MD5 in hex or "")."""
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")
        digest, size = hashlib.md5(), 0
        response = self.reader.open(blob)
        try:
            stored = response.headers.get("Content-MD5", "")
            with open(part, "wb") as out:
                while chunk := response.read(transfer.READ_SIZE):
                    out.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
        except BaseException as err:
            part.unlink(missing_ok=True)
            if isinstance(err, OSError) and err.filename is None:
                err.filename = str(part)  # a full disk names the file (transfer.classify makes it permanent)
            raise
        finally:
            response.release_conn()
        return digest.hexdigest(), size, _b64_to_hex(stored)


def _b64_to_hex(value: str) -> str:
    try:
        return base64.b64decode(value).hex() if value else ""
    except (binascii.Error, ValueError):
        return ""


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One node-stage at a time per dataset folder (flock: released by the kernel if the process dies)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write_atomic(path: Path, data: bytes) -> None:
    part = path.with_name(path.name + ".part")
    with open(part, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(part, path)


def _read_manifest(reader: BlobReader, name: str, stats: transfer.Stats) -> bytes | None:
    """dataset.json's bytes, or None when the dataset has none."""
    blob = datasets.prefix(name) + datasets.MANIFEST
    chunks: list[bytes] = []

    def attempt() -> bytes | None:
        chunks.clear()
        try:
            reader.copy(blob, chunks.append)
        except BlobHttpError as err:
            if err.status_code == 404 and err.error_code == "BlobNotFound":
                return None
            raise
        return b"".join(chunks)

    return transfer.with_retries(f"reading {blob}", stats, attempt)


def _split_blobs(reader: BlobReader, name: str, stats: transfer.Stats) -> Iterator[BlobItem]:
    """The per-file dataset's images: its train/ and val/ blobs (never the root's other datasets)."""
    start = datasets.prefix(name)
    for split in datasets.SPLITS:
        marker = None
        while marker != "":
            page, marker = transfer.with_retries("listing the container", stats,
                                                 lambda: reader.list_page(f"{start}{split}/", marker or ""))
            yield from (blob for blob in page if not blob.name.endswith("/"))


def _prune(folder: Path, keep: set[str]) -> int:
    """Delete FOLDER's files that the dataset no longer has (an older version's shards, leftovers of a run that
    died, the other format's folders); the marker, lock and manifest stay. How many went."""
    gone = 0
    for path in sorted(folder.rglob("*"), reverse=True):  # files before their folders
        relative = path.relative_to(folder).as_posix()
        if path.is_file() and relative not in keep and relative not in (STAGED, LOCK, datasets.MANIFEST):
            path.unlink()
            gone += 1
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    return gone


def _check_space(folder: Path, items: list[Item]) -> None:
    """Stop before a byte moves when the volume cannot hold what is still missing (the .idx files are small)."""
    missing = sum(item.size for item in items if item.size > 0 and not (
        (folder / item.name).is_file() and (folder / item.name).stat().st_size == item.size))
    free = shutil.disk_usage(folder).free
    if missing > free:
        raise transfer.PermanentError(f"--dest {folder.parent.parent}: {_size(free)} free, the dataset needs "
                                      f"{_size(missing)} more: give a larger volume (local_volume.sh stripes the "
                                      "node's NVMe drives) or remove other datasets under DEST/datasets/")


def _size(count: int) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


@dataclass(frozen=True)
class Result:
    folder: Path
    line: str


def node_stage(target: transfer.ContainerTarget, name: str, dest: Path, threads: int = DEFAULT_THREADS,
               credential=None, progress_interval: float = PROGRESS_INTERVAL_S) -> Result:
    """Stage dataset NAME of the container TARGET into DEST/datasets/NAME (the module docstring says how)."""
    folder = dataset_folder(dest, name)
    stats = transfer.Stats()
    reader = BlobReader(target, threads, credential)  # outside: its one-line sign-in errors are UsageErrors
    with transfer.stopping_cleanly(VERB, target), _locked(folder):
        target.check_reachable()
        raw = _read_manifest(reader, name, stats)
        source = f"{target.account_url}/{target.container}/{datasets.prefix(name)}{datasets.MANIFEST}"
        manifest = _parse_manifest(raw, source) if raw is not None else {}
        content_hash = str(manifest.get("content_hash", ""))
        if content_hash and marker_hash(folder) == content_hash:
            return Result(folder, f"{folder} holds {name} ({content_hash}): copy skipped")
        (folder / STAGED).unlink(missing_ok=True)  # from here until the end the folder is not a whole dataset
        if manifest.get("format") == "shards":
            dataset = sharded_dataset(manifest, source)
            line = _stage_shards(reader, name, folder, shard_items(dataset, source), stats, threads, progress_interval)
            _check_indexes(folder, dataset, datasets.prefix(name))
            for split, split_shards in dataset.shards.items():  # the node's ranks load each split's in one read
                if split_shards:
                    ShardSamples(folder, split, dataset).write_flat(dataset.content_hash)
        elif raw is not None or _has_images(reader, name, stats):
            line = _stage_files(reader, name, folder, stats, threads, progress_interval)
        else:
            start = datasets.prefix(name)
            raise transfer.PermanentError(f"--dataset {name}: {target.display} holds no dataset {name} (no "
                                          f"{start}{datasets.MANIFEST}, no {start}train/): upload it first (`python "
                                          "-m infra upload --dataset NAME DIR`); `python -m infra datasets` lists "
                                          "what the container holds")
        if raw is not None:
            _write_atomic(folder / datasets.MANIFEST, raw)
        if not content_hash:
            return Result(folder, f"{line}; no content hash in the manifest, so no marker: the next run copies "
                                  "what changed")
        os.sync()  # the data on disk before the marker says it is: a node that loses power re-stages
        _write_atomic(folder / STAGED, f"{content_hash}\n".encode())
        return Result(folder, f"{line}; marked {content_hash}")


def _parse_manifest(raw: bytes, source: str) -> dict:
    try:
        manifest = json.loads(raw)
    except ValueError:
        manifest = None
    if not isinstance(manifest, dict):
        raise transfer.PermanentError(f"{source}: not a JSON object; upload the dataset again")
    return manifest


def _has_images(reader: BlobReader, name: str, stats: transfer.Stats) -> bool:
    page, _ = transfer.with_retries("listing the container", stats,
                                    lambda: reader.list_page(f"{datasets.prefix(name)}train/", ""))
    return bool(page)


def _stage_shards(reader: BlobReader, name: str, folder: Path, items: list[Item], stats: transfer.Stats,
                  threads: int, progress_interval: float) -> str:
    _check_space(folder, items)
    tally = Tally(len(items), sum(max(item.size, 0) for item in items))
    fetch = ShardFetcher(reader, datasets.prefix(name), folder, stats, tally)
    with transfer.Progress(VERB, tally, interval=progress_interval):
        transfer.run_bounded(items, fetch, threads)
    _prune(folder, {item.name for item in items})
    elapsed = max(time.monotonic() - tally.started, 1e-6)
    tars = sum(1 for item in items if item.md5)
    return (f"{folder} holds {name}: {tars} shards, {tally.fetched_bytes / 1e9:.2f} GB fetched in {elapsed:.1f} s "
            f"({tally.fetched_bytes / 1e9 / elapsed:.2f} GB/s), {tally.kept} files kept, {tally.refetched} fetched "
            f"again, {stats.retried} retried")


def _check_indexes(folder: Path, dataset: shards.ShardedDataset, prefix: str) -> None:
    """Each staged .idx must index its tar, which matched its manifest MD5: the manifest lists no MD5 for an .idx,
    and an .idx fetched while an upload replaced its shard may be the new version's beside the old tar, which the
    loaders would read at the wrong offsets. Checked from the index's sample count (the manifest's) and the tar
    headers of its first, middle and last samples (a few reads a shard); a mismatch stops before the marker."""
    for split_shards in dataset.shards.values():
        for shard in split_shards:
            why = _index_mismatch(folder / shard.name, folder / shard.index, shard.samples)
            if why:
                (folder / shard.index).unlink(missing_ok=True)  # fetched again by the next run
                raise BadShard(f"{prefix}{shard.index} does not index {prefix}{shard.name} ({why}); {AGAIN}")


def _index_mismatch(tar: Path, index: Path, samples: int) -> str:
    """Why INDEX does not describe TAR, or ""."""
    try:
        entries = shards.read_index(index)
    except (OSError, ValueError) as err:
        return f"unreadable: {err}"
    if len(entries) != samples:
        return f"{len(entries)} samples, the manifest says {samples}"
    size = tar.stat().st_size
    with open(tar, "rb") as archive:
        for number in sorted({0, len(entries) // 2, len(entries) - 1}):
            for _, offset, length, member in entries[number]:
                if offset < shards.BLOCK or offset + length > size:
                    return f"sample {number + 1}: {member} at {offset} lies outside the tar"
                archive.seek(offset - shards.BLOCK)  # a ustar member's one header block precedes its data
                try:
                    header = tarfile.TarInfo.frombuf(archive.read(shards.BLOCK), "utf-8", "surrogateescape")
                except tarfile.TarError:
                    return f"sample {number + 1}: no tar header before {member}'s data at {offset}"
                named = header.name == member or (len(header.name) >= 99 and member.startswith(header.name))
                if not named or header.size != length:
                    return (f"sample {number + 1}: the index has {member} ({length} bytes) at {offset}, the tar "
                            f"{header.name} ({header.size} bytes)")
    return ""


def _stage_files(reader: BlobReader, name: str, folder: Path, stats: transfer.Stats, threads: int,
                 progress_interval: float) -> str:
    """A per-file dataset through the existing stager (same checks: Content-MD5, NAME.part, skip what is there)."""
    start = datasets.prefix(name)
    listed: set[str] = set()

    def blobs() -> Iterator[BlobItem]:
        for blob in _split_blobs(reader, name, stats):
            listed.add(blob.name[len(start):])
            yield blob

    with transfer.Progress(VERB, stats, interval=progress_interval):
        transfer.run_bounded(blobs(), stage.Stager(reader, folder, start, False, stats), threads)
    _prune(folder, listed)
    return f"{folder} holds {name} (per file): {stats.line(VERB).split(': ', 1)[1]}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m training node-stage", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("container_url", metavar="DATA_CONTAINER_URL",
                        help="the `data` container: https://ACCOUNT.blob.core.windows.net/data (no SAS: the node's "
                             "managed identity, AZURE_CLIENT_ID picks a user-assigned one), with a read+list SAS, or "
                             "env:VAR")
    parser.add_argument("--dataset", default=datasets.DEFAULT, help="the dataset (default: `default`)")
    parser.add_argument("--dest", type=Path, required=True, metavar="DIR",
                        help="the node's local volume; the dataset lands in DIR/datasets/NAME")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help=f"parallel downloads (default: {DEFAULT_THREADS})")
    args = parser.parse_args(argv)
    if args.threads < 1:
        raise UsageError("--threads must be at least 1")
    datasets.check_name(args.dataset)
    target = transfer.ContainerTarget.parse(args.container_url, "DATA_CONTAINER_URL", verb="stage")
    try:
        dataset_folder(args.dest, args.dataset).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--dest {args.dest}: cannot make {datasets.NAMED}{args.dataset} there "
                         f"({err.strerror})") from None
    result = node_stage(target, args.dataset, args.dest, args.threads)
    print(result.line, flush=True)
    return 0
