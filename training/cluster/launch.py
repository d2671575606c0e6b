"""`python -m training launch [OPTIONS] -- TRAIN_FLAGS`: start `python -m training train` on every GPU of
every node, with horovodrun.

Hosts come from `--hosts host:slots,...`, or, inside an Azure Batch multi-instance task, from
AZ_BATCH_HOST_LIST (the nodes Batch gave the task) with `--slots` processes per node (the job passes
the node size's GPU count). Between nodes Horovod runs over MPI where mpirun is installed, as in the images
(mpirun reaches the other nodes' sshd on `--ssh-port`, NCCL carries the gradients over InfiniBand), else with
its Gloo controller over the same SSH; on one machine it uses Gloo.

Examples:
  python -m training launch --hosts localhost:2 -- --data synthetic --image-size 64 --steps 20 --output-dir /tmp/run
  python -m training launch --slots 8 --ssh-port 2222 -- --data /mnt/data/imagenet --output-dir /mnt/data/runs/r1
  python -m training launch --hosts 10.0.0.4:8,10.0.0.5:8 --dry-run -- --epochs 90
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from training.errors import EXIT_NODE_FAULT, UsageError
from training.watchdog import RUN_DIR_ENV, collective_env

LOCAL_NAMES = ("localhost", "127.0.0.1")
# Environment the remote ranks need too: mpirun forwards these by name (-x), values never on the command line.
FORWARDED_PREFIXES = ("NCCL_", "UCX_", "HOROVOD_", "PYTHON", "OMP_", "TF_", "CUDA_", "MASTER_", "TORCH_NCCL_",
                      "TRAINING_WATCHDOG")
# --dist ddp under this launcher: torch.distributed's rendezvous on the first host (rank 0's: mpirun and Horovod's
# Gloo launcher place ranks in -H order, by slot), at torchrun's default port.
DDP_MASTER_PORT = 29500
# What each launcher tells a rank about its place, as torch.distributed's env:// rendezvous wants it (RANK,
# WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE: https://pytorch.org/docs/stable/elastic/run.html#environment-variables).
# mpirun (Open MPI) sets OMPI_COMM_WORLD_* in every process it starts
# (https://docs.open-mpi.org/en/v5.0.x/tuning-apps/environment-var.html); Horovod's Gloo launcher sets HOROVOD_*
# (horovod/runner/gloo_run.py `create_slot_env_vars`: HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK,
# HOROVOD_LOCAL_SIZE). Neither sets RANK, so without this every DDP process is rank 0 of 1.
LAUNCHER_RANK_VARIABLES = (
    ("torchrun", {"RANK": "RANK", "WORLD_SIZE": "WORLD_SIZE", "LOCAL_RANK": "LOCAL_RANK",
                  "LOCAL_WORLD_SIZE": "LOCAL_WORLD_SIZE"}),
    ("mpirun", {"RANK": "OMPI_COMM_WORLD_RANK", "WORLD_SIZE": "OMPI_COMM_WORLD_SIZE",
                "LOCAL_RANK": "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_WORLD_SIZE": "OMPI_COMM_WORLD_LOCAL_SIZE"}),
    ("horovodrun --gloo", {"RANK": "HOROVOD_RANK", "WORLD_SIZE": "HOROVOD_SIZE", "LOCAL_RANK": "HOROVOD_LOCAL_RANK",
                           "LOCAL_WORLD_SIZE": "HOROVOD_LOCAL_SIZE"}),
)


@dataclass(frozen=True)
class Host:
    name: str
    slots: int


def set_horovod_cycle(gpu: bool) -> None:
    """Call in a rank before hvd.init(). Horovod's background thread negotiates every HOROVOD_CYCLE_TIME ms
    (https://horovod.readthedocs.io/en/stable/tensor-fusion_include.html; 1 ms by default since Horovod 0.21,
    https://github.com/horovod/horovod/releases/tag/v0.21.0), a Gloo exchange each time, for the process's whole
    life. On a GPU a step takes tens of ms and the default is right; on CPU a step takes hundreds of ms, the
    exchange's wake-ups take cores from the step, and 10 ms cycles cost a step at most 10 ms. Measured, 2 ranks of
    6 steps on 2 cores: PyTorch 30.7 -> 28.0 CPU s (21.4 -> 16.4 s), TensorFlow 77 -> 66 CPU s. A value the user
    set wins (`horovodrun --cycle-time-ms` sets the same variable); Horovod's autotune then leaves the cycle fixed,
    on CPU only. The interconnect check runs with the same cycle as training, so a CPU figure includes it."""
    if not gpu:
        os.environ.setdefault("HOROVOD_CYCLE_TIME", "10")


def parse_hosts(text: str) -> list[Host]:
    hosts = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, slots = item.partition(":")
        if not name or not slots.isdigit() or int(slots) < 1:
            raise UsageError(f"--hosts: {item!r} is not HOST:SLOTS with SLOTS >= 1, e.g. localhost:2 or 10.0.0.4:8")
        hosts.append(Host(name, int(slots)))
    if not hosts:
        raise UsageError("--hosts is empty; give HOST:SLOTS[,HOST:SLOTS...], e.g. localhost:2")
    if len({h.name for h in hosts}) != len(hosts):
        raise UsageError(f"--hosts names a host twice: {text}")
    return hosts


def hosts_from_batch(env: Mapping[str, str], slots: int) -> list[Host]:
    """The nodes of a Batch multi-instance task: AZ_BATCH_HOST_LIST is their comma-separated IPs."""
    listed = env.get("AZ_BATCH_HOST_LIST", "")
    if not listed:
        raise UsageError("no hosts: pass --hosts HOST:SLOTS,... or run inside an Azure Batch multi-instance task "
                         "(which sets AZ_BATCH_HOST_LIST)")
    return [Host(ip.strip(), slots) for ip in listed.split(",") if ip.strip()]


TF_PORT = 2223  # MultiWorkerMirroredStrategy's gRPC server on every node (beside the job's sshd on 2222)


def tf_config(workers: list[str], index: int) -> str:
    """TF_CONFIG (JSON) for worker `index` of a MultiWorkerMirroredStrategy cluster: every worker's HOST:PORT in
    one order (the same on every node, so task 0 is the first) and this worker's task
    (https://www.tensorflow.org/guide/distributed_training#TF_CONFIG). Built here, never by a shell: a host
    name is data, not a word of a command."""
    if not 0 <= index < len(workers):
        raise UsageError(f"worker index {index} is not one of the {len(workers)} worker(s)")
    return json.dumps({"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}})


def workers_on_this_host(text: str) -> int:
    """How many of TF_CONFIG's workers share this worker's host (1 without TF_CONFIG): they share its cores."""
    if not text:
        return 1
    config = json.loads(text)
    workers = config["cluster"]["worker"]
    mine = workers[config["task"]["index"]].rpartition(":")[0]
    return sum(1 for address in workers if address.rpartition(":")[0] == mine)


def dist_of(train_flags: list[str]) -> str:
    """The --dist the training flags ask for (horovod unless they say otherwise)."""
    for i, arg in enumerate(train_flags):
        if arg == "--dist" and i + 1 < len(train_flags):
            return train_flags[i + 1]
        if arg.startswith("--dist="):
            return arg.partition("=")[2]
    return "horovod"


def fast_recipe_flags(train_flags: list[str], gpu: bool) -> list[str]:
    """The training flags with PyTorch's fast recipe on GPUs where they choose no distribution (pure): DDP with
    torch.compile, the recipe the lever table measured fastest (docs/training.md: 5,363 img/s per H100 against
    3,845 eager; Horovod cannot compile, train refuses --compile with it) and the one the size's expected figure was
    measured with (training/efficiency.py MEASURED_RECIPES). `--dist horovod` (or any --dist) keeps what it says;
    TensorFlow and Keras, and CPU runs (tests, the rehearsal), are left as they are."""
    framework = flag_value(train_flags, "--framework", "pytorch")
    chose = any(a == "--dist" or a.startswith("--dist=") for a in train_flags)
    if not gpu or framework != "pytorch" or chose:
        return list(train_flags)
    compiled = any(a in ("--compile", "--no-compile") for a in train_flags)
    return [*train_flags, "--dist", "ddp", *([] if compiled else ["--compile"])]


def torch_rank_env(env: Mapping[str, str]) -> dict[str, str]:
    """torch.distributed's rank variables for this process (pure), from whichever launcher started it: torchrun's
    own, else mpirun's or Horovod's Gloo launcher's mapped; MASTER_ADDR/MASTER_PORT as given (`launch` sets them for
    --dist ddp), else this host. No launcher at all: one process, rank 0 of 1. A launcher that gives only part of
    its set is refused: a guess would start worlds of one that wait for each other forever."""
    for launcher, names in LAUNCHER_RANK_VARIABLES:
        present = [ours for ours, theirs in names.items() if theirs in env]
        if not present:
            continue
        if len(present) != len(names):
            missing = ", ".join(theirs for ours, theirs in names.items() if theirs not in env)
            raise UsageError(f"--dist ddp: started by {launcher} without {missing}; launch DDP with torchrun, "
                             "`python -m training launch -- --dist ddp ...` or mpirun")
        ranks = {ours: env[theirs] for ours, theirs in names.items()}
        break
    else:
        ranks = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    if int(ranks["WORLD_SIZE"]) > 1 and "MASTER_ADDR" not in env:
        raise UsageError("--dist ddp: no MASTER_ADDR for a world of "
                         f"{ranks['WORLD_SIZE']}; start it with torchrun or `python -m training launch`")
    return {**ranks, "MASTER_ADDR": env.get("MASTER_ADDR", "127.0.0.1"),
            "MASTER_PORT": env.get("MASTER_PORT", str(DDP_MASTER_PORT))}


def ddp_rendezvous(hosts: list[Host], port: int = DDP_MASTER_PORT) -> dict[str, str]:
    """For --dist ddp under horovodrun (pure): where every rank meets, rank 0's host (the first) at `port` (the
    caller passes a MASTER_PORT the user set), forwarded to every rank by name as the launcher forwards NCCL_ and
    the rest."""
    first = hosts[0].name
    if first in LOCAL_NAMES and any(h.name not in LOCAL_NAMES for h in hosts):
        raise UsageError(f"--dist ddp: the first host {first} is where every rank meets, and the other hosts cannot "
                         "reach it by that name; name this host by its address in --hosts")
    return {"MASTER_ADDR": "127.0.0.1" if first in LOCAL_NAMES else first, "MASTER_PORT": str(port)}


def native_workers(hosts: list[Host], here: str, train_flags: list[str], *, python: str, cwd: str,
                   env: Mapping[str, str], port: int = TF_PORT) -> list[tuple[list[str], str]]:
    """--dist native (pure): one worker per host, (argv, TF_CONFIG) each, in the hosts' order (AZ_BATCH_HOST_LIST's,
    the same on every node, so worker 0 is its first host). The worker on `here` (this node) runs directly, with
    TF_CONFIG in its environment; each other one through the job's SSH (node-ssh's client config: its port and
    key), as one remote command of quoted words: TF_CONFIG and the forwarded environment (what mpirun -x
    forwards for Horovod: NCCL_, TF_, CUDA_...; no secrets) as `env NAME=VALUE`, then the training command."""
    workers = [f"{h.name}:{port}" for h in hosts]
    forwarded = {name: value for name, value in sorted(env.items()) if name.startswith(FORWARDED_PREFIXES)
                 and name != "TF_CONFIG"}
    train = [python, "-m", "training", "train", *train_flags]
    plan = []
    for index, host in enumerate(hosts):
        config = tf_config(workers, index)
        if host.name == here or host.name in LOCAL_NAMES:
            plan.append((train, config))
            continue
        words = ["env", *(f"{name}={value}" for name, value in forwarded.items()), f"TF_CONFIG={config}", *train]
        plan.append((["ssh", host.name, f"cd {shlex.quote(cwd)} && exec {shlex.join(words)}"], config))
    return plan


def start_native(plan: list[tuple[list[str], str]]) -> list:
    """Start every worker of the plan (native_workers), TF_CONFIG in its environment."""
    import subprocess

    return [subprocess.Popen(argv, env={**os.environ, "TF_CONFIG": config}) for argv, config in plan]


def wait_first_failure(procs: list) -> int:
    """Wait for all the processes; the first failure stops the others (a worker alone would wait for its peers
    forever). Returns the first non-zero exit status, or 0."""
    import time

    if len(procs) == 1:
        return procs[0].wait()
    while True:
        codes = [p.poll() for p in procs]
        failed = [c for c in codes if c]
        if failed or all(c == 0 for c in codes):
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                p.wait()
            return failed[0] if failed else 0
        time.sleep(1)


def build_command(hosts: list[Host], train_flags: list[str], *, python: str, horovodrun: str, ssh_port: int | None,
                  env_names: list[str], controller: str | None = None, has_mpi: bool = True,
                  command_name: str = "train", rank_prefix: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The horovodrun command line (pure): one rank per slot, `python -m training train FLAGS` each (after
    `rank_prefix`: the NUMA binding's wrapper, training/cluster/binding.py). Across nodes MPI where Open MPI is
    installed (the images), else Horovod's Gloo controller, which starts the remote ranks over the same SSH."""
    local = all(h.name in LOCAL_NAMES for h in hosts)
    controller = controller or ("gloo" if local or not has_mpi else "mpi")
    command = [horovodrun, f"--{controller}", "-np", str(sum(h.slots for h in hosts)),
               "-H", ",".join(f"{h.name}:{h.slots}" for h in hosts)]
    if ssh_port and not local:
        command += ["-p", str(ssh_port)]
    forwarded = sorted(name for name in env_names if name.startswith(FORWARDED_PREFIXES))
    if controller == "mpi" and forwarded:
        command += ["--mpi-args", " ".join(f"-x {name}" for name in forwarded)]
    return command + [*rank_prefix, python, "-m", "training", command_name, *train_flags]


def numa_binding(topology: str, slots: int, python: str, exists=os.path.exists,
                 read=lambda path: Path(path).read_text()) -> tuple[list[str], str]:
    """(the words before each rank's command, the line `launch` prints) for ranks bound to their GPU's NUMA node
    by the size's topology file (training/cluster/binding.py); no words where there is no file to bind by."""
    from training.cluster import binding

    if not topology:
        return [], "binding: none (no NCCL topology file: NCCL_TOPO_FILE or --topology names the size's)"
    if not exists(topology):
        return [], f"binding: none ({topology} is not on this node)"
    try:
        ranks = binding.plan(read(topology), slots)
    except (ValueError, SyntaxError) as err:  # ElementTree's ParseError is a SyntaxError
        raise UsageError(f"--topology {topology}: {err}; name the size's NCCL topology file") from None
    return binding.wrapper(ranks, python), f"binding from {Path(topology).name}: {binding.describe(ranks)}"


def horovod_has_mpi() -> bool:
    """Whether this environment's Horovod was built with MPI (horovodrun's own check): an image can have Open MPI's
    mpirun and a Horovod built for Gloo only (the container rehearsal's stand-in), where `horovodrun --mpi` refuses."""
    try:
        from horovod.common.util import mpi_built
    except ImportError:
        return False
    return bool(mpi_built())


def _horovodrun() -> str:
    beside = Path(sys.executable).parent / "horovodrun"  # the one in this environment, not another on PATH
    return str(beside) if beside.exists() else "horovodrun"


def main(argv: list[str]) -> int:
    if "--" in argv:
        split = argv.index("--")
        argv, train_flags = argv[:split], argv[split + 1:]
    else:
        train_flags = []
    parser = argparse.ArgumentParser(prog="python -m training launch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", help="HOST:SLOTS[,HOST:SLOTS...] (default: AZ_BATCH_HOST_LIST with --slots each)")
    parser.add_argument("--slots", type=int, default=1, help="processes per Batch node: its GPU count (default: 1)")
    parser.add_argument("--ssh-port", type=int, default=None, help="port of the other nodes' sshd (default: 22)")
    parser.add_argument("--controller", choices=("gloo", "mpi"), default=None,
                        help="Horovod controller (default: gloo on one machine; across nodes mpi where "
                             "mpirun is installed, else gloo)")
    parser.add_argument("--run", choices=("train", "interconnect-check"), default="train",
                        help="what every rank runs, with the flags after `--` (default: train); a job's train "
                             "checks the interconnect itself (--interconnect-check), so this is for a person at a node")
    parser.add_argument("--topology", default=os.environ.get("NCCL_TOPO_FILE", ""),
                        help="the size's NCCL topology file: each rank bound to its GPU's NUMA node's CPUs "
                             "(default: NCCL_TOPO_FILE, which the job sets for InfiniBand sizes; none: unbound)")
    parser.add_argument("--dry-run", action="store_true", help="print the command and exit")
    args = parser.parse_args(argv)
    if args.slots < 1:
        raise UsageError("--slots must be at least 1")
    if not train_flags:
        raise UsageError("no training flags after `--`; e.g. -- --data synthetic --steps 20 --output-dir OUT")
    hosts = parse_hosts(args.hosts) if args.hosts else hosts_from_batch(os.environ, args.slots)
    # The frameworks' own collective timeouts, for every rank (forwarded to the other nodes by name)
    os.environ.update(collective_env(os.environ))
    output_dir = Path(flag_value(train_flags, "--output-dir", DEFAULT_OUTPUT_DIR))
    if args.run == "train":
        os.environ[RUN_DIR_ENV] = str(output_dir.resolve())  # where a rank that refuses its input records it
        fast = fast_recipe_flags(train_flags, gpu=shutil.which("nvidia-smi") is not None)
        if fast != train_flags:
            print(f"launch: PyTorch on GPUs without a --dist: {shlex.join(fast[len(train_flags):])} (the measured "
                  "fastest recipe; --dist horovod keeps Horovod)", file=sys.stderr, flush=True)
            train_flags = fast
    if dist_of(train_flags) == "native" and args.run == "train":
        # One worker per node (it drives all the node's GPUs); this node is Batch's primary, where launch runs:
        # AZ_BATCH_MASTER_NODE is its IP:PORT (https://learn.microsoft.com/azure/batch/batch-compute-node-environment-variables).
        here = os.environ.get("AZ_BATCH_MASTER_NODE", "").rpartition(":")[0]
        plan = native_workers(hosts, here, train_flags, python=sys.executable, cwd=os.getcwd(), env=os.environ)
        # The -H form of Horovod's line (one worker per host), which the rehearsal reads for its placement.
        print(f"launch: --dist native, one worker per node -H {','.join(f'{h.name}:1' for h in hosts)}",
              file=sys.stderr, flush=True)
        for argv, config in plan:
            print(f"launch: worker TF_CONFIG={config}: {shlex.join(argv)}", file=sys.stderr, flush=True)
        if args.dry_run:
            return 0
        # Classified, recorded and kept out as Horovod's ranks are: the workers run the same watchdog and excepthook
        return run_attempt(None, hosts, output_dir, args.ssh_port, start=lambda: start_native(plan))
    if dist_of(train_flags) == "ddp":
        # DDP's processes started by horovodrun/mpirun: each maps the launcher's rank variables
        # (torch_rank_env) and meets the others at the first host.
        try:
            port = int(os.environ.get("MASTER_PORT", DDP_MASTER_PORT))  # a port the user set wins
        except ValueError:
            raise UsageError(f"MASTER_PORT={os.environ['MASTER_PORT']!r} is not a port number") from None
        os.environ.update(ddp_rendezvous(hosts, port))
    prefix, bound = numa_binding(args.topology, max(h.slots for h in hosts), sys.executable)
    print(f"launch: {bound}", file=sys.stderr, flush=True)
    if prefix:  # GPU i is the i-th by PCI bus id, as in the topology file (training/cluster/binding.py)
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    command = build_command(hosts, train_flags, python=sys.executable, horovodrun=_horovodrun(),
                            ssh_port=args.ssh_port, env_names=list(os.environ), controller=args.controller,
                            has_mpi=shutil.which("mpirun") is not None and horovod_has_mpi(), command_name=args.run,
                            rank_prefix=prefix)
    ranks = sum(h.slots for h in hosts)
    print(f"launch: {ranks} ranks on {len(hosts)} host(s): {shlex.join(command)}", file=sys.stderr, flush=True)
    if args.dry_run:
        return 0
    if args.run != "train":  # a person's interconnect check: nothing to classify or record, horovodrun's status as is
        os.execvp(command[0], command)
    return run_attempt(command, hosts, output_dir, args.ssh_port)


DEFAULT_OUTPUT_DIR = "out"  # training/config.py's default --output-dir


def flag_value(train_flags: list[str], flag: str, default: str) -> str:
    """The value of `flag` in the training flags (the last one wins, as argparse does), or `default`."""
    value = default
    for i, arg in enumerate(train_flags):
        if arg == flag and i + 1 < len(train_flags):
            value = train_flags[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.partition("=")[2]
    return value


def gpus_failing(hosts: list[Host]) -> list[tuple[str, str]]:
    """Every node's GPUs as the driver sees them now (training/cluster/gpu_check.py), where this node has nvidia-smi;
    nothing on CPU."""
    from training.cluster import gpu_check, node_checks  # node_checks: ECC, retired pages, Xids, InfiniBand ports

    if not shutil.which("nvidia-smi"):
        return []
    here = os.environ.get("AZ_BATCH_MASTER_NODE", "").rpartition(":")[0]  # the primary: this node
    return gpu_check.failing([(h.name, h.slots) for h in hosts], lambda name: name in LOCAL_NAMES or name == here,
                             deep=node_checks.check)


def run_attempt(command: list[str] | None, hosts: list[Host], output_dir: Path, ssh_port: int | None = None,
                check_gpus: Callable[[list[Host]], list[tuple[str, str]]] = gpus_failing,
                start: Callable[[], list] | None = None) -> int:
    """Run the ranks' launcher (horovodrun; or `start()`'s processes, --dist native's workers, the first failure
    stopping the others) as a child, passing on the signals Batch or a person send, then say
    what the attempt ended as: one line (`fault: node HOST: ...` or `fault: code: ...`), its record in
    OUTPUT_DIR/attempts.jsonl, the blamed nodes taken out of scheduling (training/cluster/keep_out.py) and the
    exit code of its kind (training/errors.py). Batch retries any non-zero exit; a retry after a code fault of the
    same job is refused here before any rank starts (attempts.code_fault_before says why exitConditions cannot)."""
    import signal
    import subprocess

    from training.cluster import attempts, keep_out, mpirun

    job = os.environ.get("AZ_BATCH_JOB_ID", "")
    previous = attempts.previous_attempts(output_dir)
    for earlier in previous:  # for `status`: this attempt's stdout.txt holds them all
        print(attempts.record_line(earlier), flush=True)
    started = attempts.now()
    refused = attempts.code_fault_before(previous, job)
    if refused:  # Batch's retry of a code/data fault: refused before any rank starts (attempts.code_fault_before)
        line = (f"fault: code: not run again: attempt {refused['attempt']} of job {job} ended on a code/data fault "
                f"({refused['reason']}, exit {refused['exit_code']}), which fails the same on any node; fix the code "
                "or the data and submit again")
        print(line, file=sys.stderr, flush=True)
        verdict = attempts.Verdict("code", refused["exit_code"], "retry refused", (), line)
        record = attempts.attempt_record(len(previous), started, attempts.now(), [h.name for h in hosts], verdict, job)
        attempts.append(output_dir, record)
        print(attempts.record_line(dataclasses.asdict(record)), flush=True)
        return verdict.exit_code
    attempts.clear(output_dir)  # this attempt's records only
    bad = check_gpus(hosts)  # at each attempt's start, before any rank
    if bad:
        verdict = attempts.Verdict("node", EXIT_NODE_FAULT, "gpu check", tuple(host for host, _ in bad),
                                   f"fault: node {','.join(h for h, _ in bad)}: gpu check ("
                                   f"{'; '.join(f'{h}: {why}' for h, why in bad)})")
    else:
        # horovodrun's stderr passes through us: a rank's fault record is on it (training/watchdog.py FAULT_LINE)
        procs = start() if start else [subprocess.Popen(command, stderr=subprocess.PIPE)]
        watch = mpirun.Watch(sys.stderr)  # mpirun's notice of a rank ended by a signal, which names its rank
        relay = None if start else attempts.FaultLines(procs[0].stderr, watch)
        signalled: list[int] = []

        def forward(signum, frame):  # horovodrun ends its ranks itself; a native worker is one process
            signalled.append(signum)
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signum)

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, forward)
        rc = wait_first_failure(procs)
        if signalled:  # stopped from outside (a cancel, a preemption, maxWallClockTime): no node to blame
            verdict = attempts.Verdict("stopped", 128 + signalled[0], "stopped by a signal", (),
                                       f"fault: none: stopped by signal {signalled[0]} (a cancel, an eviction or the "
                                       "task's time limit)")
        else:
            said = relay.join() if relay else []
            verdict = attempts.classify(attempts.merged(said, attempts.read_records(output_dir)), rc)
            verdict = attempts.blame_unreachable(verdict, [h.name for h in hosts], ssh_port or 22)
            verdict = mpirun.blame_signalled(verdict, watch.notice, [(h.name, h.slots) for h in hosts])
    record = attempts.attempt_record(len(previous), started, attempts.now(),
                                     [h.name for h in hosts], verdict, job)
    if verdict.kind != "ok":
        print(verdict.line, file=sys.stderr, flush=True)
        if verdict.kind == "node" and verdict.blamed_hosts:
            record.blamed_nodes, record.kept_out = keep_out.keep_out(verdict.blamed_hosts, os.environ)
            print(f"launch: {record.kept_out}", file=sys.stderr, flush=True)
        print(f"launch: attempt {record.attempt} cost {record.node_hours:.3f} node-hours "
              f"({len(hosts)} node(s)); exit {verdict.exit_code}", file=sys.stderr, flush=True)
    attempts.append(output_dir, record)
    print(attempts.record_line(dataclasses.asdict(record)), flush=True)
    return verdict.exit_code
