"""`python -m training launch`: the horovodrun command from --hosts or Batch's node list; a real 2-rank run."""
import json

import pytest

from tests.training.pytorch.conftest import TINY, training
from training.errors import UsageError
from training.cluster.launch import Host, build_command, hosts_from_batch, parse_hosts


def test_launch_hosts_localhost_2_runs_a_real_two_rank_job(tmp_path):
    result = training("launch", "--hosts", "localhost:2", "--", "--data", "synthetic", "--steps", "4", *TINY,
                      "--output-dir", str(tmp_path))
    assert "launch: 2 ranks on 1 host(s)" in result.stderr and "--gloo" in result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["world_size"] == 2


def test_batch_nodes_become_mpi_hosts_with_one_rank_per_gpu():
    hosts = hosts_from_batch({"AZ_BATCH_HOST_LIST": ",".join(f"10.0.0.{i}" for i in range(4, 12))}, slots=8)
    command = build_command(hosts, ["--epochs", "1"], python="python", horovodrun="horovodrun", ssh_port=2222,
                            env_names=["NCCL_IB_DISABLE", "UCX_TLS", "HOME", "AZ_BATCH_TASK_DIR"])
    assert command[:5] == ["horovodrun", "--mpi", "-np", "64", "-H"]
    assert command[5] == ",".join(f"10.0.0.{i}:8" for i in range(4, 12))
    assert command[6:10] == ["-p", "2222", "--mpi-args", "-x NCCL_IB_DISABLE -x UCX_TLS"]
    assert command[10:] == ["python", "-m", "training", "train", "--epochs", "1"]
    # the interconnect check before training: the same horovodrun line, another command for every rank
    check = build_command(hosts, ["--output", "O"], python="python", horovodrun="horovodrun", ssh_port=2222,
                          env_names=["NCCL_IB_DISABLE", "UCX_TLS"], command_name="interconnect-check")
    assert check[:10] == command[:10]
    assert check[10:] == ["python", "-m", "training", "interconnect-check", "--output", "O"]


def test_without_mpirun_nodes_use_horovods_gloo_controller_over_the_same_ssh():
    hosts = hosts_from_batch({"AZ_BATCH_HOST_LIST": "10.0.0.4,10.0.0.5"}, slots=1)
    command = build_command(hosts, ["--steps", "3"], python="python", horovodrun="horovodrun", ssh_port=2222,
                            env_names=["NCCL_IB_DISABLE"], has_mpi=False)
    assert command[:8] == ["horovodrun", "--gloo", "-np", "2", "-H", "10.0.0.4:1,10.0.0.5:1", "-p", "2222"]
    assert "--mpi-args" not in command  # Gloo exports the environment to the remote ranks itself


@pytest.mark.parametrize("text,message", [("localhost", "HOST:SLOTS"), ("a:0", "SLOTS >= 1"), (",", "empty"),
                                          ("a:1,a:2", "twice")])
def test_bad_hosts_are_refused(text, message):
    with pytest.raises(UsageError, match=message):
        parse_hosts(text)


def test_without_hosts_or_batch_it_says_what_to_pass(tmp_path):
    result = training("launch", "--", "--steps", "1", check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["error: no hosts: pass --hosts HOST:SLOTS,... or run inside an Azure "
                                                  "Batch multi-instance task (which sets AZ_BATCH_HOST_LIST)"]
    assert parse_hosts("localhost:2") == [Host("localhost", 2)]
