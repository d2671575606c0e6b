"""Sharded datasets in a blob container (training/data/shards.py is the format): a folder uploaded as shards, a
per-file dataset already in the container converted in place, and the rule `--format auto` follows.

`python -m training shard SRC DEST` writes a local ImageNet-layout folder as a sharded folder (no network);
`python -m training shard CONTAINER_URL --dataset NAME` converts the per-file dataset NAME in the container into
shards beside its blobs (`python -m infra shard --dataset NAME` does the same for a stack, with your sign-in).

How a sharded upload goes, for a folder or a container's per-file blobs alike:
- the images are read (blobs: streamed, on --workers threads ahead of the writer) and written into shards in a
  temporary folder, one shard at a time; each closed shard is uploaded (tar, then its DALI index) while the next
  is written, and deleted here once it is up: the temporary folder holds at most three shards (~400 MB at the
  default size), whatever the dataset's size;
- each blob goes up with its MD5 as Content-MD5 (the blob's stored MD5, which the node stager and `stage` check)
  and every block with its own, which the service verifies (the SDK's validate_content: Put Block's Content-MD5,
  https://learn.microsoft.com/rest/api/storageservices/put-block#request-headers; the whole blob's
  x-ms-blob-content-md5 on Put Block List is stored, not checked: https://learn.microsoft.com/rest/api/
  storageservices/put-block-list#request-headers);
- a shard whose blob is already there with the same size and MD5 is not sent again: a rerun (the same folder and
  seed make the same bytes) resumes where the last one stopped;
- dataset.json goes up last: until then the dataset is what it was (a half upload is never a dataset); then
  shards under the dataset's shards/ that its new manifest does not list are deleted, and with --replace (upload)
  or --remove-files (shard) its per-file blobs too.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from training.data import datasets, layout, shards, transfer
from training.errors import UsageError

FORMATS = ("auto", "shards", "files")
AUTO_IMAGES = 10_000
AUTO_BYTES = 1 << 30  # 1 GiB
AUTO_RULE = ("auto (the default): shards when the dataset has >= 10,000 images or >= 1 GiB, else a blob per image; "
             "shards: WebDataset tars of ~128 MB with DALI's index and an MD5 each (what the nodes stage onto local "
             "NVMe); files: a blob per image")
IN_FLIGHT = 2  # shards uploading while the next is written: disk holds IN_FLIGHT + 1 shards


def choose(fmt: str, images: int, size: int) -> str:
    """"shards" or "files" for --format `fmt` and a dataset of `images` images, `size` bytes (AUTO_RULE)."""
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt}: give one of {', '.join(FORMATS)}")
    if fmt != "auto":
        return fmt
    return "shards" if images >= AUTO_IMAGES or size >= AUTO_BYTES else "files"


def folder_figures(found: layout.Layout, src: Path) -> tuple[int, int]:
    """(images, bytes) of a local folder's train/ and val/ images (what `auto` weighs)."""
    images = sum(sum(per.values()) for per in found.images.values())
    size = sum(path.stat().st_size for split in layout.SPLITS for path in (src / split).glob("*/*")
               if path.is_file() and layout.is_image(path.name)) if images else 0
    return images, size


@dataclass
class Pushed:
    dataset: shards.ShardedDataset
    stats: transfer.Stats
    removed: int = 0  # blobs deleted after the manifest went up (stale shards; per-file blobs when asked)


class _Pusher:
    """Uploads a closed shard (tar, then index) with Content-MD5, skipping one already there, then deletes it."""

    def __init__(self, client, prefix: str, workers: int, stats: transfer.Stats):
        self.client, self.prefix, self.workers, self.stats = client, prefix, workers, stats

    def _same(self, blob, size: int, md5: bytes) -> bool:
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

        try:
            props = blob.get_blob_properties()
        except ResourceNotFoundError:
            return False
        except HttpResponseError as err:
            if err.status_code == 403:  # a create+write-only SAS cannot read: every shard goes up again
                return False
            raise
        return props.size == size and bytes(props.content_settings.content_md5 or b"") == md5

    def put(self, path: Path, relative: str, md5_hex: str | None = None) -> bool:
        """Upload one file as PREFIX+relative unless it is there with the same MD5; whether it was sent."""
        from azure.storage.blob import ContentSettings

        md5 = bytes.fromhex(md5_hex) if md5_hex else transfer.md5_file(path)
        size = path.stat().st_size
        blob = self.client.get_blob_client(self.prefix + relative)
        kind = "application/json" if relative.endswith(".json") else (
            "application/x-tar" if relative.endswith(".tar") else "text/plain")

        def attempt() -> bool:
            if self._same(blob, size, md5):
                return False
            with open(path, "rb") as f:
                blob.upload_blob(f, length=size, overwrite=True, max_concurrency=self.workers, validate_content=True,
                                 content_settings=ContentSettings(content_type=kind, content_md5=bytearray(md5)))
            return True

        return transfer.with_retries(f"upload of {self.prefix}{relative}", self.stats, attempt)

    def shard(self, folder: Path, shard: shards.Shard, delete: bool) -> None:
        sent = self.put(folder / shard.name, shard.name, shard.md5)
        self.put(folder / shard.index, shard.index)
        if sent:
            self.stats.add(files=1, bytes=shard.bytes)
        else:
            self.stats.add(skipped=1)
        if delete:
            (folder / shard.name).unlink(missing_ok=True)
            (folder / shard.index).unlink(missing_ok=True)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _push_built(built, pusher: _Pusher, folder: Path, total_images: int, delete: bool):
    """Upload each shard as `built` yields it, IN_FLIGHT at a time, yielding (split, shard) once it is up."""
    done_images, pending = 0, deque()
    with ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="shard-upload") as pool:
        for split, shard in built:
            done_images += shard.samples
            _say(f"shard: {shard.name}: {shard.samples} images, {shard.bytes / 1e6:.1f} MB, md5 {shard.md5[:12]} "
                 f"({done_images}/{total_images} images)")
            pending.append((split, shard, pool.submit(pusher.shard, folder, shard, delete)))
            while len(pending) > IN_FLIGHT:
                split_done, shard_done, future = pending.popleft()
                future.result()
                yield split_done, shard_done
        while pending:
            split_done, shard_done, future = pending.popleft()
            future.result()
            yield split_done, shard_done


def _finish(client, pusher: _Pusher, folder: Path, classes: list[str], built, extra: dict, name: str,
            remove_files: bool) -> int:
    """Write and upload the manifest last; then delete the shards it does not list (and the per-file blobs with
    remove_files). How many blobs were deleted."""
    dataset = shards.finish(folder, classes, built, extra)
    pusher.put(folder / shards.MANIFEST, shards.MANIFEST)
    keep = {s.name for split in dataset.shards.values() for s in split} | {
        s.index for split in dataset.shards.values() for s in split} | {datasets.MANIFEST}
    from azure.core.exceptions import HttpResponseError

    removed = 0
    try:
        for blob in client.list_blobs(name_starts_with=f"{pusher.prefix}{shards.SHARDS_DIR}/"):
            if blob.name[len(pusher.prefix):] not in keep:
                client.delete_blob(blob.name)
                removed += 1
        if remove_files:
            removed += datasets.remove(client, name, keep=keep)
    except HttpResponseError as err:
        if err.status_code != 403:
            raise
        # The dataset is whole (its manifest is up); what stays is unlisted blobs, which no job reads.
        _say(f"shard: note: the sign-in may not list or delete blobs, so {'some ' if removed else ''}blobs the manifest "
             "does not list stay (a SAS with list and delete, or your Azure AD sign-in, removes them)")
    return removed


def _extra(client, name: str, **more) -> dict:
    return {"name": name, "uploaded_by": datasets.uploader(client), "uploaded_at": datasets.now_iso(), **more}


def upload_folder(src: Path, target: transfer.ContainerTarget, prefix: str, name: str, *, workers: int = 16,
                  shard_bytes: int = shards.SHARD_BYTES, seed: int = 0, replace: bool = False) -> Pushed:
    """A local folder as a sharded dataset at `prefix`: an ImageNet-layout folder is sharded on the way up; a
    sharded folder (`python -m training shard`'s output) goes up as it is, each shard checked against its
    manifest's MD5 first. `replace`: the dataset's per-file blobs are deleted after the manifest is up."""
    target.check_reachable()
    client, stats = target.client(workers), transfer.Stats()
    pusher = _Pusher(client, prefix, workers, stats)
    with transfer.stopping_cleanly("upload", target), transfer.Progress("upload", stats), \
            tempfile.TemporaryDirectory(prefix="shards-") as tmp:
        if shards.is_sharded(src):
            local = shards.read_sharded(src)
            listed = [(split, s) for split in shards.SPLITS for s in local.shards.get(split, ())]
            for _, shard in listed:
                if not (src / shard.name).is_file() or shards.md5_file(src / shard.name) != shard.md5:
                    raise UsageError(f"SRC {src}: {shard.name} is missing or its MD5 is not its manifest's; "
                                     f"write the folder again (`python -m training shard`)")
            pushed = _push_built(listed, pusher, src, sum(s.samples for _, s in listed), delete=False)
            manifest = json.loads((src / shards.MANIFEST).read_text())
            extra = {k: v for k, v in manifest.items() if k not in ("format", "shards", "content_hash")}
            removed = _finish(client, pusher, Path(tmp), list(local.classes), pushed,
                              {**extra, **_extra(client, name)}, name, replace)
        else:
            classes, sources = shards.folder_sources(src)
            built = shards.build(sources, classes, tmp, shard_bytes=shard_bytes, seed=seed)
            pushed = _push_built(built, pusher, Path(tmp), len(sources), delete=True)
            removed = _finish(client, pusher, Path(tmp), classes, pushed, _extra(client, name, seed=seed), name,
                              replace)
        dataset = shards.read_sharded(tmp)
    return Pushed(dataset, stats, removed)


def _blob_sources(reader, prefix: str) -> tuple[list[str], list[shards.Source], int]:
    """The classes, images and total bytes of the per-file dataset at `prefix` (its train/ and val/ listing)."""
    found, sources, size = layout.Layout(), [], 0
    for split in layout.SPLITS:
        marker = None
        while marker != "":
            page, marker = reader.list_page(f"{prefix}{split}/", marker or "")
            for item in page:
                relative = item.name[len(prefix):]
                found.add(relative)
                parts = PurePosixPath(relative).parts
                if len(parts) == 3 and layout.is_image(parts[2]):
                    sources.append(shards.Source(split, parts[1], parts[2], item.name))
                    size += item.size
    problem = found.problem()
    if problem:
        raise UsageError(f"the container's {prefix or 'root'}: {problem}; {layout.EXPECTED}")
    return sorted(found.images["train"]), sources, size


def convert(target: transfer.ContainerTarget, name: str, *, workers: int = 16, shard_bytes: int = shards.SHARD_BYTES,
            seed: int = 0, remove_files: bool = False) -> Pushed:
    """The per-file dataset NAME in the container, rewritten in place as shards: its blobs streamed (GETs on
    `workers` threads), the shards written here (three at most on disk) and uploaded beside them, the manifest
    last. Its per-file blobs stay (jobs read the shards: the manifest says "format": "shards") unless
    remove_files."""
    from training.data.blob_reader import BlobReader

    datasets.check_name(name)
    target.check_reachable()
    prefix, client, stats = datasets.prefix(name), target.client(workers), transfer.Stats()
    manifest = datasets.read_manifest(client, name)
    if manifest and manifest.get("format") == shards.FORMAT:
        raise UsageError(f"--dataset {name} is sharded already ({len(manifest.get('shards', {}).get('train', []))} "
                         "train shards); nothing to convert")
    reader = BlobReader(target, workers)
    with transfer.stopping_cleanly("shard", target):
        classes, sources, size = _blob_sources(reader, prefix)
        _say(f"shard: dataset {name}: {len(classes)} classes, {len(sources)} images, {size / 1e9:.2f} GB -> "
             f"~{max(1, round(size / shard_bytes))} shards")

        def read(source: shards.Source) -> bytes:
            def attempt() -> bytes:
                chunks = bytearray()
                reader.copy(source.ref, chunks.extend)
                return bytes(chunks)
            return transfer.with_retries(f"read of {source.ref}", stats, attempt)

        pusher = _Pusher(client, prefix, workers, stats)
        with transfer.Progress("shard", stats), tempfile.TemporaryDirectory(prefix="shards-") as tmp:
            built = shards.build(sources, classes, tmp, shard_bytes=shard_bytes, seed=seed, read=read,
                                 readers=workers)
            pushed = _push_built(built, pusher, Path(tmp), len(sources), delete=True)
            extra = _extra(client, name, seed=seed, converted_from=(manifest or {}).get("content_hash", ""))
            removed = _finish(client, pusher, Path(tmp), classes, pushed, extra, name, remove_files)
            dataset = shards.read_sharded(tmp)
    return Pushed(dataset, stats, removed)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training shard", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Write a dataset as shards (docs/data.md, Shards): a local ImageNet-layout folder into a "
                    "sharded folder (SRC DEST), or the per-file dataset NAME of a blob container in place (SRC is "
                    "the container URL, --dataset NAME).",
        epilog="Examples:\n"
               "  python -m training shard /data/imagenet /data/imagenet-shards\n"
               "  python -m training upload /data/imagenet-shards \"$DATA_URL\" --prefix datasets/imagenet/\n"
               "  python -m training shard env:DATA_URL --dataset pets --remove-files")
    parser.add_argument("src", help="an ImageNet-layout folder (train/<class>/IMAGE, optionally val/<class>/IMAGE), or "
                                    "a container URL (https://ACCOUNT.blob.core.windows.net/data with a SAS that may "
                                    "read, list, create, write (and delete: --remove-files), or none for Azure AD; "
                                    "or env:VAR)")
    parser.add_argument("dest", nargs="?", type=Path, help="the sharded folder to write (for a local SRC)")
    parser.add_argument("--dataset", default=datasets.DEFAULT, metavar="NAME",
                        help="for a container: the dataset to convert (default: default)")
    parser.add_argument("--shard-mb", type=float, default=shards.SHARD_BYTES / 1e6,
                        help="target shard size in MB (default: 128; 100-250 suits DALI and the stager)")
    parser.add_argument("--seed", type=int, default=0, help="the shuffle of samples into shards (default: 0)")
    parser.add_argument("--workers", type=int, default=16, help="parallel reads and uploads (default: 16)")
    parser.add_argument("--remove-files", action="store_true",
                        help="for a container: delete the dataset's per-file blobs once its shards are up")
    args = parser.parse_args(argv)
    shard_bytes = int(args.shard_mb * 1e6)
    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    remote = args.src.startswith(("https://", "http://", "env:"))
    if remote:
        if args.dest is not None:
            raise UsageError(f"DEST {args.dest}: a container's dataset is converted in place; leave DEST out")
        target = transfer.ContainerTarget.parse(args.src, verb="shard")
        pushed = convert(target, args.dataset, workers=args.workers, shard_bytes=shard_bytes, seed=args.seed,
                         remove_files=args.remove_files)
        print(f"shard: dataset {args.dataset}: {_summary(pushed.dataset)}; {pushed.removed} blob(s) deleted"
              + ("" if args.remove_files else "; its per-file blobs are kept (--remove-files deletes them)"))
        return 0
    src = Path(args.src)
    if args.dest is None:
        raise UsageError(f"SRC {src}: give DEST, the folder to write the shards into")
    if not src.is_dir():
        raise UsageError(f"SRC {src}: no such folder; give an ImageNet-layout folder (train/<class>/IMAGE)")
    if args.dest.exists() and any(args.dest.iterdir()):
        raise UsageError(f"DEST {args.dest}: not empty; give a new or empty folder")
    dataset = shards.write_shards(src, args.dest, shard_bytes=shard_bytes, seed=args.seed,
                                  progress=lambda split, s: _say(f"shard: {s.name}: {s.samples} images, "
                                                                 f"{s.bytes / 1e6:.1f} MB"))
    print(f"shard: {args.dest}: {_summary(dataset)}")
    return 0


def _summary(dataset: shards.ShardedDataset) -> str:
    counts = ", ".join(f"{len(dataset.shards.get(split, ()))} {split} shards ({dataset.images()[split]} images)"
                       for split in shards.SPLITS)
    return f"{len(dataset.classes)} classes, {counts}, {dataset.bytes() / 1e6:.1f} MB, {dataset.content_hash[:19]}"
