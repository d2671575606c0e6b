"""A real Azurite on 127.0.0.1 for the data-path tests; the CLIs run as real subprocesses."""
import os
import subprocess
import sys
import uuid

import pytest

from infra import REPO_ROOT
from devtools.emulator import Azurite


@pytest.fixture(scope="session")
def azurite():
    with Azurite() as emulator:
        yield emulator


@pytest.fixture
def container(azurite):
    name = f"c{uuid.uuid4().hex[:12]}"
    azurite.create_container(name)
    return name


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "training", *map(str, args)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


def cli_background(*args):
    return subprocess.Popen([sys.executable, "-m", "training", *map(str, args)], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


def make_tree(root, files=50, size=3000, big=0):
    """Files of random bytes in a few folders; `big` adds one file of that many bytes."""
    for i in range(files):
        path = root / f"d{i % 5}" / f"f{i:04d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size + i))
    if big:
        (root / "big.bin").write_bytes(os.urandom(big))
    return root


def tree(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
