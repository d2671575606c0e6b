"""Each rank bound to its GPU's NUMA node from the size's NCCL topology file (training/cluster/binding.py), as the
launcher's dry run shows it for ND H100 v5 and ND A100 v4; pure, plus one real exec of the wrapper on this machine."""
import os
import subprocess
import sys

import pytest

from infra import REPO_ROOT
from training.cluster import binding, launch
from training.errors import UsageError

TOPOLOGY = REPO_ROOT / "images" / "nccl-topology"


def test_nd_h100_v5_binds_gpus_0_to_3_to_numa_0_and_4_to_7_to_numa_1():
    ranks = binding.plan((TOPOLOGY / "ndv5-topo.xml").read_text(), 8)
    assert [gpu.numa for gpu in ranks] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [gpu.bus_id for gpu in ranks] == ["0001:00:00.0", "0002:00:00.0", "0003:00:00.0", "0008:00:00.0",
                                             "0009:00:00.0", "000a:00:00.0", "000b:00:00.0", "000c:00:00.0"]
    assert binding.describe(ranks) == "local rank 0-3 -> NUMA 0 (CPUs 0-47), 4-7 -> NUMA 1 (CPUs 48-95)"


def test_nd_a100_v4_binds_by_the_file_not_by_numa_order():
    """GPUs 0-1 (bus 0001, 0002) hang under NUMA node 1: a `ppr:2:numa` placement would put rank 0 on node 0."""
    ranks = binding.plan((TOPOLOGY / "ndv4-topo.xml").read_text(), 8)
    assert [gpu.numa for gpu in ranks] == [1, 1, 0, 0, 3, 3, 2, 2]
    assert binding.cpu_list(ranks[0].cpus) == "24-47" and binding.cpu_list(ranks[2].cpus) == "0-23"


def test_the_dry_run_for_nd_h100_v5_shows_each_ranks_cpus_before_its_command(monkeypatch, capsys):
    monkeypatch.setenv("NCCL_TOPO_FILE", str(TOPOLOGY / "ndv5-topo.xml"))
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")  # restored after the test
    assert launch.main(["--hosts", "10.0.0.4:8,10.0.0.5:8", "--controller", "mpi", "--dry-run", "--",
                        "--epochs", "90"]) == 0
    err = capsys.readouterr().err
    assert "launch: binding from ndv5-topo.xml: local rank 0-3 -> NUMA 0 (CPUs 0-47), 4-7 -> NUMA 1 (CPUs 48-95)" in err
    assert "horovodrun --mpi -np 16 -H 10.0.0.4:8,10.0.0.5:8 " in err
    assert err.rstrip().endswith(f" {sys.executable} -m training.cluster.binding --cpus 0-47/0-47/0-47/0-47/48-95/48-95/"
                                 f"48-95/48-95 -- {sys.executable} -m training train --epochs 90")
    assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # CUDA's GPU i is the file's i-th by bus id


def test_no_topology_file_here_runs_unbound_and_says_so(tmp_path):
    assert launch.numa_binding("", 8, "python")[0] == []
    words, line = launch.numa_binding("/opt/microsoft/ndv5-topo.xml", 8, "python", exists=lambda path: False)
    assert words == [] and line == "binding: none (/opt/microsoft/ndv5-topo.xml is not on this node)"
    with pytest.raises(UsageError, match="has 8 GPU"):
        launch.numa_binding(str(TOPOLOGY / "ndv5-topo.xml"), 16, "python")
    bad = tmp_path / "topo.xml"
    bad.write_text("<system><cpu")
    with pytest.raises(UsageError, match=f"--topology {bad}"):
        launch.numa_binding(str(bad), 2, "python")


def test_cpu_lists_and_masks():
    assert binding.cpus_of_mask("ffffff00,00000000,00000000") == tuple(range(72, 96))
    assert binding.cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert binding.parse_cpu_list("0-2,5,7-8") == (0, 1, 2, 5, 7, 8)
    assert binding.chosen([(0, 1), (2, 3)], 1, {1, 3}) == (3,)
    assert binding.local_rank({"OMPI_COMM_WORLD_LOCAL_RANK": "5"}) == 5
    assert binding.local_rank({"HOROVOD_LOCAL_RANK": "2"}) == 2


def test_the_wrapper_binds_the_rank_and_execs_its_command():
    """A real exec on this machine: local rank 1 gets the second list, intersected with what this process may use."""
    allowed = sorted(os.sched_getaffinity(0))
    lists = f"{allowed[0]}/{binding.cpu_list(allowed)}"
    ran = subprocess.run([sys.executable, "-m", "training.cluster.binding", "--cpus", lists, "--", sys.executable,
                          "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                         env={**os.environ, "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, capture_output=True, text=True,
                         cwd=REPO_ROOT, timeout=60)
    assert ran.returncode == 0 and ran.stdout.strip() == str([allowed[0]]), ran.stderr
    outside = subprocess.run([sys.executable, "-m", "training.cluster.binding", "--cpus", "4096", "--", "true"],
                             env={**os.environ, "HOROVOD_LOCAL_RANK": "0"}, capture_output=True, text=True,
                             cwd=REPO_ROOT, timeout=60)
    assert outside.returncode == 0 and "none of CPUs 4096 is allowed here" in outside.stderr
