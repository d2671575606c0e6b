"""The start task's local-volume script (infra/backends/batch/local_volume.sh): ShellCheck and bash -n always; then,
where this machine allows (root, losetup), the script itself against loop devices in a temp folder, its drive
discovery pointed at them by LOCAL_VOLUME_TEST_DRIVES: one drive formatted and mounted, a second run changing
nothing, a "reboot" (unmounted) mounting the same filesystem with its files, a drive in use left alone, no drive
leaving a folder; RAID0 over several drives created, then assembled (not created again) after the array is
stopped, where the kernel has md and mdadm is found. Every loop device, mount and array is undone, also when a
test fails."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra import REPO_ROOT

LOCAL_VOLUME_SCRIPT = REPO_ROOT / "infra" / "backends" / "batch" / "local_volume.sh"  # the start task carries its text

SHELLCHECK = Path(sys.executable).parent / "shellcheck"
DEBS = REPO_ROOT / ".cache" / "debs" / "root"  # Debian's mdadm and xfsprogs, when `make setup` unpacked them there
TOOL_PATH = os.pathsep.join([str(DEBS / "sbin"), str(DEBS / "usr" / "sbin"), os.environ.get("PATH", "")])
LIBRARY_PATH = os.pathsep.join(p for p in (str(DEBS / "usr" / "lib" / "x86_64-linux-gnu"),
                                           os.environ.get("LD_LIBRARY_PATH", "")) if p)


def tool(name):
    return shutil.which(name, path=TOOL_PATH)


def test_the_script_passes_bash_and_shellcheck():
    assert subprocess.run(["bash", "-n", str(LOCAL_VOLUME_SCRIPT)], capture_output=True).returncode == 0
    result = subprocess.run([str(SHELLCHECK), str(LOCAL_VOLUME_SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def _cannot_loop() -> str:
    if os.geteuid() != 0:
        return "not root"
    if not shutil.which("losetup") or not Path("/dev/loop-control").exists():
        return "no losetup or /dev/loop-control"
    return ""


needs_loops = pytest.mark.skipif(bool(_cannot_loop()), reason=f"loop devices not played here: {_cannot_loop()}")


class Node:
    """Loop devices (files in a temp folder) standing for a VM's local drives; undoes every loop, mount and array."""

    def __init__(self, root: Path):
        self.root, self.loops, self.mounts = root, [], []

    def drives(self, count: int, size_mb: int = 320):  # XFS needs 300 MB at least
        made = []
        for _ in range(count):
            image = self.root / f"drive{len(self.loops)}.img"
            with open(image, "wb") as f:
                f.truncate(size_mb * 1024 * 1024)
            loop = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True,
                                  check=True).stdout.strip()
            self.loops.append(loop)
            made.append(loop)
        return made

    def run(self, mount_point: Path, drives):
        self.mounts.append(mount_point)
        environment = {**os.environ, "PATH": TOOL_PATH, "LOCAL_VOLUME_TEST_DRIVES": " ".join(drives),
                       "LD_LIBRARY_PATH": LIBRARY_PATH}
        return subprocess.run(["bash", str(LOCAL_VOLUME_SCRIPT), str(mount_point)], capture_output=True, text=True,
                              env=environment, timeout=120)

    def mounted(self, path: Path) -> str:
        found = subprocess.run(["findmnt", "--noheadings", "--output", "SOURCE,FSTYPE", "--mountpoint", str(path)],
                               capture_output=True, text=True)
        return found.stdout.strip()

    def unmount(self, path: Path) -> None:
        subprocess.run(["umount", str(path)], capture_output=True)

    def arrays(self):
        """The md devices holding our loops."""
        return sorted({f"/dev/{holder.name}" for loop in self.loops
                       for holder in Path(f"/sys/class/block/{Path(loop).name}/holders").glob("md*")})

    def close(self) -> None:
        for path in reversed(self.mounts):
            while self.mounted(path):
                self.unmount(path)
        mdadm = tool("mdadm")
        for array in self.arrays():
            if mdadm:
                subprocess.run([mdadm, "--stop", array], capture_output=True,
                               env={**os.environ, "LD_LIBRARY_PATH": LIBRARY_PATH})
        for loop in self.loops:
            subprocess.run(["losetup", "--detach", loop], capture_output=True)


@pytest.fixture
def node(tmp_path):
    made = Node(tmp_path)
    try:
        yield made
    finally:
        made.close()


@needs_loops
def test_one_drive_is_formatted_and_mounted_once_kept_after_a_reboot_and_a_second_run_changes_nothing(node, tmp_path):
    (drive,) = node.drives(1)
    fstype = "xfs" if tool("mkfs.xfs") else "ext4"
    mount_point = tmp_path / "shared" / "local-data"
    first = node.run(mount_point, [drive])
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("\n") == 1
    assert f"1 NVMe drive ({Path(drive).name}), formatted {fstype}, mounted: 33" in first.stdout
    assert node.mounted(mount_point) == f"{drive} {fstype}"
    (mount_point / "datasets").mkdir()
    (mount_point / "datasets" / "kept").write_text("staged before the reboot")

    again = node.run(mount_point, [drive])
    assert again.returncode == 0 and "mounted already" in again.stdout and "nothing changed" in again.stdout

    node.unmount(mount_point)  # a reboot: the temp disk keeps its filesystem, nothing is mounted
    after = node.run(mount_point, [drive])
    assert after.returncode == 0, after.stderr
    assert f"its {fstype} kept, mounted" in after.stdout
    assert (mount_point / "datasets" / "kept").read_text() == "staged before the reboot"


@needs_loops
def test_a_drive_in_use_or_with_a_foreign_filesystem_is_left_alone_and_no_drive_leaves_a_folder(node, tmp_path):
    used, foreign = node.drives(2)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run(["mkfs.ext4", "-q", "-L", "other", used], check=True)
    subprocess.run(["mount", used, str(elsewhere)], check=True)
    node.mounts.append(elsewhere)
    mount_point = tmp_path / "local-data"
    result = node.run(mount_point, [used])
    assert result.returncode == 0, result.stderr
    assert "no local NVMe drive" in result.stdout and mount_point.is_dir() and not node.mounted(mount_point)

    none = node.run(tmp_path / "folder", [])
    assert none.returncode == 0 and f"{tmp_path / 'folder'} is a folder on" in none.stdout

    subprocess.run(["mkfs.ext4", "-q", "-L", "somebody", foreign], check=True)
    refused = node.run(tmp_path / "other", [foreign])
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1
    assert "labelled 'somebody'" in refused.stderr and "left alone" in refused.stderr
    assert not node.mounted(tmp_path / "other")


@pytest.mark.skipif(bool(_cannot_loop()) or bool(tool("mdadm")), reason="needs loop devices and no mdadm")
def test_several_drives_without_mdadm_stop_in_one_line(node, tmp_path):
    result = node.run(tmp_path / "local-data", node.drives(2))
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "no mdadm to stripe them" in result.stderr
    assert not node.mounted(tmp_path / "local-data")


def _cannot_raid() -> str:
    if _cannot_loop():
        return _cannot_loop()
    if not Path("/proc/mdstat").exists():
        return "the kernel has no md driver (/proc/mdstat is missing)"
    if not tool("mdadm"):
        return "no mdadm (Debian's mdadm unpacked into .cache/debs, or on PATH)"
    return ""


@pytest.mark.skipif(bool(_cannot_raid()), reason=f"RAID0 not played here: {_cannot_raid()}")
def test_several_drives_are_striped_once_and_assembled_not_recreated_after_a_reboot(node, tmp_path):
    drives = node.drives(3)
    mount_point = tmp_path / "local-data"
    first = node.run(mount_point, drives)
    assert first.returncode == 0, first.stderr
    assert "RAID0 of 3 NVMe drives" in first.stdout and ", created, formatted" in first.stdout
    (mount_point / "kept").write_text("striped")
    node.unmount(mount_point)
    mdadm = tool("mdadm")
    for array in node.arrays():  # a reboot: the array is stopped, its superblocks stay on the drives
        subprocess.run([mdadm, "--stop", array], check=True, capture_output=True,
                       env={**os.environ, "LD_LIBRARY_PATH": LIBRARY_PATH})
    after = node.run(mount_point, drives)
    assert after.returncode == 0, after.stderr
    assert ", assembled, its " in after.stdout and (mount_point / "kept").read_text() == "striped"
