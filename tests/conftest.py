"""The whole suite: the project root is on sys.path (pytest.ini), and each tests folder runs only where what it
tests can be imported (a bare `pytest` in any environment collects without errors and says what it left out)."""
import os
import resource
import tempfile
from importlib.util import find_spec
from pathlib import Path

import pytest

from training import frameworks

# tests folder or file (tests/ mirrors the code's folders) -> (module it needs, the environment that has it)
NEEDS = {
    "tests/infra": ("pulumi", ".venv"),
    "tests/images": ("pulumi", ".venv"),
    "tests/devtools/rehearsal": ("pulumi", ".venv"),
    "tests/training/data": ("azure.storage.blob", ".venv"),
    "tests/training/cluster": ("pulumi", ".venv"),  # its sshd runs on tests/infra/backends/batch's nodes
    "tests/training/test_framework_table.py": ("yaml", "any"),
    # tests/training/IMAGE: the loops of each image of the frameworks table (training/IMAGE), in its environment
    **{f"tests/training/{image.name}": (image.package, image.venv) for image in frameworks.images()},
}
def _missing(module: str) -> bool:
    try:
        return find_spec(module) is None
    except ModuleNotFoundError:
        return True


ROOT = Path(__file__).resolve().parents[1]
LEFT_OUT = {folder: f"needs {module}, which this environment lacks (run it with {env}/bin/python -m pytest)"
            for folder, (module, env) in NEEDS.items() if _missing(module)}


_left_out: set[str] = set()


def pytest_ignore_collect(collection_path, config):
    folder = collection_path.relative_to(ROOT).as_posix() if ROOT in collection_path.parents else None
    if folder in LEFT_OUT:
        asked = [Path(config.invocation_params.dir, arg.split("::")[0]).resolve() for arg in config.args]
        if any(collection_path == a or a in collection_path.parents for a in asked):
            _left_out.add(folder)  # asked for, so say why it did not run
        return True
    return None


def pytest_terminal_summary(terminalreporter):
    for folder in sorted(_left_out):
        terminalreporter.write_line(f"SKIPPED {folder}: {LEFT_OUT[folder]}")
    # The suites run at once on a machine's cores (make test), so their wall times depend on each other; the CPU
    # each used is its own share of the work. Waited-for children count (horovodrun's ranks, the nodes' processes);
    # a daemon that detached from its parent (Azurite's node) does not.
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    user, system = own.ru_utime + children.ru_utime, own.ru_stime + children.ru_stime
    terminalreporter.write_line(f"CPU time of this suite: {user + system:.0f} s ({user:.0f} user, {system:.0f} "
                                "system), its processes' included")


@pytest.fixture(autouse=True, scope="session")
def temp_files_stay_in_pytests_folder(tmp_path_factory):
    """Every temp file of the suite and of the processes it starts (multiprocessing's pymp-*, torchrun's
    torchelastic_*, what a killed process leaves) goes under pytest's own temp root, which pytest rotates: the suite
    leaves nothing of its own in the host's /tmp."""
    folder = str(tmp_path_factory.mktemp("tmp"))
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"], tempfile.tempdir = folder, None
    yield
    # Azurite's telemetry spool (Application Insights' files it could not send), which it writes in TMPDIR within
    # seconds unless started with --disableTelemetry: the suite's Azurites must send and leave nothing.
    spooled = sorted(p.name for p in Path(folder).glob("Microsoft-AzureMonitor-*"))
    assert not spooled, f"Azurite's telemetry ran (start it with --disableTelemetry): {spooled} in {folder}"
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before
    tempfile.tempdir = None
