"""launch's controller across nodes: MPI where mpirun is installed AND Horovod was built with it, else Gloo. An image
can have Open MPI's mpirun with a Horovod built for Gloo only (the container rehearsal's stand-in,
devtools/rehearsal/containers.py), where `horovodrun --mpi` refuses to start."""
import sys
import types

import pytest

from training.cluster import launch


def fake_horovod(monkeypatch, mpi: bool) -> None:
    """horovod.common.util with mpi_built() answering `mpi` (horovodrun's own check)."""
    util = types.ModuleType("horovod.common.util")
    util.mpi_built = lambda verbose=False: mpi
    for name, module in (("horovod", types.ModuleType("horovod")), ("horovod.common", types.ModuleType("c")),
                         ("horovod.common.util", util)):
        monkeypatch.setitem(sys.modules, name, module)


@pytest.mark.parametrize("mpi, controller", [(False, "--gloo"), (True, "--mpi")])
def test_across_nodes_mpi_only_where_horovod_has_it(monkeypatch, tmp_path, capsys, mpi, controller):
    mpirun = tmp_path / "mpirun"
    mpirun.write_text("#!/bin/sh\nexit 0\n")
    mpirun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    fake_horovod(monkeypatch, mpi)
    assert launch.horovod_has_mpi() is mpi
    assert launch.main(["--hosts", "10.0.0.4:1,10.0.0.5:1", "--ssh-port", "2222", "--dry-run", "--",
                        "--steps", "1", "--output-dir", str(tmp_path / "run")]) == 0
    line = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("launch: 2 ranks"))
    assert f"horovodrun {controller} -np 2 -H 10.0.0.4:1,10.0.0.5:1 -p 2222" in line


def test_without_horovod_there_is_no_mpi(monkeypatch):
    monkeypatch.setitem(sys.modules, "horovod", None)  # import horovod raises ImportError
    assert launch.horovod_has_mpi() is False
