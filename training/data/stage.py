"""`python -m training stage CONTAINER_URL DEST`: copy a blob container (or a prefix of it) onto the NFS share
or node-local disk, before training, verified and resumable.

Every file is written as NAME.part and renamed only once complete and its MD5 matches the blob's
Content-MD5: a file with its final name is always whole. A rerun skips files already present with the same
size and MD5.

`--extract` streams .tar/.tar.gz/.tgz blobs straight into DEST, with no temporary copy, and tars inside them
(ImageNet's per-class tars) into a folder of their name. An archive whose name ends in `train` or `val`
(ILSVRC2012_img_train.tar, val.tar.gz...) goes into DEST/train/ or DEST/val/ (unless its members are under
train/ or val/ already), so ImageNet's two archives give the layout the trainer reads (`python -m training
train --data DEST`):

  ILSVRC2012_img_train.tar  (n01440764.tar, ... one tar of JPEGs per class)  ->  DEST/train/n01440764/*.JPEG
  ILSVRC2012_img_val.tar    (50,000 JPEGs, no folders)                       ->  DEST/val/n01440764/*.JPEG

The validation archive names no classes: `--val-labels BLOB` gives them, a text blob beside the archives
(under --prefix) with a line per image, either `IMAGE CLASS` (comma or space; the image with or without .JPEG;
more fields are ignored, so Kaggle's LOC_val_solution.csv works as is) or `CLASS` alone, the Nth line for
ILSVRC2012_val_<N in 8 digits>.JPEG (TensorFlow's imagenet_2012_validation_synset_labels.txt). Flat images in
a `val` archive without labels stop the staging: the trainer needs val/<class>/.

`--mark` keeps a record of what was staged in DEST/.staged (training/data/staged.py): a rerun lists the container
and stages only when it changed; an empty container is never marked ("waiting for data", exit status 4).
`--report STATUS_URL` also reports each state as a blob in that container and honours restage requests
(the NFS server's staging unit, run by a timer).

Examples:
  python -m training stage "$DATA_URL_WITH_READ_SAS" /mnt/nfs/imagenet
  python -m training stage "$DATA_URL" /data/imagenet --report "$STATUS_URL" --recheck-minutes 15
  python -m training stage "$DATA_URL_WITH_READ_SAS" /mnt/local/imagenet --prefix tars/ --extract \\
      --val-labels LOC_val_solution.csv
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from training.data import transfer
from training.data.blob_reader import BlobItem, BlobReader
from training.errors import UsageError

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
SPLITS = ("train", "val")  # the trainer's folders under --data (training/data/folder.py)
_SPLIT_OF_NAME = re.compile(r"(?:^|[_\-.])(train|val)$", re.IGNORECASE)
# How ImageNet's validation images are named (ILSVRC2012_val_00000001.JPEG ...): what a labels line without an
# image name stands for.
VAL_IMAGE = "ILSVRC2012_val_{:08d}"


class Corrupt(transfer.PermanentError):
    """Bytes that do not match the blob's Content-MD5. Not retried: HTTPS already checks every byte in transit
    (TLS), so a mismatch means the blob's bytes differ from the MD5 it was stored with (a broken upload, or a
    blob rewritten without its MD5); a retry reads the same bytes. The run stops at once naming the blob."""


class _HashingReader:
    def __init__(self, stream):
        self.stream, self.digest = stream, hashlib.md5()

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.digest.update(data)
        return data


def _without_archive_suffix(name: str) -> str:
    return next((name[:-len(suffix)] for suffix in ARCHIVE_SUFFIXES if name.endswith(suffix)), name)


def archive_split(name: str) -> str | None:
    """"train" or "val" when an archive's name says so (ILSVRC2012_img_train.tar, val.tar.gz), else None."""
    found = _SPLIT_OF_NAME.search(_without_archive_suffix(PurePosixPath(name).name))
    return found.group(1).lower() if found else None


def _stem(name: str) -> str:
    """A file name without its folders and its last extension."""
    return PurePosixPath(name).stem


def parse_val_labels(text: str, source: str) -> dict[str, str]:
    """Image stem -> class folder, from the lines of a labels file (see the module docstring for the two forms)."""
    labels: dict[str, str] = {}
    forms = set()
    for number, line in enumerate(text.splitlines(), 1):
        fields = [f for f in re.split(r"[,\s]+", line.strip()) if f]
        if not fields or (number == 1 and fields[0].lower() == "imageid"):  # Kaggle's header: ImageId,PredictionString
            continue
        forms.add(len(fields) == 1)
        if len(fields) == 1:  # the Nth class line is the Nth validation image's
            image, cls = VAL_IMAGE.format(len(labels) + 1), fields[0]
        else:
            image, cls = _stem(fields[0]), fields[1]
        if len(forms) > 1:
            raise transfer.PermanentError(f"--val-labels {source}: line {number} mixes `CLASS` lines with `IMAGE "
                                          "CLASS` lines; use one form")
        if cls in (".", "..") or "/" in cls or "\\" in cls:
            raise transfer.PermanentError(f"--val-labels {source}: line {number}: {cls!r} is not a class name")
        labels[image] = cls
    if not labels:
        raise transfer.PermanentError(f"--val-labels {source}: no labels in it")
    return labels


def _local_path(dest: Path, relative: str) -> Path:
    parts = PurePosixPath(relative).parts
    if not parts or relative.startswith("/") or ".." in parts:
        raise transfer.PermanentError(f"blob name {relative!r} would be written outside DEST")
    return dest.joinpath(*parts)


class Stager:
    def __init__(self, reader: BlobReader, dest: Path, prefix: str, extract: bool, stats: transfer.Stats,
                 val_labels: dict[str, str] | None = None, val_labels_name: str = ""):
        self.reader, self.dest, self.prefix, self.extract, self.stats = reader, dest, prefix, extract, stats
        self.val_labels, self.val_labels_name = val_labels, val_labels_name

    def __call__(self, blob: BlobItem) -> None:
        relative = blob.name[len(self.prefix):].lstrip("/")
        if self.extract and blob.name.endswith(ARCHIVE_SUFFIXES):
            transfer.with_retries(f"extract of {blob.name}", self.stats, lambda: self._extract(blob))
            return
        target = _local_path(self.dest, relative)
        expected = blob.md5
        if target.is_file() and target.stat().st_size == blob.size and (
                not expected or transfer.md5_file(target) == expected):
            self.stats.add(skipped=1)
            return
        transfer.with_retries(f"download of {blob.name}", self.stats, lambda: self._download(blob.name, target, expected))
        self.stats.add(files=1, bytes=blob.size)

    def _download(self, name: str, target: Path, expected: bytes) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")
        digest = hashlib.md5()
        try:
            with open(part, "wb") as out:
                def write(chunk: bytes) -> None:
                    out.write(chunk)
                    digest.update(chunk)
                self.reader.copy(name, write)
            if expected and digest.digest() != expected:
                raise Corrupt(f"{name}: MD5 {transfer.b64(digest.digest())} != Content-MD5 {transfer.b64(expected)}: "
                              "the blob's bytes do not match the MD5 it was stored with; upload it again "
                              "(`python -m training upload`)")
            os.replace(part, target)
        except BaseException as err:
            part.unlink(missing_ok=True)
            if isinstance(err, OSError) and err.filename is None:
                err.filename = str(part)  # a write's error names no file: say which (a full disk is permanent)
            raise

    def _extract(self, blob: BlobItem) -> None:
        response = self.reader.open(blob.name)
        try:
            self._unpack(_HashingReader(response), blob)
        finally:
            response.release_conn()

    def _unpack(self, reader: _HashingReader, blob: BlobItem) -> None:
        split = archive_split(blob.name)
        with tarfile.open(fileobj=reader, mode="r|*") as archive:
            for member in archive:
                if not member.isfile():
                    continue  # folders are made for the files in them; links and devices are not data
                if member.name.endswith(ARCHIVE_SUFFIXES):  # a tar in the tar: streamed, into a folder of its name
                    folder = self._place(blob, split, _without_archive_suffix(member.name), nested=True)
                    with tarfile.open(fileobj=archive.extractfile(member), mode="r|*") as inner:
                        for item in inner:
                            if item.isfile():
                                self._write(inner, item, f"{folder}/{item.name}")
                    continue
                self._write(archive, member, self._place(blob, split, member.name))
        while reader.read(transfer.READ_SIZE):  # the tail (tar padding) belongs to the checksum too
            pass
        expected = blob.md5
        if expected and reader.digest.digest() != expected:
            raise Corrupt(f"{blob.name}: archive MD5 does not match its Content-MD5: upload it again "
                          "(`python -m training upload`)")

    def _place(self, blob: BlobItem, split: str | None, name: str, nested: bool = False) -> str:
        """Where a member of `blob` goes, relative to DEST: as named in the archive, or under its split's folder
        unless it is there already (a train.tar.gz holding train/...)."""
        while name.startswith("./"):
            name = name[2:]
        if split is None or name.split("/")[0] == split:
            return name
        if split == "val" and not nested and "/" not in name.strip("/"):  # ImageNet's flat validation images
            if self.val_labels is None:
                raise transfer.PermanentError(
                    f"{blob.name} holds images with no class folders ({name}), and the trainer reads "
                    "val/<class>/*.JPEG: pass --val-labels BLOB, the labels uploaded beside it (see `python -m "
                    "training stage --help`)")
            cls = self.val_labels.get(_stem(name))
            if cls is None:
                raise transfer.PermanentError(f"{blob.name}: {name} has no class in --val-labels "
                                              f"{self.val_labels_name}; is it the labels file of this archive?")
            return f"val/{cls}/{name.strip('/')}"
        return f"{split}/{name}"

    def _write(self, archive: tarfile.TarFile, member: tarfile.TarInfo, relative: str) -> None:
        """One file of a (streamed) archive to DEST/relative: NAME.part, renamed once whole; skipped when a file of
        its size is there (a rerun)."""
        member = tarfile.data_filter(member, str(self.dest))  # no absolute paths, no escaping links
        target = _local_path(self.dest, relative)
        if target.is_file() and target.stat().st_size == member.size:
            self.stats.add(skipped=1)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")
        source = archive.extractfile(member)
        try:
            with open(part, "wb") as out:
                while chunk := source.read(transfer.READ_SIZE):
                    out.write(chunk)
            os.replace(part, target)
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        self.stats.add(files=1, bytes=member.size)


def _blobs(reader: BlobReader, prefix: str, stats: transfer.Stats) -> Iterator[BlobItem]:
    """Every blob under `prefix`, fetched a page (5,000 names) at a time as the transfers need them: memory
    stays flat however many blobs there are. A page that fails transiently is fetched again."""
    marker = None
    while marker != "":
        page, marker = transfer.with_retries("listing the container", stats,
                                             lambda: reader.list_page(prefix, marker or ""))
        yield from (blob for blob in page if not blob.name.endswith("/"))


def _read_labels(reader: BlobReader, name: str) -> dict[str, str]:
    from training.data.blob_reader import BlobHttpError

    chunks: list[bytes] = []
    try:
        reader.copy(name, chunks.append)
    except BlobHttpError as err:
        if err.status_code == 404:
            raise transfer.PermanentError(f"--val-labels {name}: no such blob in the container") from None
        raise
    return parse_val_labels(b"".join(chunks).decode("utf-8-sig", errors="replace"), name)


def stage(target: transfer.ContainerTarget, dest: Path, prefix: str, workers: int, extract: bool,
          val_labels: str = "") -> transfer.Stats:
    """`val_labels`: with `extract`, the blob (under `prefix`) that gives a `val` archive's flat images their
    classes."""
    target.check_reachable()
    stats = transfer.Stats()
    reader = BlobReader(target, workers)
    labels = None
    if val_labels:
        name = prefix + val_labels
        labels = transfer.with_retries(f"reading {name}", stats, lambda: _read_labels(reader, name))
    dest.mkdir(parents=True, exist_ok=True)
    listed: set[str] = set()

    def blobs() -> Iterator[BlobItem]:
        for blob in _blobs(reader, prefix, stats):
            listed.add(blob.name[len(prefix):].lstrip("/"))
            yield blob

    with transfer.Progress("stage", stats):
        transfer.run_bounded(blobs(), Stager(reader, dest, prefix, extract, stats, labels, val_labels), workers)
    if not extract:  # extracted archives name no blob: nothing to compare
        prune(dest, listed)
    return stats


def prune(dest: Path, listed: set[str]) -> int:
    """Delete the files of the datasets' folders (train/, val/, datasets/: training/data/datasets.py) that the
    container no longer holds, so a dataset replaced or removed there (`infra upload --replace`, `infra datasets
    --remove`) is replaced or removed here too, and a job never trains on a class taken out. Anything else in DEST
    stays. How many files went."""
    from training.data import datasets

    gone = 0
    for top in (*SPLITS, datasets.NAMED.rstrip("/")):
        for path in sorted((dest / top).rglob("*"), reverse=True):  # files before their folders
            if path.is_file() and path.relative_to(dest).as_posix() not in listed and not path.name.endswith(".part"):
                path.unlink()
                gone += 1
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
    return gone


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m training stage", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("container_url", metavar="CONTAINER_URL",
                        help="https://ACCOUNT.blob.core.windows.net/CONTAINER with a read+list SAS, or without one "
                             "to use Azure AD; or env:VAR to read it from the "
                             "environment variable VAR (keeps the SAS out of `ps`)")
    parser.add_argument("dest", type=Path, metavar="DEST", help="local folder (NFS share or node-local disk)")
    parser.add_argument("--prefix", default="", help="only blobs under this prefix, written without it")
    parser.add_argument("--workers", type=int, default=32, help="parallel transfers (default: 32)")
    parser.add_argument("--extract", action="store_true",
                        help="unpack .tar/.tar.gz/.tgz blobs into DEST while downloading them, tars inside them into a "
                             "folder of their name; an archive named *train or *val into DEST/train or DEST/val "
                             "(ImageNet's two archives: see above)")
    parser.add_argument("--val-labels", metavar="BLOB", default="",
                        help="with --extract: the blob (under --prefix) giving each image of a val archive its class "
                             "folder, `IMAGE CLASS` or `CLASS` per line (see above)")
    parser.add_argument("--mark", action="store_true",
                        help="record what was staged in DEST/.staged; stage only when the container changed; never "
                             "mark an empty container (exit status 4: waiting for data)")
    parser.add_argument("--report", metavar="STATUS_URL",
                        help="with --mark: report each state as the blob DEST_NAME.staged in this container and "
                             "stage again when DEST_NAME.restage is there (SAS, Azure AD, or env:VAR)")
    parser.add_argument("--recheck-minutes", type=int, default=0,
                        help="with --mark: once staged, list the container again only this often (default: 0, "
                             "every run)")
    args = parser.parse_args(argv)
    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    if args.val_labels and not args.extract:
        raise UsageError("--val-labels applies with --extract (it sorts a val archive's images into class folders)")
    if args.recheck_minutes < 0:
        raise UsageError("--recheck-minutes must be 0 or more")
    target = transfer.ContainerTarget.parse(args.container_url, verb="stage")
    report_target = transfer.ContainerTarget.parse(args.report, "--report") if args.report else None
    try:
        args.dest.mkdir(parents=True, exist_ok=True)
        probe = args.dest / f".stage-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"DEST {args.dest}: not writable ({err.strerror})") from None
    print(f"stage: {target.display}{' prefix ' + args.prefix if args.prefix else ''} -> {args.dest}", file=sys.stderr)
    if args.mark or report_target:
        return _stage_marked(target, args, report_target)
    with transfer.stopping_cleanly("stage", target):
        stats = stage(target, args.dest, args.prefix, args.workers, args.extract, args.val_labels)
    print(stats.line("stage"))
    return 0


def _stage_marked(target: transfer.ContainerTarget, args: argparse.Namespace,
                  report_target: transfer.ContainerTarget | None) -> int:
    from training.data import staged

    stats = transfer.Stats()

    def listing() -> staged.Listing:
        target.check_reachable()
        return staged.list_container(BlobReader(target, 1), args.prefix,
                                     lambda operation, attempt: transfer.with_retries(operation, stats, attempt))

    def run_stager() -> str:
        return stage(target, args.dest, args.prefix, args.workers, args.extract, args.val_labels).line("stage")

    source = f"{target.account_url}/{target.container}" + (f" (prefix {args.prefix})" if args.prefix else "")
    with transfer.stopping_cleanly("stage", target):
        status = staged.StatusBlobs(report_target.client(1), args.dest.name) if report_target else None
        result = staged.stage_round(args.dest, source, listing, run_stager, status, args.recheck_minutes)
    print(result.line)
    return result.exit_code
