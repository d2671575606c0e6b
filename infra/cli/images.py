"""`python -m infra shared-images --registry ID --image FRAMEWORK=REPOSITORY@DIGEST ... [--write STACK ...]`: the
`sharedImages` value for the platform's images (checked as `plan` checks it), printed for the stack files, and with
`--write` set in the named stack files (each keeps only the images its `frameworks` run), all or none: the files
are written only once every one of them, as rewritten, is what `plan` accepts. The platform's image build
(.github/workflows/platform-images.yml) prints it after pushing; a pull request with the written files then moves
those stacks to the new build (docs/teams.md, "Moving the fleet to a new build")."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from infra import REPO_ROOT
from infra.core.config import stack as config, shared_images
from infra.core.config.stack import PROJECT
from infra.core.config.schema import IMAGES, ConfigError

VERB = "shared-images"


def add_parser(commands) -> None:
    verb = commands.add_parser(
        VERB, help="the sharedImages value for the platform's images by digest, and --write it into stack files "
                   "(offline)", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verb.add_argument("--registry", metavar="ID", required=True,
                      help=f"the platform registry's resource ID (`{shared_images.SHOW_ID}`)")
    verb.add_argument("--image", metavar="FRAMEWORK=REPOSITORY@DIGEST", action="append", required=True,
                      help=f"an image by digest, once per image ({', '.join(IMAGES)})")
    verb.add_argument("--write", metavar="STACK", action="append", default=[],
                      help="set sharedImages in Pulumi.STACK.yaml (repeat for more stacks)")
    verb.add_argument("--project-dir", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    verb.set_defaults(run=command)


def parsed(registry: str, images: list[str]) -> shared_images.SharedImages:
    """The flags as sharedImages, checked as the stack key is (any framework of the table)."""
    pairs = []
    for item in images:
        framework, equals, value = item.partition("=")
        if not equals:
            raise ConfigError("--image", f"{item!r} is not FRAMEWORK=REPOSITORY@DIGEST (e.g. "
                                         "pytorch=dltrain/pytorch@sha256:<64 hex>)")
        pairs.append((framework.strip(), value.strip()))
    if len({f for f, _ in pairs}) != len(pairs):
        raise ConfigError("--image", "names a framework twice")
    return shared_images.parse(((shared_images.REGISTRY_ENTRY, registry), *pairs), IMAGES)


def written(stack: str, root: Path, shared: shared_images.SharedImages, project) -> tuple[str, str]:
    """Pulumi.STACK.yaml's text with sharedImages set for its frameworks, checked as `plan` reads it, and what its
    images were before; or ConfigError naming the stack, nothing written."""
    from infra.cli.new_team import rewrite_stack_file

    try:
        before = config.from_stack_file(stack, root, project)
    except ConfigError as err:
        raise ConfigError("--write", f"Pulumi.{stack}.yaml: {err}") from None
    frameworks = before.registry.frameworks
    if not any(shared.image(f) for f in frameworks):
        raise ConfigError("--write", f"{stack} runs {', '.join(frameworks)}, none of the images given; leave it out")
    text = (root / f"Pulumi.{stack}.yaml").read_text()
    header = "\n".join(line for line in text.splitlines()[:next(
        (n for n, line in enumerate(text.splitlines()) if line.strip() and not line.startswith("#")), 0)])
    new = rewrite_stack_file(text, {shared_images.KEY: shared_images.flow_text(shared, frameworks)}, set(), header)
    want = shared_images.SharedImages(shared.registry_id, tuple(i for i in shared.images if i.framework in frameworks))
    with tempfile.TemporaryDirectory() as scratch:
        Path(scratch, f"Pulumi.{stack}.yaml").write_text(new)
        try:
            got = config.from_stack_file(stack, Path(scratch), project).registry.shared_images
        except ConfigError as err:
            raise ConfigError("--write", f"Pulumi.{stack}.yaml as rewritten is refused ({err}); nothing written") \
                from None
    if got != want:
        raise ConfigError("--write", f"Pulumi.{stack}.yaml writes sharedImages in a form this cannot rewrite; write "
                                     "it on one line and run again (nothing written)")
    was = ", ".join(f"{f} {source}" for f, source in
                    shared_images.row_images(frameworks, before.registry.shared_images).items())
    return new, was


def command(args: argparse.Namespace) -> int:
    try:
        shared = parsed(args.registry, args.image)
        project = config.load_project(args.project_dir)
        texts = {stack: written(stack, args.project_dir, shared, project) for stack in dict.fromkeys(args.write)}
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{PROJECT}:{shared_images.KEY}: {shared_images.flow_text(shared, IMAGES)}")
    for stack, (text, was) in texts.items():
        (args.project_dir / f"Pulumi.{stack}.yaml").write_text(text)
        print(f"wrote sharedImages in Pulumi.{stack}.yaml (was: {was})")
    return 0
