"""sharedImages: the platform's training images, named by digest, that a stack imports into its own registry instead
of building them (pure: the key's rules, and what `plan`, `teams` and `new-team` say about it).

One build for the fleet (docs/teams.md): the platform builds each image once into its own registry; a stack that
sets `sharedImages` gets them with ACR's import (infra/components/image_import.py), a server-side copy between
registries, and runs `<its registry>/<framework>@sha256:...`. Frameworks of `frameworks` it does not name are
still built here, as before.

    sharedImages: {registry: /subscriptions/<id>/resourceGroups/<rg>/providers/Microsoft.ContainerRegistry/
                   registries/<name>, pytorch: dltrain/pytorch@sha256:<64 hex>}
"""
from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from infra.core.config.schema import IMAGES, ConfigError

KEY = "sharedImages"
REGISTRY_ENTRY = "registry"
# The source registry by resource ID, never by login server: "the --registry <source-registry-resource-id> flag is
# needed to utilize Entra identity authentication to the source registry" (Import container images,
# https://learn.microsoft.com/azure/container-registry/container-registry-import-images: "Import from an Azure
# container registry in the same AD tenant"); by login server the import needs a username and password, a secret
# this program does not hold. Registry names: 5-50 alphanumerics
# (https://learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules#microsoftcontainerregistry;
# Registries - Import Image's registryName: minLength 5, maxLength 50, ^[a-zA-Z0-9]*$). Resource group names:
# 1-90 letters, digits, underscores, hyphens, periods and parentheses, not ending in a period (same page,
# #microsoftresources). ARM compares the fixed segments without case.
_GUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_REGISTRY_ID = re.compile(rf"/subscriptions/(?P<subscription>{_GUID})/resourceGroups/(?P<group>[^/]+)/providers/"
                          r"Microsoft\.ContainerRegistry/registries/(?P<name>[^/]+)", re.IGNORECASE)
_GROUP = re.compile(r"[\w().-]{0,89}[\w()-]")
_REGISTRY_NAME = re.compile(r"[A-Za-z0-9]{5,50}")
# A repository: the OCI distribution spec's <name> ("Throughout this document, <name> MUST match",
# https://github.com/opencontainers/distribution-spec/blob/main/spec.md#pulling-manifests). A digest: sha256 with
# "the encoded portion MUST match /[a-f0-9]{64}/" (OCI image spec, descriptor.md#sha-256).
_REPOSITORY = re.compile(r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*")
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
SHOW_ID = "az acr show --name NAME --query id -o tsv"
SHOW_DIGEST = "az acr repository show --name NAME --image REPOSITORY:TAG --query digest -o tsv"


@dataclass(frozen=True)
class SharedImage:
    framework: str  # the image's row in the frameworks table: the repository it lands in, in the team's registry
    repository: str  # in the platform registry
    digest: str  # sha256:<64 hex>

    @property
    def source(self) -> str:
        """The import's sourceImage: "Specify an image by sha256-based manifest digest ('hello-world@sha256:abc123')"
        (ImportSource.sourceImage, Registries - Import Image)."""
        return f"{self.repository}@{self.digest}"


@dataclass(frozen=True)
class SharedImages:
    registry_id: str  # the platform registry's resource ID, as the stack file writes it
    images: tuple[SharedImage, ...]

    @property
    def registry_name(self) -> str:
        return self.registry_id.rstrip("/").rsplit("/", 1)[-1]

    @property
    def frameworks(self) -> tuple[str, ...]:
        return tuple(image.framework for image in self.images)

    def image(self, framework: str) -> SharedImage | None:
        return next((image for image in self.images if image.framework == framework), None)


def _fail(message: str) -> ConfigError:
    return ConfigError(KEY, message)


def check_registry_id(value: str) -> str:
    """The platform registry's resource ID, or one line saying what to write instead."""
    text = value.strip()
    host = text.split("/", 1)[0].lower()
    if not text.startswith("/"):
        name = host.removesuffix(".azurecr.io") if "." in host else text
        raise _fail(f"registry: {value!r} is not a registry's resource ID; write the platform registry's ID "
                    f"(`{SHOW_ID.replace('NAME', name or 'NAME')}`): ACR import reads another registry with your "
                    "Entra identity only when it is named by resource ID")
    match = _REGISTRY_ID.fullmatch(text.rstrip("/"))
    if not match:
        raise _fail(f"registry: {value!r} is not a container registry's resource ID (/subscriptions/<id>/"
                    "resourceGroups/<group>/providers/Microsoft.ContainerRegistry/registries/<name>; "
                    f"`{SHOW_ID}` prints it)")
    if not _GROUP.fullmatch(match["group"]):
        raise _fail(f"registry: resource group {match['group']!r} is not a resource group name (1-90 letters, digits, "
                    "_ - . ( ), not ending in a period)")
    if not _REGISTRY_NAME.fullmatch(match["name"]):
        raise _fail(f"registry: {match['name']!r} is not a registry name (5-50 letters and digits)")
    return text.rstrip("/")


def check_image(framework: str, value: str) -> SharedImage:
    """`<repository>@sha256:<64 hex>` in the platform registry, or one line saying what to write instead."""
    text = value.strip()
    repository, at, digest = text.partition("@")
    first = repository.split("/", 1)[0]
    if "/" in repository and ("." in first or ":" in first):
        raise _fail(f"{framework}: {value!r} names a registry host; write the repository in the platform registry "
                    f"only, as {repository.split('/', 1)[1].rsplit(':', 1)[0]}@sha256:<digest> (the registry is "
                    "`registry`)")
    if not at:
        tag = f" ({repository.rsplit(':', 1)[1]!r} is a tag, which can move)" if ":" in repository else ""
        raise _fail(f"{framework}: {value!r} is not pinned by digest{tag}; write <repository>@sha256:<64 hex> "
                    f"(`{SHOW_DIGEST}` prints the digest)")
    if ":" in repository:
        raise _fail(f"{framework}: {value!r} has both a tag and a digest; write <repository>@sha256:<64 hex>, the "
                    "digest alone pins the image")
    if not _REPOSITORY.fullmatch(repository):
        raise _fail(f"{framework}: {repository!r} is not a repository name (lowercase letters and digits, joined by "
                    "one . or _, __, or dashes, path parts separated by /)")
    if not _DIGEST.fullmatch(digest):
        raise _fail(f"{framework}: {digest!r} is not a sha256 digest (sha256: and 64 lowercase hex digits; "
                    f"`{SHOW_DIGEST}` prints it)")
    return SharedImage(framework, repository, digest)


def parse(entries: Iterable[tuple[str, str]], frameworks: tuple[str, ...]) -> SharedImages | None:
    """The key's value (name -> text pairs, as the config's `object` type gives them) for a stack that builds or
    imports `frameworks`; None when empty (every image is built here)."""
    entries = tuple(entries)
    if not entries:
        return None
    names = [REGISTRY_ENTRY, *IMAGES]
    for name, _ in entries:
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise _fail(f"unknown entry {name!r}; {hint}it takes {', '.join(names)}")
    values = dict(entries)
    if REGISTRY_ENTRY not in values:
        raise _fail(f"names images but no registry; add registry: <the platform registry's resource ID> (`{SHOW_ID}`)")
    registry_id = check_registry_id(values[REGISTRY_ENTRY])
    images = tuple(check_image(name, values[name]) for name in IMAGES if name in values)
    if not images:
        raise _fail(f"names a registry but no image; add at least one of {', '.join(IMAGES)} "
                    "(<repository>@sha256:<digest>), or remove sharedImages to build every image here")
    for image in images:
        if image.framework not in frameworks:
            raise _fail(f"{image.framework}: frameworks {list(frameworks)} does not list it, so no job runs it; "
                        f"remove it here or add it to frameworks")
    return SharedImages(registry_id, images)


def flow_text(shared: SharedImages, frameworks: tuple[str, ...]) -> str:
    """The key's value as one line of YAML flow text (what `new-team` writes), for the images `frameworks` uses."""
    kept = [image for image in shared.images if image.framework in frameworks]
    # Quoted (JSON strings are YAML double-quoted scalars): a plain scalar with ':' inside flow braces is read
    # differently by YAML 1.1 and 1.2 parsers.
    return "{" + ", ".join([f"{REGISTRY_ENTRY}: {json.dumps(shared.registry_id)}",
                            *(f"{image.framework}: {json.dumps(image.source)}" for image in kept)]) + "}"


def built_here(frameworks: tuple[str, ...], shared: SharedImages | None) -> tuple[str, ...]:
    """The images `up` builds with Docker and pushes (the rest are imported)."""
    return tuple(f for f in frameworks if shared is None or shared.image(f) is None)


def summary(frameworks: tuple[str, ...], shared: SharedImages | None) -> str:
    """One cell for `teams`: how many images are imported and how many built."""
    built = built_here(frameworks, shared)
    imported = len(frameworks) - len(built)
    return ", ".join(part for part in (f"{imported} imported" if imported else "",
                                       f"{len(built)} built" if built else "") if part)


# What a registry's images cost: each tier's daily price includes storage, and more bills per GiB a day ("Basic ...
# includes 10 GB of storage ... $0.003/day * 15 = $0.045" for 15 GB more; included storage 10, 100 and 500 GiB:
# https://learn.microsoft.com/azure/container-registry/container-registry-skus). ACR's docs price no import
# operation; a copy from a registry in another region may bill as data transfer between regions (not priced here).
INCLUDED_GIB = {"Basic": 10, "Standard": 100, "Premium": 500}
EXTRA_USD_PER_GIB_DAY = 0.003
# Both training images unpacked in a local Docker engine's data root: ~15 GB (docs/development.md, measured by
# `make test-containers`); a registry holds their compressed layers, so less. Their compressed size is not measured.
BOTH_IMAGES_UNPACKED_GB = 15
# What the identity running the import needs on the source (platform) registry: "Microsoft Entra permissions to read
# from the source registry (Reader role)" (https://learn.microsoft.com/azure/container-registry/container-registry-import-images,
# "Import from an Azure container registry in the same AD tenant"). Not "Container Registry Data Importer and Data
# Reader": its registries/importImage/action at the platform registry's scope would let every team's deployer
# import (write) images into the platform registry.
SOURCE_REGISTRY_ROLE = "Reader"


def plan_lines(frameworks: tuple[str, ...], shared: SharedImages | None, registry_sku: str) -> list[str]:
    """`plan`'s lines on the training images: which are built here and which imported by digest, and what each
    way costs."""
    lines = []
    for framework in frameworks:
        image = shared.image(framework) if shared else None
        if image:
            lines.append(f"  {framework}: imported by digest from the platform registry {shared.registry_name} "
                         f"({image.source}) into this stack's registry during `up`, a server-side copy (ACR import): "
                         "no Docker build, no Docker engine on the deployer")
        else:
            lines.append(f"  {framework}: built here by `up` with a Docker engine on the deployer (images/{framework}."
                         "Dockerfile, a multi-GB CUDA image, once per team) and pushed to this stack's registry")
    lines.append(f"  storage: this stack's registry holds its own copy of each image; {registry_sku} includes "
                 f"{INCLUDED_GIB[registry_sku]} GiB, and each GiB above bills {EXTRA_USD_PER_GIB_DAY} USD a day "
                 f"(both images are about {BOTH_IMAGES_UNPACKED_GB} GB unpacked, less as stored layers)"
                 + ("; an import bills no operation of its own (only data transfer when the platform registry is in "
                    "another region)" if shared else ""))
    if shared:
        lines.append("  a new digest in sharedImages imports it beside the old one (kept, untagged: nothing is "
                     "overwritten) and, on Batch, replaces the pool, whose prefetch list names the image by digest")
    elif len(frameworks) > 0:
        lines.append("  one build for the fleet: set sharedImages (docs/teams.md) to import the platform's images by "
                     "digest instead of building them here")
    return lines


def before_up_line(shared: SharedImages | None) -> str | None:
    """The role the identity running `up` needs on the platform registry, granted outside this stack."""
    if shared is None:
        return None
    return (f"sharedImages: whoever runs `up` needs {SOURCE_REGISTRY_ROLE} on the platform registry {shared.registry_name} "
            f"(`az role assignment create --assignee <object id> --role \"{SOURCE_REGISTRY_ROLE}\" --scope "
            f"{shared.registry_id}`, by someone who may grant it there); on this stack's registry the resource "
            "group's Owner or Contributor already holds the import's actions")


def row_images(frameworks: tuple[str, ...], shared: SharedImages | None) -> dict[str, str]:
    """`teams --json`'s `images`: per image, "built" or where it is imported from (registry name/repository@digest)."""
    return {f: "built" if (image := shared.image(f) if shared else None) is None
            else f"{shared.registry_name}/{image.source}" for f in frameworks}


def fleet_line(images_per_stack: dict[str, dict[str, str]]) -> str:
    """`teams`' line on the fleet's images: which stacks build their own (a Docker build each at `up`) and which
    import the platform's by digest, and from where."""
    importing = sorted(s for s, images in images_per_stack.items() if any(v != "built" for v in images.values()))
    building = sorted(s for s, images in images_per_stack.items() if "built" in images.values())
    sources = sorted({v.split("/", 1)[0] for images in images_per_stack.values() for v in images.values()
                      if v != "built"})
    parts = [f"{len(importing)} stack(s) import the platform's images by digest (from {', '.join(sources)})"
             if importing else "no stack imports shared images (sharedImages, docs/teams.md)",
             f"{len(building)} build their own at `up` ({', '.join(building)})" if building else "none builds its own"]
    return "Images: " + "; ".join(parts)
