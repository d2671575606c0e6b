"""The training frameworks in one table: a row per `--framework` (its training loop, the image it runs in, what
it cannot do), read by name wherever a framework matters: training's flags, refusals and dispatch, the stack's
`frameworks` and `trainingFramework` keys and the registry's images, the rehearsal, the benchmark, the Makefile's
environments and the tests (like torchtitan's train specs: one registration, one lookup by name).

A new framework is one `Framework` row plus its loop module (a `main(cfg) -> int`); one that needs an image of its
own adds an `Image` row, with its Dockerfile (images/<name>.Dockerfile) and requirements files.

Stdlib only, and no loop is imported here: `python -m training --help`, the deployer's `.venv` and the Makefile
(`python3 -m training.frameworks --make`) read the table without torch or TensorFlow installed.
"""
from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from training.errors import UsageError


@dataclass(frozen=True)
class Image:
    """A container image (images/<name>.Dockerfile, repository <name> in the stack's registry) and the local
    environment that trains like it (built by `make setup`; the tests and the rehearsal run in it)."""
    name: str
    requirements: str  # what the image pip-installs (besides the stager's and Azure ML's pins)
    venv: str  # the local environment
    venv_requirements: str  # what it pip-installs: the same pins, a CPU build where the image has a GPU one
    package: str  # the ML package both import: an environment without it is not this image's

    @property
    def dockerfile(self) -> str:
        return f"images/{self.name}.Dockerfile"


@dataclass(frozen=True)
class Framework:
    """One `--framework`. What it accepts is listed; what it refuses, with which words, follows from the lists
    (training/config.py words the refusals, naming the frameworks that do accept the value)."""
    name: str  # --framework, the stack's trainingFramework
    loop: str  # the module whose main(cfg) trains: imported by name, only when training starts
    image: Image
    dist: tuple[str, ...] = ("horovod",)  # --dist values (ddp: PyTorch's DDP under torchrun; native:
    # tf.distribute.MultiWorkerMirroredStrategy, one process per node with TF_CONFIG)
    optimizers: tuple[str, ...] = ("sgd",)  # --optimizer values besides auto
    loaders: tuple[str, ...] = ("pil",)  # --loader values besides auto
    folder_reader: str = ""  # what decodes folder data when --loader does not choose (named when one is refused)
    compiler: str = ""  # the train flag that compiles its step (compile, xla), or none
    no_compiler: str = ""  # why it has none: said when --xla is refused
    # How its step runs uncompiled, as Horovod's synthetic benchmark recipe runs it (horovod/examples/*/
    # *_synthetic_benchmark.py), named by the benchmark's recipe row: eager in PyTorch, a tf.function in TensorFlow.
    uncompiled: str = "eager"
    channels_last: bool = False  # --channels-last applies: it trains NCHW unless told, NHWC by default on a GPU
    starting_weights: bool = False  # --init-from and --pretrained apply: it loads torchvision's ResNet50 weights


TORCH = Image("pytorch", requirements="training/requirements-torch.txt", venv=".venv-torch",
              venv_requirements="training/requirements-torch-venv.txt", package="torch")
TF = Image("tensorflow", requirements="training/requirements-tf-gpu.txt", venv=".venv-tf",
           venv_requirements="training/requirements-tf-venv.txt", package="tensorflow")

FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework("pytorch", "training.pytorch.loop", TORCH, dist=("horovod", "ddp"), optimizers=("sgd", "lars"),
              loaders=("dali", "nvjpeg", "pil"), compiler="compile", channels_last=True,
              starting_weights=True),
    Framework("tensorflow", "training.tensorflow.loop", TF, dist=("horovod", "native"), folder_reader="tf.data",
              compiler="xla", uncompiled="no XLA"),
    # Keras runs in the TensorFlow image; its loop is Model.fit, on the same setup, model, data and export.
    Framework("keras", "training.tensorflow.keras_fit", TF, dist=("horovod", "native"), folder_reader="tf.data",
              no_compiler="Keras fit would compile Horovod's allreduce into the step, which XLA cannot run",
              uncompiled="no XLA"),
)}


def names() -> tuple[str, ...]:
    """Every --framework, in the table's order (the first is the default)."""
    return tuple(FRAMEWORKS)


def get(name: str) -> Framework:
    try:
        return FRAMEWORKS[name]
    except KeyError:
        raise UsageError(f"--framework {name!r} is not one of {', '.join(FRAMEWORKS)}") from None


def images() -> tuple[Image, ...]:
    """Each image once, in the table's order (several frameworks may share one)."""
    return tuple({f.image.name: f.image for f in FRAMEWORKS.values()}.values())


def which(accepts: Callable[[Framework], bool]) -> str:
    """The frameworks that accept something, for a refusal's words: "pytorch", "pytorch, jax"."""
    return ", ".join(f.name for f in FRAMEWORKS.values() if accepts(f))


def _requirement_files(path: str) -> list[str]:
    """`path` and the files it includes with `-r` (relative to it), as the Makefile's prerequisites."""
    found, text = [path], Path(path).read_text()
    for included in re.findall(r"^-r\s+(\S+)", text, re.M):
        found += _requirement_files(str(Path(path).parent / included))
    return found


def make_variables() -> str:
    """The table as make variables, for the Makefile: the frameworks, each one's environment, and each
    environment's requirements (with the files they include) and image (images/build_horovod.sh --framework
    takes the image's name)."""
    envs = {f.image.venv: f.image for f in FRAMEWORKS.values()}
    lines = [f"FRAMEWORKS := {' '.join(FRAMEWORKS)}", f"TRAIN_VENVS := {' '.join(envs)}"]
    lines += [f"VENV_{f.name} := {f.image.venv}" for f in FRAMEWORKS.values()]
    for venv, image in envs.items():
        lines += [f"REQUIREMENTS_{venv} := {image.venv_requirements}",
                  f"REQUIREMENT_FILES_{venv} := {' '.join(_requirement_files(image.venv_requirements))}",
                  f"IMAGE_{venv} := {image.name}"]
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] != ["--make"]:
        sys.exit("usage: python3 -m training.frameworks --make  (the table as make variables, for the Makefile)")
    print(make_variables())
