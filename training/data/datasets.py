"""Named datasets in a stack's `data` container: their blob layout, what each holds, and the manifest an upload
writes beside them (docs/data.md, "Datasets").

  data/train/<class>/IMAGE, data/val/<class>/IMAGE, data/dataset.json    the dataset `default`: the container's
                                                                          root, as every stack held its one dataset
  data/datasets/NAME/train/<class>/IMAGE, .../val/..., .../dataset.json  the dataset NAME

So a stack's existing data is the dataset `default`, unchanged, and a name's blobs never mix with another's. The
NFS server stages the container as a whole into its dataset folder (training/data/stage.py), where NAME lands in
datasets/NAME/ beside the default's train/: a job's --data is that folder (folder_of). The manifest, dataset.json,
travels with the images, so the trainer finds the dataset's name and content hash in --data (manifest_of).

The content hash is sha256 over every image's path in the dataset and its MD5 (the Content-MD5 every upload sets,
training/data/upload.py), in path order: the same images give the same hash whoever uploads them, whenever.

A sharded dataset (training/data/shards.py) keeps the same prefix: <prefix>shards/{train,val}-NNNNNN.{tar,idx} and
<prefix>dataset.json with "format": "shards", whose shard list and content hash (over the shards' names and MD5s)
are the dataset; a per-file dataset's manifest says "format": "files". A converted dataset may keep its per-file
blobs beside its shards (`shard` without --remove-files): the manifest says which the jobs read.
"""
from __future__ import annotations

import base64
import getpass
import hashlib
import json
import re
import socket
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from training.errors import UsageError

DEFAULT = "default"  # the container's root: the one dataset of a stack from before names
NAMED = "datasets/"  # where named datasets live in the container (and in the staged folder)
MANIFEST = "dataset.json"
SPLITS = ("train", "val")
SHARDS = "shards"  # a sharded dataset's folder (training/data/shards.py SHARDS_DIR)
# Lowercase letters, digits and inner hyphens, at most 32: a blob-name segment and a folder name on any system.
NAME_RULE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$")


def check_name(name: str) -> str:
    if not NAME_RULE.match(name or ""):
        raise UsageError(f"--dataset {name!r}: give 1 to 32 lowercase letters, digits or inner hyphens, e.g. pets-v2")
    return name


def prefix(name: str) -> str:
    """The blob-name prefix of a dataset in the `data` container."""
    return "" if name == DEFAULT else f"{NAMED}{name}/"


def folder_of(staged: str, name: str) -> str:
    """Where a dataset is, under the folder the container was staged into (a job's --data)."""
    return staged if name == DEFAULT else f"{staged.rstrip('/')}/{NAMED}{name}"


def _in_dataset(relative: str) -> bool:
    """Whether a blob name (relative to the dataset's prefix) is part of the dataset: its splits and manifest; at the
    root, the named datasets and anything else uploaded there are not the default's."""
    return relative == MANIFEST or relative.split("/", 1)[0] in (*SPLITS, SHARDS)


@dataclass(frozen=True)
class Dataset:
    name: str
    classes: tuple[str, ...]
    images: dict[str, int]  # per split
    bytes: int
    content_hash: str
    uploaded_by: str = ""
    uploaded_at: str = ""
    format: str = "files"  # "files" (blobs per image) or "shards" (training/data/shards.py)
    extra: dict = field(default_factory=dict)  # other manifest keys, kept (a sharded one's "shards")

    def shard_count(self) -> int:
        return sum(len(listed) for listed in (self.extra.get("shards") or {}).values())

    def line(self) -> str:
        counts = ", ".join(f"{self.images.get(split, 0)} {split}" for split in SPLITS)
        named = ", ".join(self.classes[:6]) + (" ..." if len(self.classes) > 6 else "")
        who = f"uploaded by {self.uploaded_by or 'unknown'}" + (f" at {self.uploaded_at}" if self.uploaded_at else "")
        held = f"shards ({self.shard_count()})" if self.format == "shards" else "files"
        return (f"{self.name}: {len(self.classes)} class(es) ({named}), {counts} images, {self.bytes / 1e6:.1f} MB, "
                f"{held}, {who}, {self.content_hash[:19]}")

    def manifest(self) -> dict:
        values = asdict(self)
        values.pop("extra")
        values["classes"] = list(self.classes)
        return values


def content_hash(items: Iterable[tuple[str, str]]) -> str:
    """sha256 over (path in the dataset, MD5 hex) pairs, in path order."""
    digest = hashlib.sha256()
    for path, md5 in sorted(items):
        digest.update(f"{path}\0{md5}\n".encode())
    return f"sha256:{digest.hexdigest()}"


def summarize(name: str, blobs: Iterable[tuple[str, int, str]], manifest: dict | None = None) -> Dataset | None:
    """A dataset from its blobs, (name relative to its prefix, size, MD5 hex) each; None when it has no image."""
    classes, images, size, hashed = set(), {split: 0 for split in SPLITS}, 0, []
    for relative, blob_size, md5 in blobs:
        parts = PurePosixPath(relative).parts
        if relative == MANIFEST or len(parts) < 3 or parts[0] not in SPLITS:
            continue
        images[parts[0]] += 1
        if parts[0] == "train":
            classes.add(parts[1])
        size += blob_size
        hashed.append((relative, md5))
    if not hashed:
        return None
    manifest = manifest or {}
    return Dataset(name, tuple(sorted(classes)), images, size, content_hash(hashed),
                   str(manifest.get("uploaded_by", "")), str(manifest.get("uploaded_at", "")))


def _md5_hex(properties) -> str:
    md5 = properties.content_settings.content_md5 if properties.content_settings else None
    return bytes(md5).hex() if md5 else f"etag:{properties.etag}"  # no MD5: a blob not uploaded by `upload`


def names(client) -> list[str]:
    """The datasets the container holds: `default` when its root has train/ or shards/, then each datasets/NAME/ (one
    listing with a delimiter, which returns each prefix once: https://learn.microsoft.com/rest/api/storageservices/
    list-blobs#uri-parameters, delimiter and BlobPrefix)."""
    found = [DEFAULT] if any(next(iter(client.list_blobs(name_starts_with=f"{under}/", results_per_page=1)), None)
                             for under in ("train", SHARDS)) else []
    return found + sorted(item.name[len(NAMED):].rstrip("/")
                          for item in client.walk_blobs(name_starts_with=NAMED, delimiter="/")
                          if item.name.endswith("/"))


def read_manifest(client, name: str) -> dict | None:
    from azure.core.exceptions import ResourceNotFoundError

    try:
        manifest = json.loads(client.download_blob(prefix(name) + MANIFEST).readall())
    except (ResourceNotFoundError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def from_sharded_manifest(name: str, manifest: dict) -> Dataset:
    """A sharded dataset's line, from its manifest (the shards' list is the dataset; their MD5s its hash)."""
    images = manifest.get("images") or {}
    return Dataset(name, tuple(manifest.get("classes") or ()), {split: int(images.get(split, 0)) for split in SPLITS},
                   int(manifest.get("bytes") or 0), str(manifest.get("content_hash", "")),
                   str(manifest.get("uploaded_by", "")), str(manifest.get("uploaded_at", "")), "shards",
                   {"shards": manifest.get("shards") or {}})


def describe(client, name: str) -> Dataset | None:
    """What the dataset NAME is now: its sharded manifest, when it says "format": "shards", else its per-file blobs
    (describe_files); None: no images."""
    manifest = read_manifest(client, name)
    if manifest and manifest.get("format") == "shards":
        return from_sharded_manifest(name, manifest)
    return describe_files(client, name, manifest)


def describe_files(client, name: str, manifest: dict | None = None) -> Dataset | None:
    """What the dataset NAME's per-file blobs hold now (its listing), with who uploaded it last (its manifest);
    None: no images."""
    start = prefix(name)
    blobs = ((blob.name[len(start):], blob.size, _md5_hex(blob))
             for split in SPLITS for blob in client.list_blobs(name_starts_with=f"{start}{split}/"))
    return summarize(name, blobs, manifest if manifest is not None else read_manifest(client, name))


def classes(client, name: str) -> list[str]:
    """The dataset's classes: its train/<class>/ folders (one listing with a delimiter), and a sharded manifest's."""
    start = f"{prefix(name)}train/"
    found = {item.name[len(start):].rstrip("/") for item in client.walk_blobs(name_starts_with=start, delimiter="/")
             if item.name.endswith("/")}
    manifest = read_manifest(client, name)
    if manifest and manifest.get("format") == "shards":
        found.update(str(c) for c in manifest.get("classes") or ())
    return sorted(found)


def uploader(client) -> str:
    """Who signs in: the Azure AD access token's user or application claims (upn, preferred_username, appid, oid:
    https://learn.microsoft.com/entra/identity-platform/access-token-claims-reference), read to name the uploader,
    not to trust it; with a SAS, or a token that is not a JWT, this machine's user@host."""
    credential = getattr(client, "credential", None)
    try:
        token = credential.get_token("https://storage.azure.com/.default").token
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        for key in ("upn", "preferred_username", "unique_name", "appid", "oid"):
            if claims.get(key):
                return str(claims[key])
    except Exception:  # noqa: BLE001 - no token or no JWT: the local name below
        pass
    return f"{getpass.getuser()}@{socket.gethostname()}"


def write_manifest(client, dataset: Dataset) -> None:
    body = json.dumps(dataset.manifest(), indent=2, sort_keys=True).encode()
    client.upload_blob(prefix(dataset.name) + MANIFEST, body, overwrite=True)


def remove(client, name: str, keep: Iterable[str] = ()) -> int:
    """Delete the dataset's blobs, except those named (relative to its prefix) in `keep`; how many were deleted.
    The root's other blobs (the named datasets, anything else) are never the default's."""
    start, kept, deleted = prefix(name), set(keep), 0
    for split in (*SPLITS, SHARDS, MANIFEST):
        under = f"{start}{split}" + ("/" if split != MANIFEST else "")
        for blob in client.list_blobs(name_starts_with=under):
            relative = blob.name[len(start):]
            if _in_dataset(relative) and relative not in kept:
                client.delete_blob(blob.name)
                deleted += 1
    return deleted


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def manifest_of(data_dir: Path | str) -> dict | None:
    """The trainer's side: the manifest staged with the dataset in --data, or None (data uploaded before names,
    a local folder, synthetic data)."""
    try:
        manifest = json.loads((Path(data_dir) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def card_text(data_dir: Path | str | None) -> str:
    """What a model records of the dataset it trained on: `NAME sha256:...`, or "" when --data has no manifest."""
    manifest = manifest_of(data_dir) if data_dir else None
    if not manifest:
        return ""
    return f"{manifest.get('name', DEFAULT)} {manifest.get('content_hash', '')}".strip()
