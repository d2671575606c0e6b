"""The rehearsal: the dev stack's own job, run as Azure Batch runs it, on two local nodes (network namespaces with
their own addresses), with the job's real sshd between them and Azurite as the storage account."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infra import REPO_ROOT
from infra.backends.shared import REHEARSAL_FILE
from tests.devtools.rehearsal.rehearsal_runs import (FAST, MEMBER_ARGS, WHY_NOT, pets, rehearse, served,
                                                     start_rehearsal, verb)

pytestmark = pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or "-")


def test_pytorch_on_two_nodes_with_their_own_addresses_end_to_end(tmp_path):
    """The whole user path: the rehearsal launches the job; from other processes, as from another shell, the user
    follows it, reads its status and downloads the model, which runs in onnxruntime. Then, while the stack stays
    up (--stay), a team member with only the member file and their own sign-in uploads their folder, submits a job
    on it (its node stages it: dataTier node-local), follows it and downloads a model that names their classes."""
    from devtools.rehearsal.identities import MEMBER_CLIENT_ID
    from devtools.rehearsal.report import check_model, efficiency_line

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
        # The dataset `default` (the container's root) holds the rehearsal's own 4 classes: refused before a byte
        # moves; the member's classes go into a dataset of their own (training/data/datasets.py), and the job
        # trains on that one alone, beside the rehearsal's job on the default.
        refused = as_member("upload", str(folder))
        assert refused.returncode == 1 and "already holds 4 class(es) that it lacks" in refused.stderr, refused
        assert "--dataset NAME for a dataset of its own" in refused.stderr, refused
        upload = as_member("upload", str(folder), "--dataset", "pets")
        assert upload.returncode == 0 and "3 classes, 24 training images, 6 validation images" in upload.stderr, upload
        listed = as_member("datasets")
        assert listed.returncode == 0 and "pets: 3 class(es) (cat, dog, ship), 24 train, 6 val images" in \
            listed.stdout and "default: 4 class(es)" in listed.stdout, listed
        # dataTier node-local: no NFS server to restage; the job's node stages the upload at its start
        restage = as_member("restage")
        assert restage.returncode == 1 and "with dataTier node-local each job stages its dataset" in restage.stderr
        submit = as_member("submit", "--nodes", "1", "--dataset", "pets", f"--args={MEMBER_ARGS}")
        assert submit.returncode == 0, submit
        member_job = re.search(r"submitted (\S+):", submit.stdout).group(1)
        member_follow = as_member("logs", "--follow")  # the stack's newest job: the member's
        assert member_follow.returncode == 0 and "done: step 4" in member_follow.stdout, member_follow
        member_results = tmp_path / "member-results"
        member_download = as_member("download", "--dest", str(member_results))
        assert member_download.returncode == 0, member_download
    finally:  # the end of --stay (whatever failed above: the rehearsal never outlives the test)
        # SIGTERM, which --stay takes as Ctrl-C: a SIGINT reaches nothing where it is ignored, as it is in
        # whatever a non-interactive shell starts in the background (a test run of CI's, its children too).
        rehearsal.terminate()
        out, err = rehearsal.communicate(timeout=900)
    member_run = member_results / member_job / "run"
    # On its own dataset: the member's model names its classes alone, and records the dataset and its hash.
    classes = json.loads((member_run / "classes.json").read_text())
    assert classes == ["cat", "dog", "ship"], classes
    assert check_model(member_run / "model.onnx", "pytorch") == "(2, 3)"
    assert json.loads((member_run / "summary.json").read_text())["dataset"].startswith("pets sha256:")
    # Its launch asked one rank per GPU of the size; a node here runs --processes-per-node (1), and says so.
    assert f"rehearsal: {member_job}'s launch asks --slots 8 (one rank per GPU of the size)" in out
    assert json.loads((member_run / "summary.json").read_text())["world_size"] == 1
    predict = subprocess.run([str(REPO_ROOT / ".venv-torch" / "bin" / "python"), "-m", "training", "predict",
                              str(member_run / "model.onnx"), str(folder / "val" / "ship" / "0.jpg"), "--top", "1"],
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    # its first line; predict then scores the labelled folder's file (accuracy, confusion: training/predict.py)
    assert predict.returncode == 0 and re.match(rf"\S+/0\.jpg: ({'|'.join(classes)}) \d+\.\d%\n",
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
    # dataTier node-local, in a first deploy's order: the gate refuses while `data` is empty; the deployer uploads
    # shards; the gate passes on `data` alone (the NFS server stages nothing); every node's start task makes its
    # local volume and the job's coordination command stages the shards into it; the ranks train from there.
    assert ("gate: `infra submit` and `pulumi up` submit no job: no job was submitted, so no GPU node waits: the "
            "`data` container is empty") in out
    shards = re.search(r"data: 160 images uploaded to `data` by the deployer as (\d+) train \+ (\d+) val shards", out)
    assert shards and int(shards.group(1)) >= 2, out[:3000]  # one shard a rank at least
    assert "the NFS server stages nothing" in out and "the submit gate passes: `data` holds" in out
    assert out.index("the submit gate passes") < out.index("submitted train-dev-")
    assert "data: the job's --data folder on node0 (local-data/datasets/default) as the trainer reads it: 128 train " \
           "+ 32 val images in shards = 160 of the 160 images uploaded\n" in out
    # The report: where each rank read its data, and node-stage's promises (a corrupted shard on node1 fetched
    # again; a node holding the dataset's marker copies nothing).
    assert "data: node1's local volume holds a corrupted shards/train-000000.tar" in out
    for rank, node in enumerate(("node0", "node1")):
        assert re.search(rf"rank {rank} on {node} \(\S+\) read datasets/default from {node}:/mnt/batch/shared/"
                         r"local-data \(shards, staged in [\d.]+ s: \d+ shards, \d+ kept\)", out), out[-3000:]
    assert re.search(r"the job recorded the dataset it trained on: default sha256:[0-9a-f]{64}", out)
    assert re.search(r"node1: the corrupted shards/train-000000.tar was fetched again: MD5 [0-9a-f]{32} = the "
                     "manifest's", out), out[-3000:]
    assert "node0: node-stage again, as the next job's coordination command: copy skipped" in out
    # The people's SAS, minted as the program asks: each allows exactly its letters; the data SAS stages.
    people = next(line for line in out.splitlines() if line.startswith("people's SAS"))
    assert re.search(r"data sp=rl: list yes, read yes, write refused; `training stage` with it: \d+ files; "
                     "outputs sp=cw: list refused, read refused, write yes; scripts sp=rl: list yes, read yes, "
                     "write refused$", people), people

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
    from devtools.rehearsal.report import Rehearsal, report
    from training import efficiency

    view = efficiency.summary_fields(2.5, efficiency.expectation(5155, device="cpu", image_size=32),
                                     efficiency.classify(efficiency.StepTimes(0.1, 4.0, 5.9, 4)))["efficiency"]
    text = report(Rehearsal("train-dev-1", "pytorch", [], 2, 5.0, [], [], 0, 0, tmp_path, efficiency=view))
    assert ("  efficiency: 2.5 img/s per worker (expected unknown: a CPU run (the size's 5155 img/s is a GPU figure)), "
            "exchange-bound (data 1%, compute 40%, exchange 59%)\n") in text


@pytest.mark.parametrize("distribution,launch,transport", [
    ("horovod", "launch: 4 ranks on 2 host(s): /opt/venv/bin/horovodrun --mpi -np 4 -H a:2,b:2 python", "MPI over TCP"),
    ("horovod", "launch: 2 ranks on 2 host(s): /x/bin/horovodrun --gloo -np 2 -H a:1,b:1 python", "Gloo"),
    ("ddp", "launch: 4 ranks on 2 host(s): /opt/venv/bin/horovodrun --mpi -np 4 -H a:2,b:2 python", "Gloo"),
    ("horovod", "", "Gloo"),
    ("native", "", "TensorFlow collectives"),
])
def test_the_report_names_what_carried_the_all_reduces(tmp_path, distribution, launch, transport):
    """Under `horovodrun --mpi` Horovod's all-reduces go through MPI; DDP's CPU backend is Gloo however its ranks
    were started. The report said "Gloo" for both until the Keras job ran under mpirun."""
    from devtools.rehearsal.report import Rehearsal, collectives_transport, report

    assert collectives_transport(distribution, f"node-ssh: primary\n{launch}\n") == transport
    text = report(Rehearsal("train-dev-1", "keras", [], 4, 3.5, [], [], 0, 0, tmp_path, interconnect_gbps=0.005,
                            transport=transport))
    assert f"  throughput: 3.5 img/s (CPU, {transport})\n" in text
    assert f"all-reduce bus bandwidth 0.005 GB/s (CPU, {transport}; no floor: rehearsal)" in text
