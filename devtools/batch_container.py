"""How Batch starts a task's container on a Linux node, as `docker create` arguments (pure), and the rule that
leaves out, for a run on this machine only, the options the sandbox cannot grant.

Batch's documented composition for a task with `containerSettings`:
- "all directories recursively below the AZ_BATCH_NODE_ROOT_DIR (the root of Azure Batch directories on the node)
  are mapped into the container, all Task environment variables are mapped into the container, and the Task
  command line is executed in the container" (https://learn.microsoft.com/rest/api/batchservice/task/add,
  containerSettings); on Linux the whole AZ_BATCH_NODE_ROOT_DIR, read-write
  (https://learn.microsoft.com/azure/batch/batch-container-isolation-task);
- `workingDirectory: taskWorkingDirectory`: "the standard Batch service Task working directory, which will contain
  the Task Resource Files populated by Batch" (ContainerWorkingDirectory, same page);
- `containerRunOptions`: "additional options ... supplied as arguments to the docker create command, in addition
  to those controlled by the Batch Service" (same page; https://learn.microsoft.com/azure/batch/batch-docker-container-workloads).
- the container page (https://learn.microsoft.com/azure/batch/batch-docker-container-workloads, "Container task
  working directory", "Container settings for the task"): the same three mappings; Batch "automatically uses the
  docker create command" and "controls task execution in the container"; on Linux it "maps the user/group
  permission to the container", root for a pool-scope admin auto-user (the job's: spec.py), the image's default
  here; on GPU sizes it "automatically enables GPU for container tasks, so you shouldn't include the --gpus
  argument" (the job does not: tests/images/test_batch_container.py).
Whether a multi-instance task's coordination and application commands share one container the docs do not say (the
job's sshd, started by the coordination command, must still run when the application command starts): the container
rehearsal plays the stricter reading, a container per command (devtools/rehearsal/containers.py, CONTAINER_MODEL).
The docs do not list the exact flags Batch itself passes: the bind mount at the same path, `-e` per variable and
`-w` for the working directory are the Docker forms of the three documented rules, and the task's options come
after them, so where both set a flag the task's wins, as its last word on the command line does in Docker.
"""
from __future__ import annotations

import os
import resource
import shlex
from collections.abc import Mapping
from pathlib import Path

# What this machine cannot grant, and how the option asking for it looks (the rule the tests state):
# - `--ulimit memlock=N` above this machine's hard memlock limit: Docker refuses to raise a container's limit
#   above the daemon's own ("ulimit: memlock: ... operation not permitted"); Azure's HPC images raise it to
#   unlimited, this sandbox's is 8192 KiB;
# - `--device=PATH` where PATH does not exist here (/dev/infiniband on a machine without InfiniBand);
# - `-v SRC:DST[:MODE]` where SRC does not exist here (/opt/microsoft, the HPC image's topology files).
SANDBOX_RULE = ("left out for this machine only: a --ulimit memlock above its hard limit, a --device whose path "
                "does not exist here, a -v whose source does not exist here; everything else as the job declares it")


def docker_create_args(task: Mapping, env: Mapping[str, str], image: str, name: str) -> list[str]:
    """`docker create` arguments (after `create`) for `task` (the task spec's dict, as sent to Batch) on a node
    whose Batch variables are in `env` (AZ_BATCH_NODE_ROOT_DIR, AZ_BATCH_TASK_WORKING_DIR...), with `image` in
    place of the task's imageName (the registry's image is not reachable here). The command is the task's
    command line, `/bin/bash -c SCRIPT` (spec.py's form), split into its words."""
    settings = task["containerSettings"]
    root = env["AZ_BATCH_NODE_ROOT_DIR"]
    task_env = {**env, **{item["name"]: item["value"] for item in task.get("environmentSettings", [])}}
    args = ["--name", name, "-v", f"{root}:{root}"]
    for key, value in sorted(task_env.items()):
        args += ["-e", f"{key}={value}"]
    if settings.get("workingDirectory", "taskWorkingDirectory") == "taskWorkingDirectory":
        args += ["-w", env["AZ_BATCH_TASK_WORKING_DIR"]]
    args += shlex.split(settings.get("containerRunOptions", ""))
    return [*args, image, *shlex.split(task["commandLine"])]


def _memlock_words(value: str) -> int | None:
    """A `--ulimit memlock=SOFT[:HARD]` value in bytes (-1: unlimited); None if not memlock."""
    name, _, limits = value.partition("=")
    if name != "memlock":
        return None
    numbers = [int(part) for part in limits.split(":")]
    return -1 if -1 in numbers else max(numbers)


def sandbox_options(options: str, exists=os.path.exists,
                    memlock_hard: int | None = None) -> tuple[list[str], list[str]]:
    """`containerRunOptions` split into (kept, left out) by SANDBOX_RULE on this machine."""
    if memlock_hard is None:
        memlock_hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    unlimited = memlock_hard == resource.RLIM_INFINITY
    words = shlex.split(options)
    kept, left = [], []
    index = 0
    while index < len(words):
        word = words[index]
        flag, joined, value = word.partition("=")
        takes_value = flag in ("--ulimit", "--device", "-v", "--volume") and not joined
        if takes_value:
            value = words[index + 1]
        option = [word, value] if takes_value else [word]
        index += len(option)
        drop = False
        if flag == "--ulimit":
            wanted = _memlock_words(value)
            drop = wanted is not None and not unlimited and (wanted == -1 or wanted > memlock_hard)
        elif flag == "--device":
            drop = not exists(value.split(":")[0])
        elif flag in ("-v", "--volume"):
            drop = not exists(value.split(":")[0])
        (left if drop else kept).extend(option)
    return kept, left


def local_task(task: Mapping, kept: list[str]) -> dict:
    """The task with its containerRunOptions reduced to `kept` (the only change the local run makes)."""
    settings = {**task["containerSettings"], "containerRunOptions": shlex.join(kept)}
    return {**task, "containerSettings": settings}


def batch_folders_exist(env: Mapping[str, str]) -> None:
    """Make the node's Batch folders a container task needs (Batch makes them before it starts the container)."""
    for name in ("AZ_BATCH_NODE_ROOT_DIR", "AZ_BATCH_NODE_SHARED_DIR", "AZ_BATCH_TASK_DIR", "AZ_BATCH_TASK_WORKING_DIR"):
        if name in env:
            Path(env[name]).mkdir(parents=True, exist_ok=True)


# How a rehearsal node (devtools/rehearsal/nodes.py: a set of this machine's namespaces, not a VM) stands in for the
# host Batch composes the container on (the rule the container rehearsal states in its report):
NODE_RULE = ("a local node is namespaces of this machine, not a VM: its `host` network is the node's "
             "(--network=host joins the node's network namespace: container:<the node's anchor>), its Batch root is "
             "bound from the node's folder here, the pool's NFS mount (which Batch mounts inside that root) is bound "
             "at its place, and the container gets the node's own cores (--cpuset-cpus)")
HOST_NETWORK = {"--network=host", "--net=host"}


def on_local_node(args: list[str], *, anchor: str, batch_root: str, node_root: str, mounts: dict[str, str],
                  cpus: str) -> list[str]:
    """`docker create` arguments composed for a Batch node (docker_create_args) made to run on a rehearsal node
    (NODE_RULE): `--network=host` (either form) -> `--network=container:ANCHOR`; the Batch root's bind `-v
    ROOT:ROOT` -> `-v NODE_ROOT:ROOT`; then a bind per NFS mount (host folder -> its path under ROOT) and
    `--cpuset-cpus CPUS`, before the image. Nothing else changes."""
    out, index, network = [], 0, False
    while index < len(args):
        word = args[index]
        if word in HOST_NETWORK or (word in ("--network", "--net") and args[index + 1] == "host"):
            out.append(f"--network=container:{anchor}")
            index += 1 if word in HOST_NETWORK else 2
            network = True
            continue
        if word == "-v" and args[index + 1] == f"{batch_root}:{batch_root}":
            out += ["-v", f"{node_root}:{batch_root}"]
            index += 2
            continue
        out.append(word)
        index += 1
    if not network:
        raise ValueError("the task's containerRunOptions do not ask for the host network: a rehearsal node's "
                         "containers would not be on its network")
    image = _image_index(out)
    extra = [word for source, target in sorted(mounts.items()) for word in ("-v", f"{source}:{target}")]
    return [*out[:image], *extra, "--cpuset-cpus", cpus, *out[image:]]


def _image_index(args: list[str]) -> int:
    """Where the image is in `docker create` arguments of docker_create_args' form: the first word that is neither
    an option nor an option's value (every option there takes its value as `--opt=value` or as the next word,
    except the flags below)."""
    flags = {"--rm", "--init", "--privileged", "-d", "--detach", "-i", "-t", "--read-only"}
    index = 0
    while index < len(args):
        word = args[index]
        if not word.startswith("-"):
            return index
        index += 1 if ("=" in word or word in flags) else 2
    raise ValueError("no image in the docker create arguments")
