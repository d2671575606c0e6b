"""dataTier node-local in the rehearsal (issue 56): the dev dataset goes up as shards, every node's start task makes
its local volume (infra/backends/batch/local_volume.sh, which finds no drive here: the volume is a folder in the node's
own Batch tree, standing in for its striped NVMe drives), the job's coordination command stages the shards from the
storage emulator into it with the pool's identity (`python -m training node-stage`), the ranks train from there, and
the report says where each rank read its data.

Two of node-stage's promises are played on the way, cheaply, inside the one rehearsal:
- a corrupted shard is fetched again: before the job, the last node of the job holds a copy of a train shard with
  one byte flipped and its size kept (what a failed write on its disk leaves); after the job its copy has the
  manifest's MD5;
- a node holding the dataset skips the copy: after the job, node-stage runs again on the primary, as the next job's
  coordination command would, and copies nothing.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from infra import REPO_ROOT
from infra.backends.batch import spec as batch_spec
from infra.backends.shared import JobError, StackOutputs, require_staged

# The dev dataset (160 JPEGs of 64 px, ~0.3 MB) in several shards, so that the job's 2 ranks each read their own
# (shards go round-robin to the ranks and their loader workers: training/data/shards.py); ~128 MB a shard on Azure.
SHARD_MB = "0.1"
DATASET = "default"
_STAGED = re.compile(r"holds default: (\d+) shards, [\d.]+ GB fetched in ([\d.]+) s.*?(\d+) files kept")


@dataclass(frozen=True)
class Uploaded:
    images: int  # the files of the synthetic folder (train + val JPEGs)
    manifest: dict  # the dataset's dataset.json as uploaded


def node_dataset(node) -> Path:
    """Where node-stage puts the dataset on a node ($AZ_BATCH_NODE_SHARED_DIR/local-data/datasets/default), as the
    rehearsal (the host) sees it."""
    from devtools.rehearsal.nodes import BATCH_ROOT, node_folders

    return node.host_path(node_folders(BATCH_ROOT)["AZ_BATCH_NODE_SHARED_DIR"] / batch_spec.LOCAL_DATA / "datasets"
                          / DATASET)


def gate_then_upload(account, outputs: StackOutputs, gate, staged: bool, stack: str, work: Path,
                     node_env: dict[str, str], say, *upload_flags: str) -> int:
    """The deployer's first steps on a new stack, on either tier: the submit gate refuses while `data` is empty (the
    rehearsal stops if it does not), then the dev dataset (4 classes, 32 + 8 JPEGs each of 64 px) goes up with
    `training upload` and `upload_flags`. Returns the images uploaded."""
    try:
        require_staged(outputs, gate, staged, stack)
        raise RuntimeError("the submit gate let a job through onto an empty dataset")
    except JobError as refused:
        say(f"gate: `infra submit` and `pulumi up` submit no job: {refused}")
    python = node_env["PATH"].split(":")[0] + "/python"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    source = work / "dataset"
    subprocess.run([python, "-m", "devtools", "synth-data", "--out", str(source), "--classes", "4",
                    "--per-class", "32", "--val-per-class", "8", "--size", "64"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "training", "upload", str(source), account.as_deployer("data"),
                    *upload_flags], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return sum(1 for p in source.rglob("*") if p.is_file())


def upload_shards(account, ev, work: Path, node_env: dict[str, str], gate, say) -> Uploaded:
    """The deployer's part under dataTier node-local: the gate refuses while `data` is empty, the dataset goes up
    as shards (`training upload --format shards`), the gate passes on `data` alone (no NFS staging report: the nodes
    stage). `gate(data_url, status_url)` is the deployer's staging.data_ready."""
    from azure.storage.blob import ContainerClient

    outputs = StackOutputs.from_json(ev.outputs)
    images = gate_then_upload(account, outputs, gate, False, ev.config.stack, work, node_env, say,
                              "--format", "shards", "--shard-mb", SHARD_MB)
    data = ContainerClient.from_container_url(account.as_deployer("data", "rl"))
    manifest = json.loads(data.download_blob("dataset.json").readall())
    split = {name: len(manifest["shards"].get(name, [])) for name in ("train", "val")}
    say(f"data: {images} images uploaded to `data` by the deployer as {split['train']} train + {split['val']} val "
        f"shards (`training upload --format shards`), after the stack exists")
    line = require_staged(outputs, gate, False, ev.config.stack)
    say(f"data: dataTier node-local: the NFS server stages nothing, each node stages the shards at the job's start; "
        f"the submit gate passes: {line}")
    return Uploaded(images, manifest)


def corrupt_a_shard(node, account, manifest: dict) -> str:
    """Leave a corrupted copy of the first train shard on the node's local volume (one byte flipped, size kept),
    before its start task and the job's staging; returns what was done."""
    from azure.storage.blob import ContainerClient

    shard = manifest["shards"]["train"][0]
    data = ContainerClient.from_container_url(account.as_deployer("data", "rl"))
    bad = bytearray(data.download_blob(shard["name"]).readall())
    bad[len(bad) // 2] ^= 0xFF
    path = node_dataset(node) / shard["name"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(bad))
    return (f"data: {node.hostname}'s local volume holds a corrupted {shard['name']} (one byte flipped, its size "
            "kept), as a failed write on its disk leaves it")


def staged_lines(nodes, job: str) -> dict[str, str]:
    """Node address -> what node-stage did there in the job (its line in the coordination command's stdout, in
    the task folder), for the report."""
    from devtools.rehearsal.nodes import BATCH_ROOT, task_folders

    done = {}
    for node in nodes:
        out = node.host_path(task_folders(BATCH_ROOT, job, batch_spec.TASK_ID)["AZ_BATCH_TASK_DIR"]) / "stdout.txt"
        text = out.read_text(errors="replace") if out.is_file() else ""
        found = _STAGED.search(text)
        done[node.address] = (f"shards, staged in {found.group(2)} s: {found.group(1)} shards, {found.group(3)} kept"
                              if found else "copy skipped (marker)" if "copy skipped" in text
                              else "no node-stage line in its coordination stdout")
    return done


def saw(node, uploaded: Uploaded) -> str:
    """The job's --data folder on the primary, read as the trainer reads a sharded dataset."""
    from training.data import shards

    if not shards.is_sharded(node_dataset(node)):  # the job failed before its nodes staged it
        return (f"data: the job's --data folder on {node.hostname} ({batch_spec.LOCAL_DATA}/datasets/{DATASET}) holds "
                "no staged dataset: the coordination command's stderr says why")
    dataset = shards.read_sharded(node_dataset(node))
    splits = {split: sum(s.samples for s in dataset.shards.get(split, ())) for split in ("train", "val")}
    seen = sum(splits.values())
    return (f"data: the job's --data folder on {node.hostname} ({batch_spec.LOCAL_DATA}/datasets/{DATASET}) as the "
            f"trainer reads it: {splits['train']} train + {splits['val']} val images in shards = {seen} of the "
            f"{uploaded.images} images uploaded" + ("" if seen == uploaded.images else ": IMAGES MISSING"))


def rank_lines(placement_hosts: list[str], nodes, job: str, summary: dict) -> list[str]:
    """One line a rank: where it read its data, e.g. `rank 0 on node0 (10.250.0.1) read datasets/default from
    node0:/mnt/batch/shared/local-data (shards, staged in 0.4 s: 5 shards, 0 kept)`; the dataset the job recorded
    (summary.json's `dataset`: its name and content hash) last."""
    from devtools.rehearsal.nodes import BATCH_ROOT, node_folders

    by_address = {node.address: node for node in nodes}
    staged = staged_lines(nodes, job)
    volume = node_folders(BATCH_ROOT)["AZ_BATCH_NODE_SHARED_DIR"] / batch_spec.LOCAL_DATA
    lines = []
    for host in placement_hosts:  # horovodrun numbers ranks in host order, `slots` per host
        address, _, slots = host.partition(":")
        node = by_address.get(address)
        name = node.hostname if node else "?"
        for _ in range(int(slots or 1)):
            lines.append(f"rank {len(lines)} on {name} ({address}) read datasets/{DATASET} from {name}:{volume} "
                         f"({staged.get(address, '?')})")
    return [*volume_lines(nodes), *lines,
            f"the job recorded the dataset it trained on: {summary.get('dataset') or '?'}"]


def volume_lines(nodes) -> list[str]:
    """What each node's start task said of its local volume (local_volume.sh's one line)."""
    from devtools.rehearsal.nodes import BATCH_ROOT, node_folders

    lines = []
    for node in nodes:
        out = node.host_path(node_folders(BATCH_ROOT)["AZ_BATCH_NODE_STARTUP_DIR"]) / "stdout.txt"
        said = [line for line in (out.read_text(errors="replace") if out.is_file() else "").splitlines()
                if line.startswith("local_volume:")]
        lines.append(f"{node.hostname}'s start task: {said[-1] if said else 'no local_volume line in its stdout'}")
    return lines


def checks_after_job(batch, job: str, pool_nodes, corrupted_node, manifest: dict, node_env: dict[str, str]) -> list[str]:
    """After the job: the corrupted shard's copy has the manifest's MD5 again; node-stage run once more on the
    primary (as the next job's coordination command: same identity, same URL) copies nothing."""
    from training.data import shards

    lines = []
    shard = manifest["shards"]["train"][0]
    got = shards.md5_file(node_dataset(corrupted_node) / shard["name"])
    lines.append(f"{corrupted_node.hostname}: the corrupted {shard['name']} was fetched again: MD5 {got} "
                 + ("= the manifest's" if got == shard["md5"] else f"!= the manifest's {shard['md5']}: NOT MENDED"))
    primary = pool_nodes[0]
    env = {**node_env, **batch.account_env, "PYTHONPATH": str(REPO_ROOT), "AZ_BATCH_NODE_SHARED_DIR": str(_shared())}
    run = subprocess.run(batch.nodes.command(primary, ["bash", "-c", _node_stage_part(batch, job)]), env=env,
                         capture_output=True, text=True, timeout=300)
    said = (run.stdout.strip().splitlines() or ["(nothing)"])[-1]
    lines.append(f"{primary.hostname}: node-stage again, as the next job's coordination command: "
                 + ("copy skipped: the node holds the dataset's marker" if run.returncode == 0 and "copy skipped" in said
                    else f"exit {run.returncode}: {said} {run.stderr.strip()[-300:]}"))
    return lines


def _node_stage_part(batch, job: str) -> str:
    """The job's own node-stage step (its coordination command's, with the URL a node here reaches), for bash."""
    import shlex

    task = batch.tasks[job]
    command = batch._storage_here(task["multiInstanceSettings"]["coordinationCommandLine"])
    script = shlex.split(command.removeprefix("/bin/bash -c "))[0]
    return next(part for part in script.split("; ") if "node-stage" in part)


def _shared() -> Path:
    from devtools.rehearsal.nodes import BATCH_ROOT, node_folders

    return node_folders(BATCH_ROOT)["AZ_BATCH_NODE_SHARED_DIR"]
