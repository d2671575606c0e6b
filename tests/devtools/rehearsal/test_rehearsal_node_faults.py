"""The rehearsal under node faults that need more than its two nodes' training: a rank that hangs (its collective
never returns) ends by the watchdog, its node is taken out of scheduling and asked to leave the pool at the local
Batch endpoint, and the retry runs on the node the stack's autoscale formula then asks for (Azure's reserve: no spare
node joins the pool unless the formula's target exceeds the pool) from the newest checkpoint; a Spot eviction, then a
node that dies, both resume from the checkpoint (the second on the added node); a code fault is not run again. Minutes of wall: run by `make
test-faults`, apart from make test."""
import json
import re
import threading
import time

import pytest

from tests.devtools.rehearsal.rehearsal_runs import FAST, WHY_NOT

pytestmark = pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or "-")
# What keep_out says of the blamed node (training/cluster/keep_out.py), and what the pool's autoscale then does.
KEPT_OUT = ("scheduling disabled (taskcompletion) on node(s) tvm-1 of pool gpu; removal asked (taskcompletion): it "
            "leaves the pool when this task ends, and autoscale adds a replacement")
ADDED = "rehearsal: the pool's autoscale formula asks for 2 node(s) with 1 in the pool; Batch adds tvm-2"


# The watchdog's bounds for a CPU run of a few steps (training/watchdog.py; the job's defaults suit 8-GPU nodes):
# 60 s until steps are measured, then 3 x the median step time but at least 20 s (a step here takes 1-6 s on the shared
# cores), 30 s while rank 0 checkpoints; Horovod's Gloo timeout (30 s by default) raised, so that the watchdog, not
# Gloo, ends the hang.
QUICK_WATCHDOG = {"TRAINING_WATCHDOG_FIRST_S": "60", "TRAINING_WATCHDOG_FLOOR_S": "20", "TRAINING_WATCHDOG_FACTOR": "3",
                  "TRAINING_WATCHDOG_BUSY_S": "30", "TRAINING_WATCHDOG_POLL_S": "1",
                  "HOROVOD_GLOO_TIMEOUT_SECONDS": "120"}
# One epoch (128 images, 16 a step): the hang after the checkpoint of step 4 (the watchdog follows the step time once
# 3 steps are measured), the retry's 4 steps after it.
HANG_ARGS = FAST.replace("--steps 30", "--steps 8").replace("--checkpoint-every 10", "--checkpoint-every 4")


def _until(done, deadline: float, poll_s: float = 0.1) -> None:
    """Wait until `done()` or the deadline (time.monotonic()), whichever comes first."""
    while not done() and time.monotonic() < deadline:
        time.sleep(poll_s)


def _training_processes(pool, node):
    """The node's `python -m training train` processes (the rank and its loader's worker)."""
    found = []
    for pid in pool._pids(node):
        try:
            words = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"training" in words and b"train" in words:
            found.append(pid)
    return found


def test_a_hung_rank_ends_by_the_watchdog_and_the_retry_runs_on_a_replacement_node_from_the_checkpoint(tmp_path,
                                                                                                     capsys):
    """Rank 1's processes on node 1 are stopped (SIGSTOP: its collective never returns, its sockets stay open) after
    the checkpoint of step 4. Rank 0's watchdog ends the run within its bound and names node 1; `launch` classifies
    a node fault (exit 76) and, as the pool's identity (given the node-operations role a team adds: docs/architecture
    .md), disables scheduling on node 1 through the account's endpoint (AZ_BATCH_ACCOUNT_URL, relayed to the nodes).
    Batch's retry then runs on nodes 0 and 2 (node 2: the replacement autoscale would add) and resumes from the
    checkpoint of step 4."""
    import os
    import signal

    from devtools.rehearsal.run import rehearse as run_rehearsal
    from training.cluster import attempts

    seen = {}

    def hang_rank_one(service, pool, job):
        service.node_env.update(QUICK_WATCHDOG)  # the image's environment, before the first attempt (after start tasks)
        assert not service.placed.get(job), "the first attempt started before the test set its environment"
        service.node_operators.update(service.identities.values())  # the pool identity, with the role a team adds
        checkpoints = pool.export / "runs" / job / "checkpoints"

        def watch():
            _until((checkpoints / "ckpt-00000004.pt").exists, time.monotonic() + 600)
            time.sleep(0.5)  # back in the loop, in the next step's collective
            pids = _training_processes(pool, pool.nodes[1])
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            seen.update(stopped_at=time.monotonic(), pids=pids, service=service, pool=pool, job=job,
                        newest=sorted(p.name for p in checkpoints.glob("ckpt-*.pt"))[-1])
        threading.Thread(target=watch, daemon=True).start()

    result = run_rehearsal("dev", 2, "pytorch", HANG_ARGS + " --no-export", tmp_path, fault=hang_rank_one,
                           spare_nodes=1)
    out = capsys.readouterr().out
    service, pool = seen["service"], seen["pool"]
    assert seen["pids"], "no training process found on node 1"
    assert result.exit_code == 0 and result.retries == 1, out[-3000:]
    detected = service.retried_at[0] - seen["stopped_at"]
    print(f"hang: stopped rank 1 at {seen['newest']}; the task failed and was retried {detected:.1f} s later")
    assert detected < 60, f"the hang took {detected:.0f} s to end"
    # The first attempt: a hang, a node fault blaming node 1, taken out of scheduling; the retry ran elsewhere.
    records = attempts.read_lines((result.downloaded / "logs" / "stdout.txt").read_text())
    first, last = records[0], records[-1]
    node1 = pool.nodes[1]
    assert (first["kind"], first["reason"], first["exit_code"]) == ("node", "hang", 76), records
    assert first["blamed_hosts"] == [node1.address] and first["blamed_nodes"] == ["tvm-1"], first
    assert first["kept_out"] == KEPT_OUT, first
    assert last["kind"] == "ok" and node1.address not in last["hosts"], records
    assert service.disabled == {1: "taskcompletion"} and service.removed == {1} and not service.reserve
    assert ADDED in out, out[-3000:]  # the formula's target 2 with node 1 gone: Batch adds node 2, no other
    assert service.placed[seen["job"]] == [[0, 1], [0, 2]]
    said = re.search(r"no training step for (\d+) s after step (\d+) \(bound (\d+) s\); rank 1 on host (\S+) stopped",
                     (result.downloaded / "logs" / "stderr.txt").read_text())
    assert said and said[2] == "4" and said[4] == node1.address, "rank 0's watchdog line is missing"
    print(f"hang: rank 0's watchdog: no step for {said[1]} s after step 4 (bound {said[3]} s)")
    # Resumed from the newest checkpoint there was when the rank hung, and finished.
    summary = json.loads((result.downloaded / "run" / "summary.json").read_text())
    assert summary["steps"] == 8 and f"ckpt-{summary['resumed_from_step']:08d}.pt" == seen["newest"], summary
    # `status` (printed by the rehearsal) names the node and what the failure cost.
    assert f"blamed: {node1.address} (node tvm-1 taken out of scheduling)" in out, out[-3000:]


def test_a_port_of_the_hosts_loopback_is_reached_from_a_nodes_own_loopback_until_closed():
    """devtools/rehearsal/node_ports.py: a node (its own network namespace) reaches the host's 127.0.0.1 endpoint at
    the same URL, through the relay; once the relay is closed, nothing listens there."""
    import http.server
    import subprocess

    from devtools.rehearsal.node_ports import NodePorts

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"hello")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    node = subprocess.Popen(["unshare", "--net", "bash", "-c", "ip link set lo up && echo ready && exec sleep 60"],
                            stdout=subprocess.PIPE, text=True)
    fetch = ["nsenter", "--target", str(node.pid), "--net", "python3", "-c",
             f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=5).read().decode())"]
    try:
        assert node.stdout.readline().strip() == "ready"
        with NodePorts([node.pid], [url, "https://example.invalid/not-local"]) as ports:
            assert ports.ports == [server.server_address[1]]
            inside = subprocess.run(fetch, capture_output=True, text=True, timeout=30)
            assert inside.stdout.strip() == "hello", inside.stderr
        after = subprocess.run(fetch, capture_output=True, text=True, timeout=30)
        assert after.returncode != 0 and "Connection refused" in after.stderr
    finally:
        node.kill()
        node.wait()
        server.shutdown()
        server.server_close()


def test_a_code_fault_is_not_run_again_by_batchs_retries(tmp_path, capsys):
    """Rank 1 raises in the loop after step 2 (TRAINING_WATCHDOG_INJECT, as a bug would): a code fault, exit 65, no
    node blamed or taken out. Batch retries any non-zero exit (exitConditions cannot stop its retries:
    training/cluster/attempts.py, code_fault_before), so each of its retries runs the coordination command and
    `launch`, which refuses at once: no rank starts again, and `status` says so for each attempt."""
    from devtools.rehearsal.run import rehearse as run_rehearsal
    from training.cluster import attempts

    seen = {}

    def raise_in_the_loop(service, pool, job):
        service.node_env["TRAINING_WATCHDOG_INJECT"] = "raise@2:1"  # before the first attempt (after the start task)
        assert not service.placed.get(job), "the first attempt started before the test set its environment"
        seen.update(service=service, job=job)

    args = FAST.replace("--steps 30", "--steps 4").replace("--checkpoint-every 10", "--checkpoint-every 100")
    result = run_rehearsal("dev", 2, "pytorch", args + " --no-export", tmp_path, fault=raise_in_the_loop)
    out = capsys.readouterr().out
    service, job = seen["service"], seen["job"]
    stdout = (result.downloaded / "logs" / "stdout.txt").read_text()
    records = attempts.read_lines(stdout)
    retries = service.tasks[job]["constraints"]["maxTaskRetryCount"]
    assert result.exit_code == 65 and result.retries == retries, out[-3000:]
    first, *refused = records
    assert (first["kind"], first["reason"], first["exit_code"], first["blamed_hosts"]) == ("code", "exception", 65, [])
    assert len(refused) == retries and all((r["kind"], r["reason"], r["exit_code"]) == ("code", "retry refused", 65)
                                           for r in refused), records
    assert stdout.count("python -m training train: ResNet50") == 1  # the ranks started once, never again
    assert "raised InjectedFault" in (result.downloaded / "logs" / "stderr.txt").read_text()
    assert service.disabled == {} and service.placed[job] == [[0, 1]] * (retries + 1)
    gaps = [b - a for a, b in zip(service.retried_at, service.retried_at[1:])]
    print(f"code fault: {retries} refused retries, {', '.join(f'{g:.1f}' for g in gaps)} s apart")
    assert all(g < 30 for g in gaps), gaps
    assert "attempt 2: code fault (retry refused, exit 65); blamed: no node named" in out, out[-3000:]


def test_a_spot_eviction_requeues_and_a_node_lost_retries_both_resume_from_the_checkpoint(tmp_path, capsys):
    """One run, two faults. First a Spot eviction of node 1 after the first checkpoint: Batch requeues the task,
    not counted as a retry (RehearsalBatch.preempt, docs cited there), and the run resumes from its newest
    checkpoint. Then, after a checkpoint of the resumed run, node 1 dies (its network cut, its processes killed, no
    requeue): the task fails as a node fault naming node 1, whose scheduling `launch` disables (the pool's identity
    given the node-operations role a team adds: docs/architecture.md), and Batch's retry resumes it on nodes 0 and 2
    (node 2: the replacement autoscale would add). The run reaches the same final step."""
    import subprocess

    from devtools.rehearsal.run import rehearse as run_rehearsal
    from tests.devtools.rehearsal import batch_rest_spec

    faults = {}

    def evict_then_lose_node_one(service, pool, job):
        service.node_operators.update(service.identities.values())  # the pool identity, with the role a team adds
        checkpoints = pool.export / "runs" / job / "checkpoints"

        def watch():
            deadline = time.monotonic() + 600
            _until((checkpoints / "ckpt-00000010.pt").exists, deadline)
            faults["evicted"] = (time.monotonic(), service.preempt(job, pool.nodes[1]))
            _until(lambda: service.requeued_at, deadline)
            before = set(checkpoints.glob("ckpt-*.pt"))
            _until(lambda: set(checkpoints.glob("ckpt-*.pt")) - before, deadline, 0.2)  # a checkpoint the resumed run wrote
            time.sleep(1)
            faults["node1"] = pool.nodes[1].address
            cut = subprocess.run(["ip", "link", "set", pool.host_link(pool.nodes[1]), "down"], capture_output=True,
                                 text=True)  # its NIC's other end, on the bridge: the node is off the network
            faults["lost"] = (time.monotonic(), pool.kill(pool.nodes[1]), service, job, cut.returncode)
        threading.Thread(target=watch, daemon=True).start()

    result = run_rehearsal("dev", 2, "pytorch", FAST.replace("--steps 30", "--steps 40") + " --no-export", tmp_path,
                           fault=evict_then_lose_node_one, spare_nodes=1)
    out = capsys.readouterr().out
    evicted_at, evicted_processes = faults["evicted"]
    lost_at, lost_processes, service, job, cut = faults["lost"]
    assert evicted_processes > 0 and lost_processes > 0 and cut == 0
    assert "Spot node node1 was preempted; Batch requeues the task (not a retry: retried 0 time(s))" in out, out[-3000:]
    assert len(service.requeued_at) == 1 and service.requeued_at[0] - evicted_at < 60
    assert result.retries == 1 and result.exit_code == 0, out[-3000:]  # the loss is the one retry
    assert service.retried_at[0] - lost_at < 60  # the task failed within a minute of losing the node
    summary = json.loads((result.downloaded / "run" / "summary.json").read_text())
    assert summary["steps"] == 40 and summary["resumed_from_step"] >= 20
    assert (result.downloaded / "logs" / "stdout.txt").read_text().count("resumed from") == 2
    # Each attempt as the launcher recorded it (training/cluster/attempts.py, what `status` shows): the loss is a node
    # fault that names node 1 (its sshd no longer answers), taken out of scheduling, and the last attempt finished on
    # nodes 0 and 2 (the eviction's requeue ran on nodes 0 and 1 again: node 1 was not blamed for it).
    from training.cluster import attempts

    records = attempts.read_lines((result.downloaded / "logs" / "stdout.txt").read_text())
    blamed = [a for a in records if a["kind"] == "node" and a["blamed_hosts"]]
    assert blamed and blamed[-1]["blamed_hosts"] == [faults["node1"]] and blamed[-1]["node_hours"] > 0, records
    assert blamed[-1]["kept_out"] == KEPT_OUT, blamed[-1]
    assert service.disabled == {1: "taskcompletion"} and service.placed[job] == [[0, 1], [0, 1], [0, 2]]
    assert service.removed == {1} and ADDED in out, out[-3000:]
    assert records[-1]["kind"] == "ok", records
    # What the endpoint answered for this task and job, as the REST spec has them.
    answers = [("GET", f"/jobs/{job}", 200, json.dumps(service.jobs[job]).encode()),
               ("GET", f"/jobs/{job}/tasks/train", 200, json.dumps(service.tasks[job]).encode())]
    assert batch_rest_spec.violations(answers) == []
