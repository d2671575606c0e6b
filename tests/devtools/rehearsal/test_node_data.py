"""The rehearsal's report of dataTier node-local (devtools/rehearsal/node_data.py), read from the nodes' own files as
a rehearsal leaves them: no nodes, no Azurite (test_rehearsal.py plays the whole path once)."""
from pathlib import Path

from devtools.rehearsal import node_data
from devtools.rehearsal.nodes import BATCH_ROOT, Node, node_folders, task_folders
from infra.backends.batch import spec as batch_spec

JOB = "train-dev-abc"


def _node(tmp_path: Path, index: int, coordination: str, start: str) -> Node:
    node = Node(index, f"ns{index}", f"10.0.0.{index + 1}", f"node{index}", tmp_path / f"node{index}")
    task = node.host_path(task_folders(BATCH_ROOT, JOB, batch_spec.TASK_ID)["AZ_BATCH_TASK_DIR"])
    task.mkdir(parents=True)
    (task / "stdout.txt").write_text(coordination)
    startup = node.host_path(node_folders(BATCH_ROOT)["AZ_BATCH_NODE_STARTUP_DIR"])
    startup.mkdir(parents=True)
    (startup / "stdout.txt").write_text(start)
    return node


def test_the_report_says_where_each_rank_read_its_data_and_what_staging_did_on_its_node(tmp_path):
    volume = "local_volume: no local NVMe drive: /mnt/batch/shared/local-data is a folder on /dev/vda (70 GB free)\n"
    staged = ("/mnt/batch/shared/local-data/datasets/default holds default: 8 shards, 0.00 GB fetched in 0.4 s "
              "(0.00 GB/s), 1 files kept, 0 fetched again, 0 retried; marked sha256:ab\nnode-ssh: listening\n")
    skipped = "/mnt/batch/shared/local-data/datasets/default holds default (sha256:ab): copy skipped\n"
    nodes = [_node(tmp_path, 0, staged, volume), _node(tmp_path, 1, skipped, "")]
    lines = node_data.rank_lines(["10.0.0.1:2", "10.0.0.2:1"], nodes, JOB, {"dataset": "default sha256:ab"})
    assert lines == [
        f"node0's start task: {volume.strip()}",
        "node1's start task: no local_volume line in its stdout",
        "rank 0 on node0 (10.0.0.1) read datasets/default from node0:/mnt/batch/shared/local-data (shards, staged "
        "in 0.4 s: 8 shards, 1 kept)",
        "rank 1 on node0 (10.0.0.1) read datasets/default from node0:/mnt/batch/shared/local-data (shards, staged "
        "in 0.4 s: 8 shards, 1 kept)",
        "rank 2 on node1 (10.0.0.2) read datasets/default from node1:/mnt/batch/shared/local-data (copy skipped "
        "(marker))",
        "the job recorded the dataset it trained on: default sha256:ab"]
    assert node_data.node_dataset(nodes[1]) == tmp_path / "node1" / "batch" / "shared" / "local-data" / "datasets" / \
        "default"
