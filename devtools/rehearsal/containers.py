"""The rehearsal's Batch job inside the training image (`python -m devtools rehearse --container`): every node's
coordination command and the primary's application command run in containers of the image, started as Batch starts
container tasks (devtools/batch_container.py), by a real Docker engine (devtools/docker_engine.py), on the nodes'
own network namespaces (devtools/rehearsal/nodes.py).

One container per command (CONTAINER_MODEL). Whether Batch runs a multi-instance task's coordination and application
commands in one container, its docs do not say: the REST reference (task/add, commandLine: "executed as the primary
Task, after the primary Task and all subtasks have finished executing the coordination command line";
containerSettings), batch-mpi ("a typical coordination command line launches a background service") and
batch-docker-container-workloads are silent on it. What is known: the coordination command's background service must
still run when the application command starts (that is what a coordination command is for), and Azure's Batch
Shipyard relies on it in Batch's own container support: on `native` container pools its default coordination command
is `/usr/sbin/sshd -p 23`, which detaches and returns, before `mpirun` (github.com/Azure/batch-shipyard,
convoy/settings.py; docs/80-batch-shipyard-multi-instance-tasks.md). So the rehearsal plays the stricter reading
that keeps that: each command in a container of its own, composed as Batch composes the task's, held (its first
process waits) so that what the command started in it, the job's sshd, runs until the task ends; the command itself
runs in it with `docker exec` (Batch "controls task execution in the container",
https://learn.microsoft.com/azure/batch/batch-docker-container-workloads). Nothing a command leaves in its
container's own files reaches the next command: only the Batch folders (bound from the node) carry over, so the job
must not rely on more, and it works the same when Batch shares one container between the commands.

The image: the framework's Dockerfile built by the engine on the local stand-in base (devtools/docker_engine.py) up
to its last stage with one change (stand_in_dockerfile): Horovod built by the Dockerfile's own step with `--ops mpi`
instead of `--ops nccl` (the stand-in has Debian's Open MPI but no CUDA or NCCL: the same MPI and Gloo controllers,
CPU operations), so the job's `launch` runs `horovodrun --mpi` as on Azure: mpirun starts its daemon in the other
nodes' containers over the job's sshd. The step compiles it in the image (~7 minutes on 2 cores; the engine's kept
data root keeps the layer), or takes a wheel cached in .cache/wheels for the same script, framework version and
`mpi`. Every other line of the stage as written: the package, the topology files, PYTHONPATH, the NCCL/UCX and Open
MPI variables, the entry point.
"""
from __future__ import annotations

import functools
import shlex
import shutil
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from devtools import batch_container, docker_engine
from devtools.rehearsal.batch import RehearsalBatch
from devtools.rehearsal.nodes import BATCH_ROOT, Node, Pool, RehearsalUnavailable
from devtools.rehearsal.report import last_launch_line
from training import frameworks

REPO_ROOT = docker_engine.REPO_ROOT
WHEELS = REPO_ROOT / ".cache" / "wheels"
CONTEXT_WHEELS = "horovod-wheels"  # the stand-in's build context: the cached wheels, copied in
STAND_IN_OPS = "mpi"  # images/build_horovod.sh --ops: the nccl build's MPI and Gloo without NCCL (no CUDA here)
# What the stand-in lacks for the image's `OMPI_MCA_pml=ucx`, which an MPI_Init without horovodrun's own `-mca pml ob1`
# takes (Azure ML's launcher, one `train` alone): InfiniBand. The image's UCX_TLS=rc needs it, and Open MPI 4.1's pml
# ucx selects itself only on Mellanox devices and transports (its pml_ucx_devices / pml_ucx_tls defaults), so MPI_Init
# ends with "PML ucx cannot be selected" (measured in the stand-in, UCX_TLS=tcp alone too). The stand-in's image
# ends with these instead: UCX over TCP and shared memory, on any device.
STAND_IN_UCX = {"UCX_TLS": "tcp,sm,self", "OMPI_MCA_pml_ucx_tls": "any", "OMPI_MCA_pml_ucx_devices": "any"}
# A container's first process while commands run in it: one process, so that a node's fault (Pool.kill: every process
# of the node) ends the container with the rest.
HOLD = "sleep infinity"
CONTAINER_MODEL = ("one container per command, composed as Batch composes the task's and held until the task ends "
                   "(the coordination command's sshd outlives it), the command run in it with docker exec; the docs "
                   "do not say whether Batch shares one container between a multi-instance task's commands")


def stand_in_dockerfile(text: str, wheels: bool) -> str:
    """The Dockerfile with the stand-in's changes (pure): its Horovod step with `--ops mpi` for `--ops nccl`, with
    `wheels` the cached wheels copied to the step's `--cache` folder just before it, and STAND_IN_UCX at its end."""
    lines = text.splitlines(keepends=True)
    steps = [i for i, line in enumerate(lines)
             if line.startswith("RUN images/build_horovod.sh ") and "--ops nccl" in line]
    if len(steps) != 1 or "--cache /tmp/wheels" not in lines[steps[0]]:
        raise ValueError("the Dockerfile has no single `RUN images/build_horovod.sh ... --ops nccl --cache "
                         "/tmp/wheels` step for the stand-in to change")
    step = steps[0]
    lines[step] = lines[step].replace("--ops nccl", f"--ops {STAND_IN_OPS}")
    if wheels:
        lines.insert(step, f"COPY {CONTEXT_WHEELS}/ /tmp/wheels/\n")
    ucx = " ".join(f"{name}={value}" for name, value in STAND_IN_UCX.items())
    return "".join(lines).rstrip("\n") + f"\n# The stand-in has no InfiniBand (devtools/rehearsal/containers.py STAND_IN_UCX)\nENV {ucx}\n"


def rehearsal_image(engine: docker_engine.Engine, framework: str, log: Callable[[str], None] = print) -> str:
    """The framework's image as the rehearsal runs it (the module's docstring), built in `engine`; returns its tag."""
    image = frameworks.FRAMEWORKS[framework].image
    context = docker_engine.CACHE / f"rehearsal-context-{image.name}"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    try:
        # What the Dockerfile copies (the repository's .dockerignore lets only these in), and the cached wheels.
        shutil.copytree(REPO_ROOT / "training", context / "training", ignore=shutil.ignore_patterns("__pycache__"))
        (context / "images").mkdir()
        shutil.copy2(REPO_ROOT / "images" / "build_horovod.sh", context / "images")
        shutil.copytree(REPO_ROOT / "images" / "nccl-topology", context / "images" / "nccl-topology")
        cached = sorted(WHEELS.glob(f"horovod-*-{image.name}-*-{STAND_IN_OPS}"))
        for folder in cached:
            shutil.copytree(folder, context / CONTEXT_WHEELS / folder.name)
        dockerfile = context / "Dockerfile"
        dockerfile.write_text(stand_in_dockerfile((REPO_ROOT / image.dockerfile).read_text(), bool(cached)))
        tag = f"dltrain-{image.name}:rehearsal"
        start = time.monotonic()
        docker_engine.build(engine, dockerfile, tag, build_args={"BASE_IMAGE": docker_engine.base_image(engine)},
                            context=context)
        log(f"container: {image.dockerfile} built on the stand-in base with Horovod --ops {STAND_IN_OPS} "
            f"({'the cached wheel' if cached else 'compiled in the image'}) in {time.monotonic() - start:.0f} s: {tag}")
        return tag
    finally:
        shutil.rmtree(context, ignore_errors=True)


class ContainerPool(Pool):
    """The rehearsal's nodes, each with a container anchor whose network namespace is the node's (on a Batch node a
    task's `--network=host` is the VM's network; here it is the node's), and the engine that runs the job's
    containers: started, the image built and the anchors made on entering; every container removed and the engine
    stopped on leaving."""

    def __init__(self, work: Path, count: int, export: Path, mount_name: str, *, framework: str,
                 log: Callable[[str], None] = print, **kwargs):
        why = docker_engine.unavailable()
        if why:
            raise RehearsalUnavailable(f"--container: {why}")
        super().__init__(work, count, export, mount_name, join_net=self._anchor_pid, **kwargs)
        self.framework, self.log = framework, log
        self.anchor_names = {node.hostname: f"dlr{self.tag}-{node.hostname}" for node in self.nodes}
        self.containers: list[str] = []  # every container of the pool's tasks, removed on leaving
        self.engine: docker_engine.Engine | None = None
        self.image = ""
        self._engine_stack = ExitStack()

    def __enter__(self) -> "ContainerPool":
        try:
            # The data root `make test-containers` keeps, so the image's layers are reused.
            self.engine = self._engine_stack.enter_context(
                docker_engine.running(data_root=docker_engine.CACHE / "data"))
            self.image = rehearsal_image(self.engine, self.framework, self.log)
            for node in self.nodes:
                # The node's name resolves to its address in its containers, as Azure's DNS resolves a VM's
                # (their /etc/hosts is the anchor's: `--network=container:`).
                self.engine.docker("run", "-d", "--name", self.anchor_names[node.hostname], "--network", "none",
                                   "--hostname", node.hostname, "--add-host", f"{node.hostname}:{node.address}",
                                   self.image, *shlex.split(HOLD), timeout=120)
            return super().__enter__()
        except BaseException:
            self._leave()
            raise

    def __exit__(self, *exc) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._leave()

    def _leave(self) -> None:
        try:
            if self.engine is not None:
                for name in [*self.containers, *self.anchor_names.values()]:
                    self.engine.docker("rm", "-f", name, check=False, timeout=60)
        finally:
            self._engine_stack.close()

    def _anchor_pid(self, node: Node) -> int:
        """Pool's join_net: the first process of the node's anchor."""
        found = self.engine.docker("inspect", "--format", "{{.State.Pid}}", self.anchor_names[node.hostname],
                                   timeout=30)
        return int(found.stdout.strip())


class ContainerBatch(RehearsalBatch):
    """RehearsalBatch whose task commands run in the image (CONTAINER_MODEL), on a ContainerPool; the pool's start
    task still runs on the node itself, as Batch runs a start task without containerSettings on the VM."""

    nodes: ContainerPool

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.left_out: list[str] = []  # containerRunOptions the sandbox rule left out
        self.application_out: Path | None = None  # the application command's output folder here (its launch line)

    def _run(self, job_id, node, command_line, env, cwd, out, timeout):
        if not job_id:  # the pool's start task
            return super()._run(job_id, node, command_line, env, cwd, out, timeout)
        if " -m training launch " in command_line:  # the application command (spec.py's), not the coordination one
            self.application_out = node.host_path(out)
        try:
            name = self._container(job_id, node, env, Path(cwd))
        except (RuntimeError, OSError) as err:  # Docker refused (or the engine is stopping): the command fails
            out_host = node.host_path(out)
            out_host.mkdir(parents=True, exist_ok=True)
            with open(out_host / "stderr.txt", "a") as stderr:
                stderr.write(f"rehearsal: the task's container did not start: {err}\n")
            return 125  # docker run's own code for a container that did not run
        # The docker CLI runs as the node's process (its output is the task's stdout/stderr; a cancel or a node
        # fault ends it with the node's other processes); the command runs in the container, with the container's
        # environment and working directory.
        docker = str(docker_engine.DEBS / "usr" / "bin" / "docker")
        return super()._run(job_id, node, shlex.join([docker, "exec", name, *shlex.split(command_line)]),
                            self.nodes.engine.env, cwd, out, timeout)

    def _container(self, job_id: str, node: Node, env: dict[str, str], cwd: Path) -> str:
        """Create and start the container of one command on `node`, held; returns its name. `env` is what the command
        would get on the node: the task's container gets Batch's variables and the task's own, not the variables
        that stand in for the image's environment on the node (RehearsalBatch's node_env)."""
        task = self.tasks[job_id]
        own = {item["name"] for item in task.get("environmentSettings", [])}
        batch_env = {key: value for key, value in env.items() if key not in self.node_env or key in own}
        node.host_path(cwd).mkdir(parents=True, exist_ok=True)  # Batch makes the task's folders before it starts it
        kept, self.left_out = batch_container.sandbox_options(task["containerSettings"].get("containerRunOptions", ""))
        held = {**batch_container.local_task(task, kept), "commandLine": HOLD}
        anchor = self.nodes.anchor_names[node.hostname]
        name = f"{anchor}-{len(self.nodes.containers)}"
        args = batch_container.docker_create_args(held, batch_env, self.nodes.image, name)
        # The rehearsal's local HTTPS fronts (storage for node-stage, the account and token endpoints) are signed by
        # its own CA, which every task trusts through SSL_CERT_FILE / REQUESTS_CA_BUNDLE (devtools/rehearsal/azure_ad.py):
        # the file is bound read-only at its path, as a node here has it (Azure's are signed by public CAs the image
        # trusts already).
        trusted = {path: f"{path}:ro" for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
                   if (path := batch_env.get(name)) and Path(path).is_file()}
        args = batch_container.on_local_node(args, anchor=anchor, batch_root=str(BATCH_ROOT),
                                             node_root=str(node.batch_root), cpus=self.nodes.cores(node),
                                             mounts={str(self.nodes.export): str(self.nodes.mount_point), **trusted})
        self.nodes.containers.append(name)
        self.nodes.engine.docker("create", *args, timeout=120)
        self.nodes.engine.docker("start", name, timeout=120)
        return name

    def report_lines(self) -> list[str]:
        """What the report says of the container: what ran where, and what the stand-in and the sandbox leave out."""
        return [
            f"the job's commands ran in {self.nodes.image}, {CONTAINER_MODEL}",
            "composed as Batch composes container tasks (the Batch root, the task's environment, its working "
            f"directory, containerRunOptions appended); {batch_container.SANDBOX_RULE}; left out here: "
            f"{shlex.join(self.left_out) or 'nothing'}",
            batch_container.NODE_RULE,
            launcher_line(self.application_out),
            f"the stand-in image: Debian 12 (Python 3.11) for the CUDA base, no CUDA/cuDNN/NCCL: Horovod built with "
            f"`--ops {STAND_IN_OPS}` for `--ops nccl` (Open MPI and Gloo controllers, CPU operations); the rest of the "
            "image as the Dockerfile has it (its Open MPI settings included: horovodrun's own `-mca pml ob1` wins over "
            "OMPI_MCA_pml=ucx on Azure too, so UCX carries nothing under launch); no InfiniBand, so MPI's TCP runs on the "
            f"nodes' veth, and the image ends with {' '.join(f'{k}={v}' for k, v in STAND_IN_UCX.items())} for an "
            "MPI_Init without horovodrun's pml (Open MPI's pml ucx selects itself only on Mellanox devices)",
        ]


def launcher_line(out: Path | None) -> str:
    """What launched the ranks, from the application command's last launch line (`launch: N ranks on M host(s):
    .../horovodrun --mpi ...`, training/cluster/launch.py) in its stderr."""
    try:
        text = (out / "stderr.txt").read_text(errors="replace") if out else ""
    except OSError:
        text = ""
    line = last_launch_line(text)
    if not line:
        return "the ranks' launcher: no launch line in the application command's stderr"
    words = line.split()
    ranks, hosts = words[1], words[4]
    launcher = next((f"horovodrun {word}" for word in words if word in ("--mpi", "--gloo")), "?")
    how = ("mpirun started by horovodrun, its daemons in the other nodes' containers over the job's sshd"
           if launcher == "horovodrun --mpi" else "Horovod's Gloo launcher over the job's sshd")
    return f"the ranks ran under {launcher}: {ranks} ranks on {hosts} nodes ({how})"


def in_containers(framework: str, log: Callable[[str], None]):
    """(Pool, RehearsalBatch) as the rehearsal constructs them, for a rehearsal whose job runs in the image."""
    return functools.partial(ContainerPool, framework=framework, log=log), ContainerBatch
