"""What a rehearsal found (devtools/rehearsal/run.py): the job's result, the report printed at its end, and what the
rehearsal does not play, said in that report every time."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from infra import REPO_ROOT
from training import frameworks

# Without --container; with it, the report says what ran in the image instead (devtools/rehearsal/containers.py).
CONTAINER_NOT_REHEARSED = (
    "the container: commands run in the local training environment with the image's ENV and users, not in the image "
    "(`rehearse --container`, as root, runs them in the image built on a local stand-in base: make test-containers)")
IMAGE_NOT_REHEARSED = ("the image as Azure gets it: its CUDA base, NCCL, and Horovod's NCCL operations (the stand-in "
                       "builds it with MPI and Gloo for CPU: its differences are listed under `container`)")
# With --container, the image's Horovod has MPI and launch runs horovodrun --mpi (its report says so).
MPIRUN_NOT_REHEARSED = ("mpirun: across nodes Horovod starts the remote ranks over the job's SSH with its Gloo "
                        "controller here (the image has Open MPI; `rehearse --container` runs horovodrun --mpi)")
NOT_REHEARSED = (
    CONTAINER_NOT_REHEARSED,
    "GPUs, NCCL and InfiniBand: ranks talk over Gloo/TCP on CPU; each node runs --processes-per-node ranks, "
    "not one per GPU of the size",
    MPIRUN_NOT_REHEARSED,
    "the NFS VM's disks and kernel: its setup script (mdadm RAID, XFS, fstab, nfs-kernel-server) is checked by "
    "bash -n and ShellCheck in the tests, not run; its user data is read by cloud-init's own code and, with dataTier "
    "nfs, its staging unit runs here, with a ready venv instead of a pip install from PyPI",
    "the nodes' local NVMe volume (dataTier node-local): each node's start task runs local_volume.sh, which finds no "
    "drive here (LOCAL_VOLUME_TEST_DRIVES empty), so the volume is a folder in the node's own Batch tree standing in "
    "for its striped NVMe drives (the mdadm/XFS path runs on loop devices in tests/infra/backends/batch/"
    "test_local_volume.py); node-stage reaches `data` at the storage front's local URL, put in the coordination "
    "command in place of the declared https://<account>.blob.core.windows.net/data, which a node here cannot resolve",
    "Azure AD itself: tokens come from a local managed identity endpoint (App Service protocol, not IMDS), and "
    "storage honours each identity's role assignments as a SAS with exactly their permissions",
    "autoscale, node allocation and the registry pull: the pool is the N local nodes, started once",
    "https: Azurite serves http, so the people's SAS allow http too (the program asks for https only)",
    "Entra groups: the team member signs in with a token of the teamMembers group itself (Azure AD issues the user's, "
    "carrying the group's roles), and a role assignment's condition (members may write only the restage request "
    "into `status`) is not honoured: their SAS allows the whole role",
    "the NFS server's timer during --stay: it elapses when a restage request waits, not every minute (its unit's "
    "own relisting of `data` every few minutes is not played)",
)


@dataclass
class Rehearsal:
    job: str
    framework: str
    placement: list[str]
    world_size: int
    img_per_sec: float
    hosts: list[str]
    uploaded: list[str]
    exit_code: int
    retries: int
    downloaded: Path
    failure: dict | None = None
    interconnect_gbps: float | None = None  # the job's interconnect check (multi-node), from summary.json
    efficiency: dict | None = None  # summary.json's efficiency view (training/efficiency.py)
    container: list[str] | None = None  # with --container: what ran in the image, what the stand-in leaves out
    scarce: list[str] | None = None  # with --scarce: the partial allocation, one line a step (scarce.py)
    data: list[str] | None = None  # dataTier node-local: where each rank read its data, node-stage's checks (node_data.py)
    transport: str = "Gloo"  # what carried the ranks' all-reduces (collectives_transport)


def last_launch_line(stderr: str) -> str:
    """The application command's last `launch: N ranks on M host(s): ...` line (training/cluster/launch.py), or ""."""
    lines = [line for line in stderr.splitlines() if line.startswith("launch: ") and " ranks on " in line]
    return lines[-1] if lines else ""


def collectives_transport(distribution: str, launch_stderr: str) -> str:
    """What carried the ranks' all-reduces on CPU: Horovod's MPI controller under `horovodrun --mpi` (launch's
    line in the application command's stderr), TensorFlow's own for --dist native, else Gloo (Horovod's Gloo
    launcher; DDP's CPU backend, also when mpirun started its ranks)."""
    if distribution == "native":  # MultiWorkerMirroredStrategy: TensorFlow's own collectives over gRPC
        return "TensorFlow collectives"
    if distribution == "horovod" and " --mpi " in f"{last_launch_line(launch_stderr)} ":
        return "MPI over TCP"
    return "Gloo"


def report(result: Rehearsal) -> str:
    lines = [f"\nRehearsal report ({result.job})",
             f"  task exit code {result.exit_code}, retried {result.retries} time(s)",
             f"  ranks: world size {result.world_size} on hosts {', '.join(result.hosts) or '?'} "
             f"(rank order = host order)",
             f"  where: {'; '.join(result.placement) or '?'}",
             *(["  data (dataTier node-local):", *(f"    - {line}" for line in result.data)] if result.data else []),
             f"  throughput: {result.img_per_sec} img/s (CPU, {result.transport})",
             f"  efficiency: {efficiency_line(result.efficiency)}",
             "  interconnect check: " + (f"all-reduce bus bandwidth {result.interconnect_gbps} GB/s (CPU, {result.transport}; "
                                         "no floor: rehearsal)" if result.interconnect_gbps is not None
                                         else "not run (one node, or --dist native: not checked yet)"),
             f"  uploaded to `outputs`: {len(result.uploaded)} blobs, e.g. "
             + ", ".join(sorted(n for n in result.uploaded if n.endswith(("summary.json", "model.onnx", "stdout.txt")))),
             f"  downloaded with `infra download` to {result.downloaded}",
             "  not rehearsed:"]
    if result.container:
        lines[-1:-1] = ["  container:", *(f"    - {item}" for item in result.container)]
    if result.scarce:  # the job before this one: it waited on a pool short of nodes (devtools/rehearsal/scarce.py)
        lines[-1:-1] = ["  scarce capacity:", *(f"    - {item}" for item in result.scarce)]
    lines += [f"    - {item}" for item in
              ((IMAGE_NOT_REHEARSED, *(item for item in NOT_REHEARSED[1:] if item != MPIRUN_NOT_REHEARSED))
               if result.container else NOT_REHEARSED)]
    return "\n".join(lines)


def efficiency_line(view: dict | None) -> str:
    """img/s per worker against the size's expectation (on CPU: unknown, and why) and what bound the run."""
    if not view:
        return "not in summary.json"
    shares = ", ".join(f"{name} {share:.0%}" if share is not None else f"{name} in compute"
                       for name, share in view["time_shares"].items())
    expected = (f"{view['of_expected']} of {view['expected_img_per_sec_per_worker']:g} expected"
                if view["of_expected"] is not None else f"expected unknown: {view['expected_basis']}")
    return f"{view['img_per_sec_per_worker']} img/s per worker ({expected}), {view['bound']}" + \
        (f" ({shares})" if shares else "")


def check_model(path: Path, framework: str) -> str:
    """Run the downloaded model.onnx in onnxruntime (in the framework's environment, which has it)."""

    python = REPO_ROOT / frameworks.get(framework).image.venv / "bin" / "python"
    code = ("import sys, numpy as np, onnxruntime as ort; s = ort.InferenceSession(sys.argv[1]); i = s.get_inputs()[0]; "
            "shape = [2 if not isinstance(d, int) else d for d in i.shape]; "
            "print(s.run(None, {i.name: np.zeros(shape, np.float32)})[0].shape)")
    result = subprocess.run([str(python), "-c", code, str(path)], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else f"failed: {result.stderr.strip()[-300:]}"
