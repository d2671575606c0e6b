"""A real Docker engine (devtools/docker_engine.py: Debian's docker.io, unpacked) and the job's containers on it.
Minutes, not seconds (the stand-in base is made once, then cached): `make test-containers`, not `make test`."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from devtools import docker_engine

UNAVAILABLE = docker_engine.unavailable()
pytestmark = pytest.mark.skipif(bool(UNAVAILABLE), reason=UNAVAILABLE or "-")
REPO_ROOT = Path(__file__).resolve().parents[2]


def leftovers(folder: Path) -> list[str]:
    """What of an engine is still here: its folder, mounts under it, processes naming it."""
    found = [str(folder)] if folder.exists() else []
    found += docker_engine._mounts_under(folder)
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(folder).encode() in (proc / "cmdline").read_bytes():
                    found.append(f"pid {proc.name}")
            except OSError:
                pass
    return found


@pytest.fixture(scope="module")
def engine():
    with docker_engine.running() as started:
        docker_engine.base_image(started)
        yield started


def test_a_container_runs_on_the_hosts_network_and_ipc(engine):
    ran = engine.docker("run", "--rm", "--network", "host", "--ipc=host", docker_engine.BASE_IMAGE,
                        "sh", "-c", "cat /etc/debian_version && readlink /proc/1/ns/net", timeout=120)
    assert ran.stdout.splitlines()[0].startswith("12."), ran.stdout
    # --network host: the container's network namespace is this machine's own.
    assert ran.stdout.splitlines()[1] == os.readlink("/proc/self/ns/net"), ran.stdout


def test_the_engine_leaves_nothing_behind():
    with docker_engine.running() as started:
        started.docker("run", "-d", "--network", "none", docker_engine.base_image(started), "sleep", "600")
        folder = started.folder
        assert leftovers(folder)
    assert leftovers(folder) == []  # the running container, its shim, mounts and folders: all gone


def test_sigterm_stops_the_engine_and_removes_its_folders():
    script = ("import sys, time\nfrom devtools import docker_engine\n"
              "with docker_engine.running() as e:\n    print(e.folder, flush=True)\n    time.sleep(600)\n")
    process = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    folder = Path(process.stdout.readline().strip())
    assert folder.is_dir() and (folder / "docker.sock").exists()
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 128 + signal.SIGTERM
    assert leftovers(folder) == []
