"""The NFS server's staging unit runs in a root of its own: the VM's /opt/dltrain and /data are the rehearsal's
folders there, and nothing appears on this machine while it runs (two rehearsals at once used to meet at the
mount points the unit once made here, and one rehearsal's end removed the other's)."""
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from devtools.rehearsal.nfs_server import STAGER_VENV, run_in_vm_root
from infra.backends.batch import nfs_user_data

WHY_NOT = ("needs root and unshare (a private mount namespace)" if os.geteuid() != 0 or not shutil.which("unshare")
           else "")
pytestmark = pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or "-")


def listing(folder: str) -> list[str] | None:
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else None


def test_the_unit_sees_the_vms_paths_and_this_machine_sees_nothing(tmp_path):
    opt, export, go = tmp_path / "vm-opt", tmp_path / "export", tmp_path / "go"
    (opt / "venv").mkdir(parents=True)
    export.mkdir()
    program = tmp_path / "unit.sh"
    program.write_text(f"""#!/bin/bash
set -e
for _ in $(seq 300); do [ -e {go} ] && break; sleep 0.1; done
echo staged > {nfs_user_data.EXPORT_PATH}/marker
echo written > /opt/dltrain/marker
/opt/dltrain/venv/bin/python -c 'import azure.storage.blob, sys; print(sys.prefix)'
""")
    program.chmod(0o755)
    before = {folder: listing(folder) for folder in ("/", "/opt", nfs_user_data.EXPORT_PATH)}
    result = {}
    unit = threading.Thread(target=lambda: result.update(done=run_in_vm_root(
        program, opt, export, {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})))  # systemd's
    unit.start()
    try:
        time.sleep(1.0)  # the unit is in its own root by now, waiting for `go`
        during = {folder: listing(folder) for folder in before}
    finally:
        go.touch()
        unit.join(60)
    done = result["done"]
    assert done.returncode == 0, done.stderr
    assert during == before  # no mount point made on this machine for the VM's paths
    assert {folder: listing(folder) for folder in before} == before
    assert (export / "marker").read_text() == "staged\n" and (opt / "marker").read_text() == "written\n"
    assert done.stdout.strip() == "/opt/dltrain/venv"  # the stager's venv at the VM's path
    assert STAGER_VENV.is_dir() and not (STAGER_VENV / "marker").exists()
