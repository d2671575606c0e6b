"""Batch's documented rules for a node and a task, as pure functions: the variables a task's commands get, the
blob names an output file pattern uploads, a task's maxWallClockTime (devtools/rehearsal/batch.py plays Batch with
them; the pages each rule comes from are cited there and here)."""
from __future__ import annotations

import fnmatch
import re
from pathlib import Path

from devtools.rehearsal.nodes import Node, node_folders, task_folders


def wall_clock_seconds(duration: str | None) -> float | None:
    """ISO 8601 durations as the job spec writes them (PT24H, PT30M, PT90S)."""
    if not duration:
        return None
    match = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?", duration)
    if not match:
        raise ValueError(f"unsupported duration {duration!r}")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def output_blob_names(pattern: str, working_dir: Path, path: str) -> dict[Path, str]:
    """Files a Batch output file pattern matches (relative to the working directory) -> their blob names."""
    wildcard = any(ch in pattern for ch in "*?[")
    if not wildcard:
        file = (working_dir / pattern).resolve()
        return {file: path or file.name} if file.is_file() else {}
    parts = pattern.split("/")
    base_parts = []
    for part in parts:
        if any(ch in part for ch in "*?["):
            break
        base_parts.append(part)
    base = (working_dir / "/".join(base_parts)).resolve() if base_parts else working_dir.resolve()
    rest = parts[len(base_parts):]
    matched = {}
    for file in sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else []:
        relative = file.relative_to(base).as_posix()
        names = relative.split("/")
        if any(n.startswith(".") for n in names):
            continue  # names starting with "." are not matched by wildcards (OutputFile.filePattern)
        if _glob_match(rest, names):
            matched[file] = f"{path.rstrip('/')}/{relative}" if path else relative
    return matched


# Batch's variables (the folders are in devtools/rehearsal/nodes.py). What the start task gets: "All tasks" in the
# page's Availability column, less the task folders.
START_TASK_ENV = ("AZ_BATCH_ACCOUNT_NAME", "AZ_BATCH_POOL_ID", "AZ_BATCH_NODE_ID", "AZ_BATCH_NODE_IS_DEDICATED",
                  "AZ_BATCH_NODE_ROOT_DIR", "AZ_BATCH_NODE_SHARED_DIR", "AZ_BATCH_NODE_STARTUP_DIR",
                  "AZ_BATCH_NODE_MOUNTS_DIR")


def batch_env(root: Path, addresses: list[str], index: int, job_id: str, task_id: str,
              node_id: str | None = None) -> dict[str, str]:
    """The variables Batch sets for a multi-instance task's commands on node `index` of the task's nodes
    (`addresses`, the primary first), in the formats of the page above; `node_id`: the node's ID in the pool
    (default tvm-`index`)."""
    return {
        "AZ_BATCH_ACCOUNT_NAME": "rehearsal", "AZ_BATCH_POOL_ID": "gpu", "AZ_BATCH_NODE_ID": node_id or f"tvm-{index}",
        "AZ_BATCH_NODE_IS_DEDICATED": "true", "AZ_BATCH_JOB_ID": job_id, "AZ_BATCH_TASK_ID": task_id,
        **{name: str(path) for name, path in {**node_folders(root), **task_folders(root, job_id, task_id)}.items()},
        "AZ_BATCH_HOST_LIST": ",".join(addresses), "AZ_BATCH_NODE_LIST": ";".join(addresses),
        "AZ_BATCH_MASTER_NODE": f"{addresses[0]}:6000",
        "AZ_BATCH_IS_CURRENT_NODE_MASTER": "true" if index == 0 else "false",
    }


def node_id(node: Node) -> str:
    """The node's ID in the pool (BatchNode.id; AZ_BATCH_NODE_ID in its tasks)."""
    return f"tvm-{node.index}"


def _glob_match(pattern: list[str], names: list[str]) -> bool:
    if not pattern:
        return not names
    if pattern[0] == "**":
        return any(_glob_match(pattern[1:], names[i:]) for i in range(len(names) + 1))
    return bool(names) and fnmatch.fnmatchcase(names[0], pattern[0]) and _glob_match(pattern[1:], names[1:])
