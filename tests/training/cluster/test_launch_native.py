"""--dist native on Batch: `python -m training launch` (the application command, on the primary) builds each
node's TF_CONFIG from AZ_BATCH_HOST_LIST and starts one worker per node: pure functions, no process started."""
import json
import shlex

import pytest

from training.cluster.launch import (TF_PORT, dist_of, hosts_from_batch, main, native_workers, tf_config,
                                     workers_on_this_host)
from training.errors import UsageError

FLAGS = ["--framework", "keras", "--dist", "native", "--data", "/mnt/data/imagenet", "--output-dir", "/mnt/run's"]


def test_each_node_gets_the_same_cluster_and_its_own_index_from_the_batch_host_list():
    hosts = hosts_from_batch({"AZ_BATCH_HOST_LIST": "10.0.0.4,10.0.0.5,10.0.0.6"}, slots=8)
    plan = native_workers(hosts, "10.0.0.4", FLAGS, python="/usr/bin/python3", cwd="/task dir",
                          env={"NCCL_DEBUG": "WARN", "AZURE_CLIENT_ID": "x", "TF_CONFIG": "stale"})
    configs = [json.loads(config) for _, config in plan]
    assert [c["cluster"]["worker"] for c in configs] == [[f"10.0.0.{i}:{TF_PORT}" for i in (4, 5, 6)]] * 3
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(3)]
    # The primary's worker runs here; the others through the job's SSH, every word quoted.
    assert plan[0][0] == ["/usr/bin/python3", "-m", "training", "train", *FLAGS]
    ssh, host, remote = plan[1][0]
    assert (ssh, host) == ("ssh", "10.0.0.5")
    cd, _, command = remote.partition(" && exec ")
    assert shlex.split(cd) == ["cd", "/task dir"]
    assert shlex.split(command) == ["env", "NCCL_DEBUG=WARN", f"TF_CONFIG={plan[1][1]}", "/usr/bin/python3", "-m",
                                    "training", "train", *FLAGS]  # no AZURE_ variable, no stale TF_CONFIG


def test_dist_and_workers_per_host():
    assert [dist_of(f) for f in (FLAGS, ["--dist=native"], ["--steps", "3"])] == ["native", "native", "horovod"]
    assert workers_on_this_host("") == 1
    assert workers_on_this_host(tf_config(["localhost:1", "localhost:2", "10.0.0.5:3"], 0)) == 2
    with pytest.raises(UsageError, match="worker index 2 is not one of the 2 worker"):
        tf_config(["a:1", "b:1"], 2)


def test_launch_dry_run_prints_one_worker_per_node(monkeypatch, capsys):
    monkeypatch.setenv("AZ_BATCH_HOST_LIST", "10.0.0.4,10.0.0.5")
    monkeypatch.setenv("AZ_BATCH_MASTER_NODE", "10.0.0.4:6000")
    assert main(["--slots", "8", "--ssh-port", "2222", "--dry-run", "--", *FLAGS]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "launch: --dist native, one worker per node -H 10.0.0.4:1,10.0.0.5:1"
    assert len(lines) == 3 and '"index": 0' in lines[1] and "ssh 10.0.0.5" in lines[2]
