"""`python -m devtools rehearse --stack NAME` (or `python -m infra rehearse`, which runs it): what the stack hands
to Azure, run here as Azure would run it.

The Pulumi program is evaluated offline (as `plan` does); from what it declares, and through the same
functions `pulumi up` and `infra submit` use (batch_spec.job_inputs, job_spec, task_spec), this:
1. plays the storage account with Azurite: the declared containers, the `scripts` blobs as `pulumi up`
   uploads them, each identity's access as its role assignments grant it;
2. plays the NFS server's staging in a first deploy's order: the server's user data through cloud-init's own
   code; its staging unit, run as its timer would, finds `data` empty (reports "waiting for data", and the
   submit gate refuses); the deployer uploads a dataset of real JPEG files into the stack that now exists; the
   timer's next run stages it with the NFS server's identity into the export folder (`.staged` marker and
   `status` report), and the gate passes; after the job, the job's data folder is scanned as the trainer does;
3. plays Batch (devtools/rehearsal/batch.py) on N local nodes (devtools/rehearsal/nodes.py): start task,
   common resource files, coordination (the job's own sshd) on every node, the application command on the
   primary, retries, output files to `outputs`; its data plane is a local HTTPS endpoint
   (devtools/rehearsal/batch_endpoint.py) that the real azure-batch client reaches, signed in at the
   rehearsal's Azure AD (devtools/rehearsal/azure_ad.py) as the deployer;
4. follows the job with the same verbs a user has (`infra logs --follow`, `status`, `download`), checks the
   model with onnxruntime, and reports what ran where and what was not rehearsed.

Everything stays in the rehearsal's folder (default .rehearsal/<stack>, replaced by the stack's next rehearsal):
the nodes' Batch trees, the export, Azurite's data and the Batch state, and REHEARSAL_FILE (the local endpoints
and the deployer's sign-in, mode 0600), through which, from another shell, `python -m infra
status|logs [--follow]|download|cancel --stack NAME --rehearsal` reach the rehearsal exactly as they reach Azure.
Once it has ended, `python -m devtools rehearse --serve` serves what it left until interrupted.
With --stay, the stack stays up after its job, as a deployed one does, until interrupted: a team member
(MEMBER_CLIENT_ID, in the stack's teamMembers group, which the rehearsal adds so that the program declares the
members' grants) uploads, asks the NFS server to restage, submits, follows and downloads from the member file alone
(docs/jobs.md). With --scarce, the pool first stops one node short of the job by quota: the job waits, is ended at
its allocation deadline and the pool gives its node back; then the nodes come late for the next job, which trains
(devtools/rehearsal/scarce.py).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from infra import REPO_ROOT
from infra.backends.shared import REHEARSAL_FILE, JobError, StackOutputs, now_utc, require_staged
from devtools.rehearsal.identities import (PEOPLE, batch_client, batch_token, grant_deployer, rehearsed_config,
                                           write_endpoints)
from devtools.rehearsal import node_data
from devtools.rehearsal.nodes import NODE_TMPDIR
from devtools.rehearsal.report import Rehearsal, check_model, collectives_transport, report
from training import frameworks

VENVS = {f.name: f.image.venv for f in frameworks.FRAMEWORKS.values()}  # the local environment of each framework
MARKER = ".rehearsal"  # in every rehearsal folder: only such a folder is ever emptied for the next one
DEBS = REPO_ROOT / ".cache" / "debs" / "root"
# Small enough for 2 CPU cores in about a minute: what the job trains instead of the stack's trainingArgs.
DEFAULT_ARGS = ("--num-classes 4 --image-size 64 --batch-size 8 --steps 30 --log-every 5 --checkpoint-every 10 "
                "--workers 1 --base-lr 0.05 --warmup-steps 3")
def _node_env(framework: str) -> dict[str, str]:
    """The image's environment, for the local training environment standing in for the image."""
    venv = REPO_ROOT / VENVS[framework]
    if not (venv / "bin" / "python").exists():
        raise SystemExit(f"error: {VENVS[framework]} is not built; run `make setup` (or `make {VENVS[framework]}"
                         "/.installed`)")
    if not (DEBS / "usr" / "sbin" / "sshd").exists():
        raise SystemExit("error: Debian's OpenSSH is not unpacked in .cache/debs; run `make setup`")
    return {
        # The image's PATH has its Python first and OpenSSH installed; here: the venv, Debian's unpacked OpenSSH.
        "PATH": f"{venv}/bin:{DEBS}/usr/sbin:{DEBS}/usr/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LD_LIBRARY_PATH": f"{DEBS}/usr/lib/x86_64-linux-gnu:{DEBS}/lib/x86_64-linux-gnu",
        "HOME": "/root", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
        # The node's own temporary folder (nodes.NODE_TMPDIR); horovodrun exports it to the other ranks with the
        # rest of this environment (horovod/runner/common/util/env.py: every variable but a few is exportable).
        "TMPDIR": str(NODE_TMPDIR),
    }


def _say(text: str) -> None:
    print(text, flush=True)


def rehearse(stack: str, nodes: int, framework: str | None, train_args: str | None, work: Path,
             processes_per_node: int = 1, follow: bool = True, fault=None, tamper_storage=None, container: bool = False,
             stay: bool = False, spare_nodes: int = 0, scarce: bool = False) -> Rehearsal:
    """`tamper_storage(account)` (before the data is staged) and `fault(service, pool, job)` (once the job is
    submitted): the tests' ways to break things as Azure can. `stay`: after the job, serve the verbs of other shells
    and people until SIGINT or SIGTERM (stay_up). `spare_nodes`: local nodes beyond the job's, Azure's reserve: they
    join the pool only when the stack's autoscale formula asks for more nodes than it holds (a node that left after a
    fault: devtools/rehearsal/autoscale.py), never as a spare the formula did not ask for. `scarce`: the pool
    stops one node short of the job's, which waits past its deadline and is ended; then the nodes come late for the
    next job, which trains (devtools/rehearsal/scarce.py)."""
    from devtools.emulator import Azurite
    from devtools.rehearsal.azure_ad import AzureAd
    from devtools.rehearsal.batch import RehearsalBatch
    from devtools.rehearsal.batch_endpoint import BatchEndpoint, ScarceCapacity
    from devtools.rehearsal.nodes import Pool
    from devtools.rehearsal.storage import Account, identities_by_client_id, principal_of
    from infra.backends.batch import operate
    from infra.preview import offline
    from infra.backends.batch import spec as batch_spec
    from infra.core.config.sections import parse_training_args

    cfg = rehearsed_config(stack)
    if cfg.backend != "batch":
        raise JobError(f"--stack {stack}: the rehearsal plays the Batch backend, and this stack's backend "
                                  f"is {cfg.backend} (its job is checked by azure-ai-ml's own schema in the tests)")
    ev = offline.evaluate(cfg)
    framework = framework or cfg.training.framework
    args = parse_training_args(framework, train_args if train_args is not None else DEFAULT_ARGS, key="--args")
    inputs = batch_spec.job_inputs(cfg, StackOutputs.from_json(ev.outputs), framework, nodes, args,
                                  processes_per_node)
    pool_spec = ev.one("azure-native:batch:Pool").inputs
    mount = pool_spec["mountConfiguration"][0]
    mount_name = next(iter(mount.values()))["relativeMountPath"]
    node_env = _node_env(framework)
    if container:  # the job's commands in the image, on a real Docker engine (devtools/rehearsal/containers.py)
        from devtools.rehearsal.containers import in_containers
        Pool, RehearsalBatch = in_containers(framework, _say)
    export = work / "nfs-export"
    export.mkdir(parents=True, exist_ok=True)
    _say(f"rehearsal of stack {stack}: {framework} on {nodes} node(s) x {inputs.slots} process(es)")

    with Azurite(location=work / "azurite") as azurite, \
            Pool(work / "nodes", nodes + spare_nodes, export, mount_name) as pool:
        account = Account(azurite, ev)
        containers = account.create_containers()
        scripts = account.upload_scripts()
        _say(f"storage: Azurite on 127.0.0.1:{azurite.port} as the stack's account; containers "
             f"{', '.join(containers)}; {scripts} training runtime files in `scripts` as `pulumi up` uploads them")
        if tamper_storage:
            tamper_storage(account)
        grant_deployer(account, containers)
        with AzureAd(account, {**identities_by_client_id(ev), **PEOPLE}, work / "azure-ad") as ad:
            uploaded, nfs_timer = _stage_data(account, ev, work, export, node_env, ad)
            node_local = isinstance(uploaded, node_data.Uploaded)  # dataTier node-local: the nodes stage the shards
            _people_sas(account, work)
            for node in pool.nodes:
                _say(f"node {node.hostname}: {node.address} (its own network, mount and UTS namespaces, the image's "
                     "users)")
            identities = {inputs.node_identity_id: principal_of(ev, inputs.node_identity_id)}
            batch = RehearsalBatch(pool, account, node_env, pool_spec, identities, work, log=_say, slots=inputs.slots,
                                   allocated=nodes)
            # --scarce: Azure gave the pool one node fewer than the job's, with a quota resize error (ScarceCapacity)
            served = ScarceCapacity(batch, have=nodes - 1, came=now_utc()) if scarce else batch
            with BatchEndpoint(served, tls=(str(ad.cert), str(ad.key)),
                               authorized=batch_token(ad, ev, batch.node_operators)) as endpoint, \
                    batch.reach_from_nodes(endpoint.url, ad.env(), {inputs.data_url: ad.container_url(inputs.data_url)}
                                           if node_local else None):  # the account, tokens and `data`, from the nodes
                env = write_endpoints(work, ev, endpoint.url, ad)
                _say(f"batch: the account's data plane at {endpoint.url} (HTTPS, Azure AD tokens of the rehearsal's "
                     f"deployer), reached through the real azure-batch client; {REHEARSAL_FILE} in {work}")
                service = batch_client(endpoint.url, env)
                if node_local:  # node-stage mends it (node_data.py)
                    _say(node_data.corrupt_a_shard(pool.nodes[nodes - 1], account, uploaded.manifest))
                job = operate.submit(service, inputs, now_utc(), sys.stdout, verb_flags=_verb_flags(stack, work))
                if scarce:
                    from devtools.rehearsal.scarce import play
                    played = play(service, served, inputs, job, sys.stdout, verb_flags=_verb_flags(stack, work))
                    _say("\n".join(f"scarce capacity: {line}" for line in played.lines))
                    job = played.job
                if fault:
                    fault(batch, pool, job)
                if follow:  # as a user follows it: `infra logs --follow --rehearsal` in its own process
                    sys.stdout.flush()  # what this process printed first comes first
                    subprocess.run([sys.executable, "-m", "infra", "logs", "--stack", stack, "--job", job,
                                    "--follow", "--rehearsal", str(work)], cwd=REPO_ROOT, check=False)
                batch.wait(job)
                status = operate.status(service, job)
                task = service.get_task(job, batch_spec.TASK_ID)
                saw = (node_data.saw(pool.nodes[0], uploaded) if node_local  # before anyone else's upload is staged
                       else _data_the_job_saw(export, uploaded))
                after = (node_data.checks_after_job(batch, job, pool.nodes, pool.nodes[nodes - 1], uploaded.manifest,
                                                    node_env) if node_local else [])
                if stay:
                    stay_up(nfs_timer, account.as_deployer("status", "rl"))
        _say(saw)
        print("\n".join(status.lines()), flush=True)
        info = task["executionInfo"]
        if info.get("failureInfo"):
            _say(f"task failure: {info['failureInfo']}")
        dest = work / "results"
        outputs_url = account.as_deployer("outputs", "rl")
        try:
            _say(operate.download(outputs_url, job, dest))
        except JobError as err:
            _say(f"download: {err}")
        summary_path = dest / job / "run" / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        stderr = dest / job / "logs" / "stderr.txt"  # launch prints its horovodrun line there
        stderr_text = stderr.read_text(errors="replace") if stderr.is_file() else ""
        hosts = _hosts_from_launch(stderr_text)
        if info.get("exitCode", 0) != 0:
            tail = "\n".join(f"    {line}" for line in stderr_text.strip().splitlines()[-12:])
            _say(f"the job failed (exit code {info.get('exitCode')}) as it would on Azure; its stderr ends:\n{tail}")
        names = {node.address: node.hostname for node in pool.nodes}
        placement = []
        for host in hosts:  # horovodrun numbers ranks in host order, `slots` per host
            address, _, slots = host.partition(":")
            for _ in range(int(slots or 1)):
                placement.append(f"rank {len(placement)} on {names.get(address, '?')} ({address})")
        return Rehearsal(job, framework, placement, summary.get("world_size", 0), summary.get("img_per_sec", 0.0), hosts,
                         batch.uploaded.get(job, []), info.get("exitCode", -1), info.get("retryCount", 0), dest / job,
                         info.get("failureInfo"), summary.get("interconnect_busbw_gbps"), summary.get("efficiency"),
                         container=batch.report_lines() if container else None,
                         scarce=played.lines if scarce else None,
                         data=[*node_data.rank_lines(hosts, pool.nodes, job, summary), *after] if node_local else None,
                         transport=collectives_transport(summary.get("distribution", ""), stderr_text))


def default_work(stack: str) -> Path:
    return REPO_ROOT / ".rehearsal" / stack


def _verb_flags(stack: str, work: Path) -> str:
    """What the job verbs need to find this rehearsal: `--rehearsal`, with the folder unless it is the default."""
    return " --rehearsal" if work == default_work(stack).resolve() else f" --rehearsal {work}"


def prepare_work(work: Path) -> None:
    """An empty folder for a rehearsal: a new or empty one, or a previous rehearsal's (emptied); never another."""
    if work.exists() and any(work.iterdir()):
        if not (work / MARKER).exists():
            raise RehearsalRefused(f"--work {work}: the folder is not empty and not a rehearsal's; name a new or "
                                   "empty folder")
        pid = _serving_pid(work)
        if pid:
            raise RehearsalRefused(f"--work {work}: a rehearsal is running there (pid {pid}); wait for it or use "
                                   "another folder")
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / MARKER).write_text("a `python -m devtools rehearse` folder; the next rehearsal here replaces it\n")


def _serving_pid(work: Path) -> int | None:
    """The process that serves the folder's local Azure (a rehearsal or --serve), if it still runs."""
    try:
        pid = int(json.loads((work / REHEARSAL_FILE).read_text())["pid"])
        os.kill(pid, 0)
    except (OSError, ValueError, KeyError, json.JSONDecodeError):
        return None
    return pid


class RehearsalRefused(Exception):
    """A rehearsal request that cannot go on; `str()` names the input and the fix."""


def stay_up(nfs_timer, status_url: str, poll_s: float = 1.0) -> None:
    """After the rehearsal's job: the stack stays up, as a deployed one does, for the verbs of other shells and
    people (a member's upload, restage, submit, logs, download), until SIGINT or SIGTERM. Jobs they submit run on
    the nodes; the NFS server's timer elapses when a restage request waits in `status` (on Azure it elapses every
    minute and its unit reads the request itself; here only when there is one, to spare the CPU)."""
    from infra.backends import staging

    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    _say("stay: the stack stays up after the job (storage, Batch, the nodes, the NFS server's timer): other shells' "
         "verbs reach it, with the member file or --rehearsal; SIGINT or SIGTERM (Ctrl-C) ends it")
    try:
        while True:
            if staging.restage_pending(status_url):
                _say(f"nfs: a restage request: {nfs_timer()}")
            time.sleep(poll_s)
    except KeyboardInterrupt:
        _say("stay: ended")
    finally:
        signal.signal(signal.SIGTERM, previous)


def serve(stack: str, work: Path) -> None:
    """A finished rehearsal's local Azure, again: its recorded Batch account (devtools/rehearsal/batch.py's
    RecordedAccount) behind the Batch endpoint, its Azurite data behind the Azure AD front, REHEARSAL_FILE
    rewritten; until interrupted (Ctrl-C or SIGTERM)."""
    from devtools.emulator import Azurite
    from devtools.rehearsal.azure_ad import AzureAd
    from devtools.rehearsal.batch import RecordedAccount
    from devtools.rehearsal.batch_endpoint import BatchEndpoint
    from devtools.rehearsal.storage import Account
    from infra.preview import offline

    pid = _serving_pid(work)
    if pid:
        raise RehearsalRefused(f"--work {work}: served already (pid {pid}); the job verbs reach it with --rehearsal")
    try:
        recorded = RecordedAccount(work)
    except FileNotFoundError:
        raise RehearsalRefused(f"no rehearsal in {work}: run `python -m devtools rehearse --stack {stack}` (as root) "
                               "first, or name the folder it used: --work WORK") from None
    ev = offline.evaluate(rehearsed_config(stack))
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with Azurite(location=work / "azurite") as azurite:
        account = Account(azurite, ev)
        grant_deployer(account, [account.container(url) for url in ev.outputs["containerUrls"].values()])
        with AzureAd(account, PEOPLE, work / "azure-ad") as ad, \
                BatchEndpoint(recorded, tls=(str(ad.cert), str(ad.key)), authorized=batch_token(ad, ev)) as endpoint:
            write_endpoints(work, ev, endpoint.url, ad)
            _say(f"serving the rehearsal in {work}: Batch at {endpoint.url}, storage through Azure AD; the job verbs "
                 f"reach it with --rehearsal; Ctrl-C ends it")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass


def _stage_data(account, ev, work: Path, export: Path, node_env: dict[str, str], ad):
    """The NFS server's part, in the order of a first deploy: `up` creates the server with the empty `data`
    container; the VM's user data, read by cloud-init's own code, writes the staging unit and its timer; the
    timer's first run finds nothing (the gate refuses a job); the deployer uploads the dataset into the stack
    that now exists; the timer's next run stages it, signing in as the VM's identity; the gate passes.
    Returns the number of files uploaded, and the timer's next run (a call) for later elapses."""

    from devtools.rehearsal.nfs_server import NfsServer
    from infra.core.containers import DATASET, STAGED_MARKER
    from infra.backends import staging

    def deployers_gate(data_url: str, status_url: str):
        """infra submit's and `pulumi up`'s check, with the deployer's access to the declared containers."""
        local = {url: account.as_deployer(account.container(url), "rl") for url in (data_url, status_url) if url}
        return staging.data_ready(local[data_url], local.get(status_url, ""))

    vm = ev.one("azure-native:compute:VirtualMachine")
    server = NfsServer(vm.inputs["osProfile"]["customData"], work / "nfs-vm", export)
    config = server.boot()
    _say(f"nfs: {vm.name}'s user data read by cloud-init's own code: {len(config['write_files'])} files written "
         f"under {server.root}; the setup script (RAID, XFS, nfs-kernel-server) needs a VM and is not run")
    if ev.config.nfs.data_tier == "node-local":  # the share keeps checkpoints and outputs; the nodes stage the data
        uploaded = node_data.upload_shards(account, ev, work, node_env, deployers_gate, _say)
        return uploaded, lambda: "dataTier node-local: the NFS server stages nothing (no restage to serve)"
    urls = {declared: ad.container_url(declared) for declared in ev.outputs["containerUrls"].values()}
    _say(f"nfs: created with the stack, `data` still empty: {server.run_staging_unit(urls, ad.env())}")
    uploaded = node_data.gate_then_upload(account, StackOutputs.from_json(ev.outputs), deployers_gate, True,
                                          ev.config.stack, work, node_env, _say)
    _say(f"data: {uploaded} files uploaded to `data` by the deployer, after the stack exists")
    _say(f"nfs: the timer's next run: {server.run_staging_unit(urls, ad.env())}")
    count = sum(1 for p in (export / DATASET).rglob("*") if p.is_file() and not p.name.startswith("."))
    marker = (export / DATASET / STAGED_MARKER).exists()
    # The gate `infra submit` and `pulumi up` apply before submitting: the unit's report against `data` now.
    line = require_staged(StackOutputs.from_json(ev.outputs), deployers_gate, True, ev.config.stack)
    _say(f"nfs: {count} of {uploaded} files in the export ({DATASET}/{', ' + STAGED_MARKER if marker else ''}); "
         f"the submit gate passes: {line}")
    return uploaded, lambda: server.run_staging_unit(urls, ad.env())


def _data_the_job_saw(export: Path, uploaded: int) -> str:
    """The job's --data folder (the export, as its nodes mount it) scanned as the trainer scans it."""
    from infra.core.containers import DATASET
    from training.data.folder import scan

    classes, train = scan(export / DATASET, "train")
    splits = {"train": len(train), "val": len(scan(export / DATASET, "val", classes)[1])}  # val/ by train/'s classes
    seen = sum(splits.values())
    return (f"data: the job's --data folder as the trainer scans it: {splits['train']} train + {splits['val']} val "
            f"images = {seen} of the {uploaded} files uploaded" + ("" if seen == uploaded else ": FILES MISSING"))


def _people_sas(account, work: Path) -> None:
    """The SAS the stack exports for people (`pulumi stack output sas --show-secrets`), minted as the program asks
    listStorageAccountServiceSAS; each is tried for what it must allow and refuse, and docs/data.md's use of the
    data SAS (stage the dataset elsewhere) is run."""

    account.write_probes()
    lines = []
    for sas in sorted(account.people_sas(), key=lambda sas: sas.container):  # the program asks in any order
        allowed, expected = sas.allows(), sas.expected()
        if allowed != expected:
            raise RuntimeError(f"the {sas.container} SAS (sp={sas.permissions}) allows {allowed}, not {expected}")
        lines.append(f"{sas.container} sp={sas.permissions}: "
                     + ", ".join(f"{op} {'yes' if ok else 'refused'}" for op, ok in allowed.items()))
        if sas.container == "data":
            subprocess.run([sys.executable, "-m", "training", "stage", sas.url, str(work / "people" / "data")],
                           env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            staged = sum(1 for p in (work / 'people' / 'data').rglob('*') if p.is_file() and not p.name.startswith('.'))
            lines[-1] += f"; `training stage` with it: {staged} files"
    expiry = {sas.expiry for sas in account.people_sas()}
    _say(f"people's SAS, as the program asks listStorageAccountServiceSAS (until {', '.join(sorted(expiry))}): "
         + "; ".join(lines))


def _hosts_from_launch(text: str) -> list[str]:
    for line in text.splitlines():
        if line.startswith("launch:") and " -H " in line:
            words = line.split()
            if "-H" in words:
                return words[words.index("-H") + 1].split(",")
    return []


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools rehearse", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", default="dev", help="stack name: reads Pulumi.<STACK>.yaml (default: dev)")
    parser.add_argument("--nodes", type=int, default=2, help="local nodes (default: 2)")
    parser.add_argument("--processes-per-node", type=int, default=1, help="training processes per node (default: 1)")
    parser.add_argument("--framework", choices=tuple(VENVS), help="default: the stack's trainingFramework")
    parser.add_argument("--args", help=f"train flags for the job (default: {DEFAULT_ARGS!r}; the stack's own "
                                       "trainingArgs are sized for GPUs)")
    parser.add_argument("--dist", help="the job's --dist, added to its train flags (native: TensorFlow's and "
                                       "Keras's MultiWorkerMirroredStrategy, one worker per node)")
    parser.add_argument("--work", type=Path, help="folder for the nodes, the export, the storage and the results "
                                                  "(default: .rehearsal/STACK; the next rehearsal there replaces it)")
    parser.add_argument("--stay", action="store_true",
                        help="after the job, keep the stack up (storage, Batch, the nodes, the NFS server's staging on "
                             "a restage request) for other shells' verbs, e.g. a team member's `infra upload`, "
                             "`restage`, `submit`, `logs`, `download` with the member file; until Ctrl-C")
    parser.add_argument("--container", action="store_true",
                        help="run the job's commands in the framework's image, started as Batch starts container "
                             "tasks, on a real Docker engine (root; the image is built on a local stand-in base: "
                             "devtools/rehearsal/containers.py)")
    parser.add_argument("--scarce", action="store_true",
                        help="Azure gives the pool one node fewer than the job's (a quota resize error): the job waits, "
                             "`status` says why, past its deadline `submit` ends it and the pool gives its node back; "
                             "then the nodes come late for the next job, which trains (the verbs are asked as at 10 "
                             "and 31 minutes: devtools/rehearsal/scarce.py)")
    parser.add_argument("--serve", action="store_true",
                        help="serve the local Azure of the rehearsal that ran in the folder (ended), so that the job "
                             "verbs' --rehearsal reach it again; until Ctrl-C")
    args = parser.parse_args(argv)
    # SIGTERM as Ctrl-C from the start, not only in stay_up: its default ends this process at once, with no `with`
    # unwound, and Azurite, the nodes and the `logs --follow` child (subprocess.run kills it on the way out) stayed.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    from devtools.rehearsal.nfs_server import StagingFailed
    from devtools.rehearsal.nodes import RehearsalUnavailable
    from infra.core.config.schema import ConfigError

    def go(work: Path) -> Rehearsal:
        train_args = args.args if args.args is not None else DEFAULT_ARGS
        if args.dist:
            train_args += f" --dist {shlex.quote(args.dist)}"
        result = rehearse(args.stack, args.nodes, args.framework, train_args, work, args.processes_per_node,
                          stay=args.stay, container=args.container, scarce=args.scarce)
        model = result.downloaded / "run" / "model.onnx"
        if model.is_file():
            _say(f"model.onnx from `outputs` in onnxruntime: logits of shape {check_model(model, result.framework)}")
        return result

    try:
        work = (args.work or default_work(args.stack)).resolve()
        if args.scarce and args.serve:
            raise RehearsalRefused("--scarce: plays a new rehearsal's job; --serve serves an ended one: leave one of "
                                   "them out")
        if args.scarce and args.nodes < 2:
            raise RehearsalRefused("--scarce: the pool stops one node short of the job, so the job needs --nodes 2 "
                                   "or more")
        if args.serve:
            serve(args.stack, work)
            return 0
        prepare_work(work)
        result = go(work)
    except (ConfigError, JobError, RehearsalUnavailable, RehearsalRefused) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except StagingFailed as err:
        print(f"error: the NFS server's staging failed, as it would on Azure: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rehearsal: stopped (Ctrl-C or SIGTERM); what it started has ended", file=sys.stderr)
        return 130
    print(report(result))
    return 0 if result.exit_code == 0 else 1
