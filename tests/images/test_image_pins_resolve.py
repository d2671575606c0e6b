"""pip's resolution of each training image's pins for the image's own Python and glibc (wheels only, nothing
installed). It asks PyPI (~80 s of CPU, evaluating tens of thousands of index links), and the pins change rarely, so
it runs on its own: `make test-images`, which `.ci/run` runs after `make test` (`make test` leaves this file out)."""
import subprocess
import sys

import pytest

from infra import REPO_ROOT
from tests.images.test_images import IMAGE_PINS, image_python


@pytest.fixture(scope="module")
def resolved(tmp_path_factory):
    """pip's dry-run resolution of every image's pins, all started at once (each waits mostly on PyPI):
    dockerfile -> (its Python version, pip's exit status, pip's stderr)."""
    started = {}
    for dockerfile, requirements in IMAGE_PINS:
        version, glibc = image_python((REPO_ROOT / "images" / dockerfile).read_text())
        platforms = [arg for minor in range(17, glibc + 1) for arg in ("--platform", f"manylinux_2_{minor}_x86_64")]
        target = tmp_path_factory.mktemp("target")
        started[dockerfile] = version, subprocess.Popen(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--disable-pip-version-check",
             "--ignore-installed", "--only-binary=:all:", "--python-version", version, *platforms,
             "--platform", "manylinux2014_x86_64", "--target", str(target),
             "-r", str(REPO_ROOT / requirements), "-r", str(REPO_ROOT / "training/requirements-stage.txt"),
             "-r", str(REPO_ROOT / "training/requirements-azureml.txt")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    results = {}
    for dockerfile, (version, process) in started.items():
        _, stderr = process.communicate(timeout=600)
        results[dockerfile] = version, process.returncode, stderr
    return results


@pytest.mark.parametrize("dockerfile,requirements", IMAGE_PINS)
def test_the_image_pins_resolve_for_the_images_own_python(dockerfile, requirements, resolved):
    """pip resolves (wheels only, no install) what the image installs, for its Python and glibc: a pin with no
    wheel for them (onnxruntime 1.31 for Ubuntu 22.04's Python 3.10) fails here instead of in `pulumi up`."""
    version, returncode, stderr = resolved[dockerfile]
    errors = [line for line in stderr.splitlines() if line.startswith("ERROR")]
    assert returncode == 0, f"{dockerfile} (Python {version}): " + "; ".join(errors)
