"""`python -m training upload SRC CONTAINER_URL`: put a dataset into a blob container, verified and resumable.

Each file goes up in blocks (bounded memory) with its MD5 as Content-MD5, which `stage` verifies. A rerun
skips files whose blob already has the same size and MD5 (when the SAS can read), and uploads the rest.

Any tree goes up as it is; a folder that is not in the trainer's layout (train/<class>/IMAGE, training/data/
layout.py) gets a note, and `--check-layout` refuses it, or one whose images do not all decode
(training/data/decode_check.py), before a byte moves. For a deployed stack, `python -m infra upload DIR` finds the
`data` container itself and checks the layout and the images by default.

--format: a folder in the trainer's layout goes up as shards (training/data/sharding.py: WebDataset tars with
DALI's index, an MD5 each, dataset.json last) when it has >= 10,000 images or >= 1 GiB (`auto`, the default), or
as you say (`shards`, `files`); a sharded folder (`python -m training shard`'s output) goes up as it is. --prefix
is then the dataset's prefix (datasets/NAME/ for the dataset NAME, none for `default`).

Examples:
  python -m training upload /data/imagenet "$DATA_URL_WITH_WRITE_SAS"
  python -m training upload ILSVRC2012_img_train.tar "https://ACCOUNT.blob.core.windows.net/data" --prefix tars/
  python -m training upload ~/pets "https://ACCOUNT.blob.core.windows.net/data" --check-layout
  python -m training upload /data/imagenet "$DATA_URL" --prefix datasets/imagenet/ --format shards
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from training.data import datasets, decode_check, layout, sharding, shards, transfer
from training.errors import UsageError


def _files(src: Path):
    if src.is_file():
        yield src, src.name
        return
    for root, dirs, names in os.walk(src):
        dirs.sort()
        for name in sorted(names):
            path = Path(root) / name
            yield path, path.relative_to(src).as_posix()


def container_classes(client) -> list[str] | None:
    """The class folders (train/<class>/) a container holds already, or None when the sign-in may not list it.
    One listing with a delimiter, which returns each train/<class>/ prefix once instead of every blob
    (https://learn.microsoft.com/rest/api/storageservices/list-blobs#uri-parameters: delimiter, BlobPrefix)."""
    from azure.core.exceptions import HttpResponseError

    try:
        return sorted(item.name[len("train/"):].rstrip("/")
                      for item in client.walk_blobs(name_starts_with="train/", delimiter="/")
                      if item.name.endswith("/"))
    except HttpResponseError as err:
        if err.status_code == 403:  # a create+write-only SAS cannot list
            return None
        raise


class Uploader:
    def __init__(self, client, prefix: str, stats: transfer.Stats):
        self.client, self.prefix, self.stats = client, prefix, stats
        self.can_read = True  # a create+write-only SAS cannot look at existing blobs: then every file goes up

    def _already_there(self, blob, size: int, md5: bytes) -> bool:
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

        if not self.can_read:
            return False
        try:
            props = blob.get_blob_properties()
        except ResourceNotFoundError:
            return False
        except HttpResponseError as err:
            if err.status_code == 403:
                self.can_read = False
                print("upload: the SAS cannot read blobs, so files already uploaded are uploaded again",
                      file=sys.stderr)
                return False
            raise
        return props.size == size and bytes(props.content_settings.content_md5 or b"") == md5

    def __call__(self, item: tuple[Path, str]) -> None:
        from azure.storage.blob import ContentSettings

        path, relative = item
        size, md5 = path.stat().st_size, transfer.md5_file(path)
        blob = self.client.get_blob_client(self.prefix + relative)

        def attempt() -> bool:
            if self._already_there(blob, size, md5):
                return False
            with open(path, "rb") as f:
                blob.upload_blob(f, length=size, overwrite=True, max_concurrency=1,
                                 content_settings=ContentSettings(content_md5=bytearray(md5)))
            return True

        if transfer.with_retries(f"upload of {relative}", self.stats, attempt):
            self.stats.add(files=1, bytes=size)
        else:
            self.stats.add(skipped=1)


def upload(src: Path, target: transfer.ContainerTarget, prefix: str, workers: int) -> transfer.Stats:
    target.check_reachable()
    stats = transfer.Stats()
    uploader = Uploader(target.client(workers), prefix, stats)
    with transfer.Progress("upload", stats):
        transfer.run_bounded(_files(src), uploader, workers)
    return stats


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m training upload", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", type=Path, help="a file or a folder (its tree is kept under the prefix)")
    parser.add_argument("container_url", metavar="CONTAINER_URL",
                        help="https://ACCOUNT.blob.core.windows.net/CONTAINER, with a SAS (create+write, plus read "
                             "to skip files already there) or without one to use Azure AD; or env:VAR to read it from the "
                             "environment variable VAR (keeps the SAS out of `ps`)")
    parser.add_argument("--prefix", default="", help="blob name prefix, e.g. imagenet/ (default: none)")
    parser.add_argument("--workers", type=int, default=16, help="parallel transfers (default: 16)")
    parser.add_argument("--format", choices=sharding.FORMATS, default="auto", help=sharding.AUTO_RULE)
    parser.add_argument("--shard-mb", type=float, default=shards.SHARD_BYTES / 1e6,
                        help="with shards: target shard size in MB (default: 128)")
    parser.add_argument("--replace", action="store_true",
                        help="with shards: delete the dataset's per-file blobs once its shards and manifest are up")
    parser.add_argument("--check-layout", action="store_true",
                        help="refuse a folder the trainer cannot read (train/<class>/IMAGE, optionally val/<class>/ "
                             "with classes of train/; every image decodes) before anything is uploaded")
    args = parser.parse_args(argv)
    if not args.src.exists():
        raise UsageError(f"SRC {args.src}: no such file or folder")
    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    target = transfer.ContainerTarget.parse(args.container_url, verb="upload")
    found = layout.of_folder(args.src) if args.src.is_dir() else None
    problem = found.problem() if found else None
    if problem and args.check_layout:
        raise UsageError(f"SRC {args.src}: {problem}; {layout.EXPECTED} (without --check-layout it goes up as it is)")
    if args.check_layout and args.src.is_dir():
        bad = decode_check.undecodable(args.src)  # every image decoded here, before a byte is sent
        if bad:
            raise UsageError(f"SRC {args.src}: {decode_check.describe(bad)} (without --check-layout it goes up as it is)")
    fmt = _format(args, found, problem)
    if fmt == "shards":
        name = _name_of(args.prefix)
        print(f"upload: {args.src} -> {target.display} as shards, prefix {args.prefix or '(none)'}", file=sys.stderr)
        pushed = sharding.upload_folder(args.src, target, args.prefix, name, workers=args.workers,
                                        shard_bytes=int(args.shard_mb * 1e6), replace=args.replace)
        print(pushed.stats.line("upload").replace(" files (", " shards (", 1)
              + f"; {pushed.dataset.images()['train']} train images in {len(pushed.dataset.shards['train'])} shards, "
              f"{pushed.removed} blob(s) deleted, {pushed.dataset.content_hash[:19]}")
        return 0
    if args.replace:
        raise UsageError("--replace: only with shards (--format shards); a per-file upload keeps what is there")
    if problem:
        print(f"upload: note: {args.src} is not in the trainer's layout ({problem}); uploading it as it is",
              file=sys.stderr)
    print(f"upload: {args.src} -> {target.display}{' prefix ' + args.prefix if args.prefix else ''}", file=sys.stderr)
    with transfer.stopping_cleanly("upload", target):
        stats = upload(args.src, target, args.prefix, args.workers)
    print(stats.line("upload"))
    return 0


def _format(args, found: layout.Layout | None, problem: str | None) -> str:
    """What goes up: "shards" or "files" (--format, and for auto the folder's size: sharding.AUTO_RULE)."""
    if found is not None and shards.is_sharded(args.src):
        if args.format == "files":
            raise UsageError(f"SRC {args.src}: a sharded folder goes up as shards; leave --format out")
        return "shards"
    if found is None or problem:
        if args.format == "shards":
            raise UsageError(f"SRC {args.src}: {problem or 'a file'}; shards need a folder in the trainer's layout "
                             f"({layout.EXPECTED})")
        return "files"
    images, size = sharding.folder_figures(found, args.src)
    fmt = sharding.choose(args.format, images, size)
    if args.format == "auto":
        print(f"upload: {images} images, {size / 2**30:.2f} GiB: --format auto uploads {fmt}", file=sys.stderr)
    return fmt


def _name_of(prefix: str) -> str:
    """The dataset a prefix is (training/data/datasets.py): "" is `default`, datasets/NAME/ is NAME."""
    if not prefix:
        return datasets.DEFAULT
    if prefix.startswith(datasets.NAMED) and prefix.endswith("/"):
        return datasets.check_name(prefix[len(datasets.NAMED):-1])
    raise UsageError(f"--prefix {prefix}: a sharded dataset goes at no prefix (the dataset `default`) or at "
                     f"{datasets.NAMED}NAME/ (the dataset NAME), where jobs find it")
