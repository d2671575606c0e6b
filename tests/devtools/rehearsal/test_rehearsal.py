"""The rehearsal: the dev stack's own job, run as Azure Batch runs it, on two local nodes (network namespaces with
their own addresses), with the job's real sshd between them and Azurite as the storage account."""
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from infra import REPO_ROOT
from infra.backends.shared import REHEARSAL_FILE
from tests.infra.backends.batch import job_nodes

WHY_NOT = job_nodes.unavailable()  # why this machine cannot host the rehearsal's nodes, or ''
pytestmark = pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or "-")
FAST = "--num-classes 4 --image-size 32 --batch-size 8 --steps 30 --log-every 5 --checkpoint-every 10 --workers 1"
# A member's job: --num-classes left out (the folder's), a few steps on one node.
MEMBER_ARGS = "--image-size 32 --batch-size 8 --steps 4 --log-every 2 --checkpoint-every 100 --workers 1"


def rehearse(*args, timeout=900):
    result = subprocess.run([sys.executable, "-m", "infra", "rehearse", "--stack", "dev", *args], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=timeout)
    return result


def verb(*args, timeout=600):
    """A job verb in its own process, as a user runs it from another shell."""
    return subprocess.run([sys.executable, "-m", "infra", *args, "--stack", "dev"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout)


@contextlib.contextmanager
def served(work):
    """`python -m devtools rehearse --serve`: an ended rehearsal's local Azure again, for the verbs."""
    process = subprocess.Popen([sys.executable, "-m", "devtools", "rehearse", "--stack", "dev", "--serve", "--work",
                                str(work)], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while json.loads((work / REHEARSAL_FILE).read_text())["pid"] != process.pid:
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.5)
        yield
    finally:
        process.terminate()
        process.communicate(timeout=60)


def start_rehearsal(work, train_args, *flags):
    process = subprocess.Popen([sys.executable, "-m", "infra", "rehearse", "--stack", "dev", "--nodes", "2",
                                "--framework", "pytorch", f"--args={train_args}", "--work", str(work), *flags],
                               cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (work / "batch-state.json").exists():  # written when the job is submitted
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.5)
    return process


def pets(root):
    """A team member's own folder: real JPEGs of 3 classes, train/ and val/."""
    from PIL import Image

    for split, per_class in (("train", 8), ("val", 2)):
        for shade, cls in enumerate(("cat", "dog", "ship")):
            (root / split / cls).mkdir(parents=True)
            for i in range(per_class):
                image = Image.new("RGB", (48, 48), (100 * shade, 25 * i, 200 - 100 * shade))
                image.save(root / split / cls / f"{i}.jpg")
    return root


def test_pytorch_on_two_nodes_with_their_own_addresses_end_to_end(tmp_path):
    """The whole user path: the rehearsal launches the job; from other processes, as from another shell, the user
    follows it, reads its status and downloads the model, which runs in onnxruntime. Then, while the stack stays
    up (--stay), a team member with only the member file and their own sign-in uploads their folder, has it
    staged, submits a job on it, follows it and downloads a model that names their classes."""
    from devtools.rehearsal.run import MEMBER_CLIENT_ID, check_model, efficiency_line

    work = tmp_path / "work"
    rehearsal = start_rehearsal(work, FAST, "--stay")
    try:
        follow = verb("logs", "--rehearsal", str(work), "--follow")  # while it trains; returns when the task ends
        # A team member's path: no Pulumi state and no secret, only the member file the platform engineer made from
        # the stack's outputs, and the member's own sign-in at the rehearsal's Azure AD (a user of the stack's
        # teamMembers group, with the roles the program grants it), no --rehearsal and no --stack.
        values = json.loads((work / REHEARSAL_FILE).read_text())
        (tmp_path / "outputs.json").write_text(json.dumps(values["outputs"]))
        member = tmp_path / "member-dev.json"
        made = verb("member-file", "--outputs", str(tmp_path / "outputs.json"), "-o", str(member))
        assert made.returncode == 0 and "sig=" not in member.read_text(), made.stderr
        member_env = {**os.environ, **values["env"], "AZURE_CLIENT_ID": MEMBER_CLIENT_ID}

        def as_member(*args):
            return subprocess.run([sys.executable, "-m", "infra", *args, "--outputs", str(member)], cwd=REPO_ROOT,
                                  env=member_env, capture_output=True, text=True, timeout=600)

        folder = pets(tmp_path / "pets")
        # The stack's one `data` container holds the rehearsal's own 4 classes already, and staging adds files,
        # never removes any (training/data/staged.py): refused before a byte moves, then merged on purpose.
        refused = as_member("upload", str(folder))
        assert refused.returncode == 1 and "already holds 4 class(es) that it lacks" in refused.stderr, refused
        upload = as_member("upload", str(folder), "--add")
        assert upload.returncode == 0 and "3 classes, 24 training images, 6 validation images" in upload.stderr, upload
        restage = as_member("restage", "--follow", "--poll-seconds", "1")  # the NFS server stages the upload now
        assert restage.returncode == 0, restage
        submit = as_member("submit", "--nodes", "1", f"--args={MEMBER_ARGS}")  # the gate passes: staged as it is now
        assert submit.returncode == 0, submit
        member_job = re.search(r"submitted (\S+):", submit.stdout).group(1)
        member_follow = as_member("logs", "--follow")  # the stack's newest job: the member's
        assert member_follow.returncode == 0 and "done: step 4" in member_follow.stdout, member_follow
        member_results = tmp_path / "member-results"
        member_download = as_member("download", "--dest", str(member_results))
        assert member_download.returncode == 0, member_download
    finally:  # the end of --stay (whatever failed above: the rehearsal never outlives the test)
        rehearsal.send_signal(signal.SIGINT)
        out, err = rehearsal.communicate(timeout=900)
    member_run = member_results / member_job / "run"
    # Uploaded with --add: the member's job trains on both datasets, and its model names every class in label order.
    classes = json.loads((member_run / "classes.json").read_text())
    assert classes == ["cat", "dog", "n00000000", "n00000001", "n00000002", "n00000003", "ship"], classes
    assert check_model(member_run / "model.onnx", "pytorch") == "(2, 7)"
    # Its launch asked one rank per GPU of the size; a node here runs --processes-per-node (1), and says so.
    assert f"rehearsal: {member_job}'s launch asks --slots 8 (one rank per GPU of the size)" in out
    assert json.loads((member_run / "summary.json").read_text())["world_size"] == 1
    predict = subprocess.run([str(REPO_ROOT / ".venv-torch" / "bin" / "python"), "-m", "training", "predict",
                              str(member_run / "model.onnx"), str(folder / "val" / "ship" / "0.jpg"), "--top", "1"],
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert predict.returncode == 0 and re.fullmatch(rf"\S+/0\.jpg: ({'|'.join(classes)}) \d+\.\d%\n",
                                                     predict.stdout), predict
    assert rehearsal.returncode == 0, out[-3000:] + err[-3000:]
    assert follow.returncode == 0 and "step 5/30" in follow.stdout and "done: step 30" in follow.stdout, follow
    hosts = re.search(r"world size 2 on hosts (\S+), (\S+) ", out)
    assert hosts and hosts.group(1).split(":")[0] != hosts.group(2).split(":")[0], out[-2000:]
    assert "task exit code 0, retried 0 time(s)" in out
    assert re.search(r"where: rank 0 on node0 \(\S+\); rank 1 on node1 \(\S+\)", out), out[-2000:]
    job = re.search(r"submitted (\S+):", out).group(1)
    assert f"python -m infra logs --stack dev --job {job} --follow --rehearsal {work}" in out
    assert "not rehearsed:" in out
    # The NFS server, in a first deploy's order: created with the stack while `data` is empty, its timer's run
    # stages nothing and the gate refuses; the deployer uploads; the next run stages every file; the job sees them.
    unit = "dltrain-stage.timer started dltrain-stage.service: /usr/local/sbin/dltrain-stage exited"
    assert f"nfs: created with the stack, `data` still empty: {unit} 4: stage: waiting for data since" in out
    assert ("gate: `infra submit` and `pulumi up` submit no job: no job was submitted, so no GPU node waits: the "
            "`data` container is empty") in out
    assert "data: 160 files uploaded to `data` by the deployer, after the stack exists" in out
    assert f"nfs: the timer's next run: {unit} 0: stage: first staging: staged 160 files" in out
    assert "nfs: 160 of 160 files in the export (imagenet/, .staged); the submit gate passes: the NFS server " \
           "staged 160 files" in out
    assert "data: the job's --data folder as the trainer scans it: 128 train + 32 val images = 160 of the 160 " \
           "files uploaded\n" in out
    assert out.index("the submit gate passes") < out.index("submitted train-dev-")
    # The people's SAS, minted as the program asks: each allows exactly its letters; the data SAS stages.
    people = next(line for line in out.splitlines() if line.startswith("people's SAS"))
    assert people.endswith("data sp=rl: list yes, read yes, write refused; `training stage` with it: 160 files; "
                           "outputs sp=cw: list refused, read refused, write yes; scripts sp=rl: list yes, read yes, "
                           "write refused"), people

    # After the rehearsal has ended, its local Azure has gone with it, and the verbs say how to bring it back.
    ended = verb("status", "--rehearsal", str(work))
    assert ended.returncode == 1 and "has ended, and its local Azure with it: `python -m devtools rehearse --serve" \
        in ended.stderr, ended.stderr
    with served(work):
        status = verb("status", "--rehearsal", str(work), "--job", job)
        assert status.returncode == 0 and f"job {job}: completed" in status.stdout, status.stderr
        assert "task: completed, exit code 0, retried 0 time(s)" in status.stdout
        fetched = tmp_path / "fetched"  # through the Azure AD front, signed in as the deployer
        download = verb("download", "--rehearsal", str(work), "--job", job, "--dest", str(fetched))
        assert download.returncode == 0, download.stderr
        cancel = verb("cancel", "--rehearsal", str(work))
        # The member again, once the rehearsal has ended and is served (its endpoints have moved: the member file
        # made from them anew).
        values = json.loads((work / REHEARSAL_FILE).read_text())
        (tmp_path / "outputs.json").write_text(json.dumps(values["outputs"]))
        made = verb("member-file", "--outputs", str(tmp_path / "outputs.json"), "-o", str(member))
        assert made.returncode == 0 and "sig=" not in member.read_text(), made.stderr
        member_env = {**os.environ, **values["env"], "AZURE_CLIENT_ID": MEMBER_CLIENT_ID}

        member_status = as_member("status", "--job", job)
        assert f"job {job}: completed" in member_status.stdout, member_status.stderr
        member_logs = as_member("logs", "--job", job)
        assert "done: step 30" in member_logs.stdout, member_logs.stderr
        member_fetched = tmp_path / "member-fetched"
        member_download = as_member("download", "--job", job, "--dest", str(member_fetched))
        assert member_download.returncode == 0 and (member_fetched / job / "run" / "summary.json").is_file(), \
            member_download.stderr
    assert cancel.returncode == 1 and "has already completed; nothing to cancel" in cancel.stderr
    run = fetched / job / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 30
    # The 2-node job checked its interconnect first, over the job's own 2 Gloo ranks (no floor in the rehearsal),
    # and the report printed the same figure.
    assert summary["interconnect_ranks"] == 2 and summary["interconnect_busbw_gbps"] > 0
    assert summary["interconnect_floor_gbps"] is None
    assert f"interconnect check: all-reduce bus bandwidth {summary['interconnect_busbw_gbps']} GB/s" in out
    # and its efficiency view: on CPU no expectation holds, and the bound is the run's own
    assert f"  efficiency: {efficiency_line(summary['efficiency'])}\n" in out and "expected unknown" in out
    # Uploaded by Batch's output files with the nodes' identity, fetched by `infra download`, run in onnxruntime.
    assert (fetched / job / "logs" / "stdout.txt").is_file()
    assert check_model(run / "model.onnx", "pytorch") == "(2, 4)"


def test_cancel_from_another_shell_stops_the_task_without_a_retry(tmp_path):
    work = tmp_path / "work"
    rehearsal = start_rehearsal(work, FAST.replace("--steps 30", "--steps 3000"))
    deadline = time.monotonic() + 300
    while "step 5/" not in verb("logs", "--rehearsal", str(work)).stdout:
        assert rehearsal.poll() is None and time.monotonic() < deadline, rehearsal.communicate()
        time.sleep(1)
    asked = time.monotonic()
    cancel = verb("cancel", "--rehearsal", str(work))  # returns once Batch's job has left `terminating`
    assert cancel.returncode == 0 and "cancelled train-dev-" in cancel.stdout, cancel.stderr
    out, err = rehearsal.communicate(timeout=300)
    assert time.monotonic() - asked < 60, "the task did not stop within a minute"
    assert rehearsal.returncode == 1, out[-2000:] + err[-2000:]
    with served(work):
        status = verb("status", "--rehearsal", str(work)).stdout
    assert "completed" in status and "exit code 0" not in status and "retried 0 time(s)" in status, status


def test_verbs_without_a_rehearsal_say_how_to_start_one(tmp_path):
    result = verb("logs", "--rehearsal", str(tmp_path))
    assert result.returncode == 1 and result.stderr.strip() == (
        f"error: no rehearsal in {tmp_path}: run `python -m infra rehearse --stack dev` (as root) first, or name "
        "the folder it used: --rehearsal WORK")


def test_keras_on_two_nodes(tmp_path):
    if not (REPO_ROOT / ".venv-tf" / "bin" / "python").exists():
        pytest.skip(".venv-tf is not built")
    result = rehearse("--nodes", "2", "--framework", "keras",
                      f"--args={FAST.replace('--steps 30', '--steps 10')} --no-export", "--work", str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"world size 2 on hosts \S+, \S+ ", result.stdout), result.stdout[-2000:]


def test_a_spot_eviction_requeues_and_a_node_lost_retries_both_resume_from_the_checkpoint(tmp_path, capsys):
    """One run, two faults. First a Spot eviction of node 1 after the first checkpoint: Batch requeues the task,
    not counted as a retry (RehearsalBatch.preempt, docs cited there), and the run resumes from its newest
    checkpoint. Then, after a checkpoint of the resumed run, node 1 is lost (its processes die, no requeue): the
    task fails and Batch's retry resumes it. The run reaches the same final step."""
    from devtools.rehearsal.run import rehearse as run_rehearsal
    from tests.devtools.rehearsal import batch_rest_spec

    faults = {}

    def evict_then_lose_node_one(service, pool, job):
        checkpoints = pool.export / "runs" / job / "checkpoints"

        def watch():
            deadline = time.monotonic() + 600
            while not (checkpoints / "ckpt-00000010.pt").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            faults["evicted"] = (time.monotonic(), service.preempt(job, pool.nodes[1]))
            while not service.requeued_at and time.monotonic() < deadline:
                time.sleep(0.1)
            before = set(checkpoints.glob("ckpt-*.pt"))
            while not set(checkpoints.glob("ckpt-*.pt")) - before and time.monotonic() < deadline:
                time.sleep(0.2)  # a checkpoint the resumed run wrote
            time.sleep(1)
            faults["lost"] = (time.monotonic(), pool.kill(pool.nodes[1]), service, job)
        threading.Thread(target=watch, daemon=True).start()

    result = run_rehearsal("dev", 2, "pytorch", FAST.replace("--steps 30", "--steps 40") + " --no-export", tmp_path,
                           fault=evict_then_lose_node_one)
    out = capsys.readouterr().out
    evicted_at, evicted_processes = faults["evicted"]
    lost_at, lost_processes, service, job = faults["lost"]
    assert evicted_processes > 0 and lost_processes > 0
    assert "Spot node node1 was preempted; Batch requeues the task (not a retry: retried 0 time(s))" in out, out[-3000:]
    assert len(service.requeued_at) == 1 and service.requeued_at[0] - evicted_at < 60
    assert result.retries == 1 and result.exit_code == 0, out[-3000:]  # the loss is the one retry
    assert service.retried_at[0] - lost_at < 60  # the task failed within a minute of losing the node
    summary = json.loads((result.downloaded / "run" / "summary.json").read_text())
    assert summary["steps"] == 40 and summary["resumed_from_step"] >= 20
    assert (result.downloaded / "logs" / "stdout.txt").read_text().count("resumed from") == 2
    # What the endpoint answered for this task and job, as the REST spec has them.
    answers = [("GET", f"/jobs/{job}", 200, json.dumps(service.jobs[job]).encode()),
               ("GET", f"/jobs/{job}/tasks/train", 200, json.dumps(service.tasks[job]).encode())]
    assert batch_rest_spec.violations(answers) == []


def test_a_job_cancelled_during_the_coordination_command_ends_without_a_retry_or_the_application(tmp_path):
    """Cancel arrives while the coordination command runs on the nodes (Batch's job terminate, through the real
    azure-batch client and the endpoint): the task ends, is not retried though retries are allowed, and the
    application command never starts (https://learn.microsoft.com/rest/api/batchservice/job/terminate: running
    tasks are terminated; https://learn.microsoft.com/azure/batch/batch-mpi: the application command runs only
    once every coordination command has finished). Batch's own part on two nodes, with no training: seconds."""
    from azure.batch import BatchClient

    from devtools.emulator import Azurite
    from devtools.rehearsal.batch import RehearsalBatch
    from devtools.rehearsal.batch_endpoint import BatchEndpoint
    from devtools.rehearsal.nodes import Pool
    from devtools.rehearsal.storage import Account
    from infra.backends.batch.service import AzureBatch
    from infra.core import config
    from infra.preview import offline
    from tests.devtools.rehearsal import batch_rest_spec
    from tests.infra.backends.batch.fake_batch import _Token

    ev = offline.evaluate(config.from_stack_file("dev"))
    job = {"id": "cancel-in-coordination", "poolInfo": {"poolId": "gpu"}, "onAllTasksComplete": "noaction"}
    task = {"id": "train", "commandLine": "/bin/sh -c 'echo started > application-started'",
            "constraints": {"maxTaskRetryCount": 2},
            "multiInstanceSettings": {"numberOfInstances": 2,
                                      "coordinationCommandLine": "/bin/sh -c 'touch coordinating; sleep 120'"}}
    export = tmp_path / "export"
    export.mkdir()
    with Azurite(location=tmp_path / "azurite") as azurite, Pool(tmp_path / "nodes", 2, export, "nfs") as pool:
        batch = RehearsalBatch(pool, Account(azurite, ev), {"PATH": "/usr/bin:/bin"}, {}, {}, tmp_path, log=print)
        with BatchEndpoint(batch) as endpoint, BatchClient(endpoint.url, _Token(),
                                                           connection_verify=endpoint.ca_file) as client:
            service = AzureBatch(endpoint.url, client=client)
            service.submit(job, task)
            wd = [batch._task_dir(node, job["id"], "train") / "wd" for node in pool.nodes]
            deadline = time.monotonic() + 60
            while not all((folder / "coordinating").exists() for folder in wd):
                assert time.monotonic() < deadline, "the coordination command did not start on both nodes"
                time.sleep(0.1)
            asked = time.monotonic()
            service.terminate(job["id"])  # returns once the job has left `terminating`
            batch.wait(job["id"], timeout=60)
            took = time.monotonic() - asked
            ended = service.get_task(job["id"], "train")
            assert batch_rest_spec.violations(endpoint.responses) == []
    assert took < 10, f"the task took {took:.1f}s to stop"
    info = ended["executionInfo"]
    assert ended["state"] == "completed" and info["retryCount"] == 0 and info["exitCode"] != 0, ended
    assert batch.jobs[job["id"]]["state"] == "completed"
    assert len(batch.processes[job["id"]]) == 2  # the two coordination commands, no application command
    assert not (wd[0] / "application-started").exists() and batch.retried_at == []


def test_a_nodes_temporary_files_are_its_own_and_go_with_it(tmp_path):
    """A node's processes (training ranks: PyTorch's DataLoader workers make multiprocessing's pymp-* folders)
    write their temporary files in the node's own folder, as on a VM, not in the host's /tmp: a rank killed by a
    fault leaves nothing on the host."""
    from devtools.rehearsal.nodes import NODE_TMPDIR, Pool
    from devtools.rehearsal.run import _node_env

    env = _node_env("pytorch")
    export = tmp_path / "export"
    export.mkdir()
    make = ["python", "-c", "import tempfile; print(tempfile.mkdtemp(prefix='pymp-'))"]
    with Pool(tmp_path / "nodes", 2, export, "nfs") as pool:
        made = subprocess.run(pool.command(pool.nodes[0], make), env=env, capture_output=True, text=True, check=True)
        folder = made.stdout.strip()
        assert str(Path(folder).parent) == str(NODE_TMPDIR), folder
        other = subprocess.run(pool.command(pool.nodes[1], ["ls", "-A", str(NODE_TMPDIR)]), env=env,
                               capture_output=True, text=True, check=True)
        assert other.stdout == ""  # node 1 has its own
    assert not Path(folder).exists()  # nor is it on the host


def test_an_identity_without_the_role_is_refused_as_azure_would(tmp_path):
    """Storage access is what the program's role assignments grant: the NFS server's identity may read `data`
    and write `status`, never write `outputs`; the nodes may read `scripts` but not write there."""
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import ContainerClient

    from devtools.emulator import Azurite
    from devtools.rehearsal.storage import Account, principal_of
    from infra.preview import offline
    from infra.core import config

    ev = offline.evaluate(config.from_stack_file("dev"))
    nodes = principal_of(ev, ev.outputs["pullIdentityId"])
    nfs = next(r.state["principalId"] for r in ev.of_type("azure-native:managedidentity:UserAssignedIdentity")
               if "nfs" in r.name)
    urls = ev.outputs["containerUrls"]
    with Azurite() as azurite:
        account = Account(azurite, ev)
        account.create_containers()
        assert account.upload_scripts() > 20
        ContainerClient.from_container_url(account.as_identity(nodes, urls["outputs"])).upload_blob("ok", b"1")
        assert list(ContainerClient.from_container_url(account.as_identity(nodes, urls["scripts"])).list_blobs())
        for principal, container in ((nfs, "outputs"), (nodes, "scripts"), (nodes, "status")):
            client = ContainerClient.from_container_url(account.as_identity(principal, urls[container]))
            with pytest.raises(HttpResponseError) as refused:
                client.upload_blob("x", b"1")
            assert refused.value.status_code == 403, (principal, container)


def test_a_job_whose_identity_cannot_read_the_scripts_fails_before_it_runs(tmp_path, capsys):
    """The task's common resource files come from `scripts` with the nodes' identity: without its Reader role
    the download is refused and the task fails without running, as Batch fails it."""
    from devtools.rehearsal.run import rehearse as run_rehearsal

    def revoke_the_nodes_scripts_reader(account):
        account.grants = [g for g in account.grants if not (g.container == "scripts" and "rl" == g.permissions
                                                              and "pull" in g.principal_id)]

    result = run_rehearsal("dev", 2, "pytorch", FAST, tmp_path, tamper_storage=revoke_the_nodes_scripts_reader)
    out = capsys.readouterr().out
    assert result.failure and result.failure["code"] == "ResourceFileDownloadFailed", out[-2000:]
    assert "AuthorizationPermissionMismatch" in result.failure["message"] or "403" in result.failure["message"]
    assert result.uploaded == [] or all("/logs/" in name for name in result.uploaded)
    assert "job train-dev" in out and "completed" in out


def test_the_nfs_servers_unit_fails_without_its_reader_role_on_data(tmp_path):
    """The staging unit, written by cloud-init's code from the VM's user data and run as systemd starts it, signs
    in as the VM's identity: without Storage Blob Data Reader on `data` it is refused, and no job is submitted."""
    from devtools.rehearsal.nfs_server import StagingFailed
    from devtools.rehearsal.run import rehearse as run_rehearsal

    def revoke_the_nfs_servers_data_reader(account):
        account.grants = [g for g in account.grants if not (g.container == "data" and "nfs" in g.principal_id)]

    with pytest.raises(StagingFailed) as failed:
        run_rehearsal("dev", 2, "pytorch", FAST, tmp_path, tamper_storage=revoke_the_nfs_servers_data_reader)
    message = str(failed.value)
    assert message.startswith("dltrain-stage.service exited with 2"), message  # the stager's usage/refusal code
    assert "not allowed: listing the container" in message and "Storage Blob Data Contributor" in message, message
    assert not (tmp_path / "batch-state.json").exists()  # nothing was submitted


@pytest.mark.parametrize("args,message", [
    (["--nodes", "3"], "error: --nodes 3: give 1 to 2 (the pool grows to maxNodes=2 at most)"),
    (["--args=--precision fp8"], "error: --args: argument --precision: invalid choice: 'fp8'"),
    # Only a rehearsal's own folder is ever emptied for the next one.
    (["--work", "training"], f"error: --work {REPO_ROOT}/training: the folder is not empty and not a rehearsal's"),
])
def test_bad_input_is_one_line_before_any_node_exists(args, message):
    result = rehearse(*args, timeout=120)
    assert result.returncode == 2 and result.stderr.startswith(message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "rehearsal of stack" not in result.stdout


def test_the_report_gives_img_per_sec_per_worker_its_expectation_and_bound(tmp_path):
    from devtools.rehearsal.run import Rehearsal, report
    from training import efficiency

    view = efficiency.summary_fields(2.5, efficiency.expectation(5155, device="cpu", image_size=32),
                                     efficiency.classify(efficiency.StepTimes(0.1, 4.0, 5.9, 4)))["efficiency"]
    text = report(Rehearsal("train-dev-1", "pytorch", [], 2, 5.0, [], [], 0, 0, tmp_path, efficiency=view))
    assert ("  efficiency: 2.5 img/s per worker (expected unknown: a CPU run (the size's 5155 img/s is a GPU figure)), "
            "exchange-bound (data 1%, compute 40%, exchange 59%)\n") in text
