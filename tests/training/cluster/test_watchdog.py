"""The progress watchdog's pure parts (training/watchdog.py: the deadline, who stopped, how an exception is
classified) and the launcher's verdict on an attempt (training/cluster/attempts.py), without a framework."""
import json
import os
import sys
import threading
from pathlib import Path

import pytest

from training.cluster import attempts
from training.cluster.launch import flag_value, run_attempt, Host
from training.errors import EXIT_CODE_FAULT, EXIT_HANG, EXIT_NODE_FAULT, EXIT_USAGE, UsageError, kind_of
from training.watchdog import (Bounds, Deadline, Watchdog, collective_env, exception_record, is_collective_failure,
                               read_alive, record_fault, stalled, write_alive)

BOUNDS = Bounds(first_s=100, floor_s=10, factor=5, busy_s=50, poll_s=0.01)


@pytest.fixture(autouse=True)
def node_local_disk(tmp_path, monkeypatch):
    """The node-local folder for fault records, inside the test's own folder."""
    monkeypatch.setenv("TRAINING_WATCHDOG_LOCAL_DIR", str(tmp_path / "node-local"))
    return tmp_path / "node-local"


def test_the_first_steps_get_the_start_up_floor_then_the_bound_follows_the_measured_step_time():
    d = Deadline(BOUNDS, now=0)
    assert d.bound() == 100 and d.overdue(99) is None and d.overdue(101) == 101
    for step, t in enumerate((30, 31, 32, 33, 34), start=1):  # the first took 30 s (start-up), then 1 s each
        d.stepped(step, t)
    assert d.bound() == 10  # 5 x the median (1 s) is under the floor
    for step in range(6, 30):
        d.stepped(step, 34 + (step - 5) * 4)  # 4 s steps: the bound follows, 5 x 4 s
    assert d.bound() == 20
    assert d.overdue(d.last + 19) is None and d.overdue(d.last + 21) == 21


def test_a_checkpoint_or_validation_runs_under_the_busy_floor_and_is_not_a_step_time():
    d = Deadline(BOUNDS, now=0)
    for step in range(1, 6):
        d.stepped(step, step)
    d.busy("a checkpoint", now=5)
    assert d.bound() == 50 and d.overdue(5 + 49) is None
    d.stepped(5, 5 + 45)  # the same step: back to the step bound, the 45 s not counted as a step
    assert d.bound() == 10 and max(d.times) == 1


def test_the_start_up_bound_covers_the_first_step_only_and_a_collective_ends_a_busy_spell():
    d = Deadline(BOUNDS, now=0)
    d.stepped(1, 80)  # the first step: 80 s of start-up and compile, not a step time
    assert d.bound() == 10 and not d.times  # the floor from here, not the start-up bound for more steps
    d.stepped(2, 81)
    d.busy("a checkpoint or a log line", now=81)
    assert d.bound() == 50
    d.collective(now=82)  # the log line's averaged loss: a frozen peer must not hold this rank for the busy bound
    assert d.bound() == 10 and d.overdue(82 + 11) == 11
    d.busy("a checkpoint or a log line", now=83)
    d.stepped(2, 90)  # after the log line: the clock restarts here
    d.stepped(3, 91)  # so step 3 took 1 s, whatever the log line's collective did
    assert list(d.times) == [1.0, 1.0]


def test_the_start_up_bound_follows_the_compiler():
    from training.watchdog import compiler_of, start_up_s

    class Cfg:
        compile, compile_mode, xla = True, "max-autotune", False

    assert compiler_of(Cfg) == "max-autotune" and start_up_s("max-autotune") > start_up_s("default") > start_up_s(
        "eager")
    assert Bounds.from_env({}, "eager").first_s == start_up_s("eager")
    assert Bounds.from_env({"TRAINING_WATCHDOG_FIRST_S": "42"}, "max-autotune").first_s == 42


def test_the_rank_that_lags_while_it_lives_is_named_not_all_alive():
    """Rank 1's process beats (its watchdog thread lives) but its main thread is stuck in step 8's compute (a
    GPU): rank 0 entered the log line's average and rank 2 the exchange. Rank 1 is named; every rank alike is not."""
    from training.watchdog import blame, blame_text

    def look(beats, progress):
        return {r: {"rank": r, "host": f"10.0.0.{4 + r}", "beats": beats, "step": 7, "progress": p,
                    "doing": "backward" if p == 15 else "in the log line's loss average"}
                for r, p in enumerate(progress)}

    stopped, behind = blame(look(3, (16, 15, 16)), look(4, (16, 15, 16)), world=3, me=0)
    assert stopped == [] and [(s["rank"], s["host"]) for s in behind] == [(1, "10.0.0.5")]
    assert blame_text(stopped, 3, behind).startswith("rank 1 on host 10.0.0.5 (at step 7, backward) lags the others "
                                                     "while its process lives")
    assert blame(look(3, (16, 16, 16)), look(4, (16, 16, 16)), world=3, me=0) == ([], [])  # level: a collective hung
    assert blame_text([], 3, []).startswith("all 3 ranks are alive, so a collective hung")


WATCHED = """
import sys, time
from pathlib import Path
from training.watchdog import Bounds, Watchdog
dog = Watchdog(0, 2, Path(sys.argv[1]), Bounds(first_s=1, floor_s=1, factor=1, busy_s=1, poll_s=0.2, write_s=1),
               host="node-a").start()
print("started", flush=True)
dog.stepped(1)
time.sleep(600)  # the main thread waits in a collective that never ends
"""


def test_a_share_that_blocks_every_write_does_not_stop_the_watchdog(tmp_path, node_local_disk):
    """The output dir is on a share that stopped answering (a hard NFS mount: a write blocks for good). Played by
    named pipes where the watchdog writes its sign of life and its fault record and where it reads a peer's: opening
    one blocks until the other end opens, which nobody does. The rank still ends within its bound, with its line on
    stderr, its record there for the launcher (FAULT_LINE) and on node-local disk."""
    import subprocess
    import time

    from training.watchdog import FAULT_LINE

    out = tmp_path / "share"
    for folder, name in ((".watchdog", ".rank-0.tmp"), (".watchdog", "rank-1.json"), (".faults", ".rank-0.tmp")):
        (out / folder).mkdir(parents=True, exist_ok=True)
        os.mkfifo(out / folder / name)
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", WATCHED, str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3]),
                                            "HOROVOD_RANK": "0"})  # as horovodrun starts a rank
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("the watchdog never ended the process: it blocked on the share")
    took = time.monotonic() - began
    assert proc.returncode == EXIT_HANG, err
    assert took < 15, took  # bound 1 s + two looks (0.9 s) + the bounded write (1 s) + Python's start
    assert "error: node fault: no training step for" in err and "(it is not answering)" in err, err
    assert "no rank can be named (the signs of life cannot be read)" in err  # not "all ranks are alive"
    [line] = [line for line in err.splitlines() if line.startswith(FAULT_LINE)]
    record = json.loads(line.removeprefix(FAULT_LINE))
    assert (record["rank"], record["kind"], record["exit_code"]) == (0, "node", EXIT_HANG)
    assert json.loads((node_local_disk / "training-watchdog" / ".faults" / "rank-0.json").read_text()) == record


def test_steps_reported_in_jumps_are_timed_per_step():
    d = Deadline(BOUNDS, now=0)
    for i in range(1, 6):
        d.stepped(i * 10, i * 20.0)  # every 10 steps, 20 s: 2 s a step
    assert d.bound() == 10 and d.times[-1] == 2


def test_the_rank_whose_sign_of_life_does_not_move_is_the_one_that_stopped(tmp_path):
    for rank, host in enumerate(("10.0.0.4", "10.0.0.5", "10.0.0.6")):
        write_alive(tmp_path, rank, host, beats=3, step=7)
    before = read_alive(tmp_path)
    write_alive(tmp_path, 0, "10.0.0.4", beats=4, step=7)
    write_alive(tmp_path, 2, "10.0.0.6", beats=4, step=7)
    assert [(s["rank"], s["host"]) for s in stalled(before, read_alive(tmp_path), world=4)] == [
        (1, "10.0.0.5"), (3, "unknown")]  # rank 3 never wrote one


def test_the_thread_names_the_peer_that_stopped_and_ends_with_the_hang_exit_code(tmp_path):
    clock = [0.0]
    ended = threading.Event()
    got = {}

    def on_expire(line, record):
        got.update(line=line, record=record)
        ended.set()

    write_alive(tmp_path / ".watchdog", 1, "node-b", beats=1, step=4)  # rank 1: alive once, then silent
    dog = Watchdog(0, 2, tmp_path, BOUNDS, clock=lambda: clock[0], host="node-a", on_expire=on_expire).start()
    for step in range(1, 6):
        clock[0] = step
        dog.stepped(step)
    assert not ended.wait(0.1)  # within the bound: nothing
    clock[0] = 5 + 11  # past 10 s
    assert ended.wait(5)
    dog.stop()
    assert got["record"] == {"rank": 0, "host": "node-a", "kind": "node", "exit_code": EXIT_HANG, "step": 5,
                             "reason": "hang", "blamed_hosts": ["node-b"], "blamed_ranks": [1], "line": got["line"]}
    assert got["line"].startswith("error: node fault: no training step for 11 s after step 5 (bound 10 s); "
                                  "rank 1 on host node-b stopped (no sign of life); rank 0 on node-a ends the run "
                                  f"(exit {EXIT_HANG})")


class HorovodInternalError(RuntimeError):
    """Named as horovod.common.exceptions' is: the classification goes by the name (no framework imported)."""


def test_a_failed_collective_is_a_node_fault_and_any_other_exception_the_codes():
    lost = HorovodInternalError("Horovod has been shut down. This was caused by an exception on one of the ranks")
    assert is_collective_failure(lost) and not is_collective_failure(ValueError("bad label 7"))
    try:
        try:
            raise ConnectionError("Connection closed by peer [10.0.0.5]:4000")
        except ConnectionError as inner:
            raise RuntimeError("allreduce failed") from inner
    except RuntimeError as chained:
        assert is_collective_failure(chained)
    record = exception_record(lost, 0, "10.0.0.4", [{"rank": 1, "host": "10.0.0.5"}], world=2)
    assert (record["kind"], record["exit_code"], record["blamed_hosts"]) == ("node", EXIT_NODE_FAULT, ["10.0.0.5"])
    record = exception_record(ValueError("bad label 7"), 1, "10.0.0.5", [], world=2)
    assert (record["kind"], record["exit_code"]) == ("code", EXIT_CODE_FAULT)
    assert record["line"] == ("error: code fault: rank 1 (10.0.0.5) raised ValueError: bad label 7: not retried "
                              "(it fails the same on any node)")


def _rec(rank, kind, blamed=(), reason="hang", code=None):
    return {"rank": rank, "host": f"h{rank}", "kind": kind, "blamed_hosts": list(blamed), "reason": reason,
            "exit_code": code or (EXIT_HANG if kind == "node" else EXIT_CODE_FAULT), "line": f"error: {kind} {rank}"}


@pytest.mark.parametrize("records,rc,expected", [
    ([], 0, ("ok", 0, ())),
    ([_rec(0, "node", ["h1"]), _rec(2, "node", ["h1"])], 1, ("node", EXIT_HANG, ("h1",))),
    # rank 1's exception, then rank 0 lost its peer: the code's fault, not the node's
    ([_rec(0, "node", reason="peer lost", code=EXIT_NODE_FAULT), _rec(1, "code", reason="exception")], 1,
     ("code", EXIT_CODE_FAULT, ())),
    ([_rec(0, "node")], 1, ("node", EXIT_HANG, ())),  # a hung collective, every rank alive
    ([], 1, ("node", EXIT_NODE_FAULT, ())),  # a rank killed without a word
    ([], EXIT_USAGE, ("code", EXIT_USAGE, ())),
])
def test_an_attempt_is_classified_from_its_ranks_records(records, rc, expected):
    verdict = attempts.classify(records, rc)
    assert (verdict.kind, verdict.exit_code, verdict.blamed_hosts) == expected
    assert kind_of(verdict.exit_code) == expected[0]
    if verdict.kind != "ok":
        assert verdict.line.startswith(f"fault: {verdict.kind}")


def test_the_frameworks_timeouts_are_set_unless_the_user_set_them():
    env = collective_env({"HOROVOD_GLOO_TIMEOUT_SECONDS": "120", "TRAINING_WATCHDOG_FIRST_S": "300"})
    assert env == {"HOROVOD_STALL_CHECK_TIME_SECONDS": "60", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "300",
                   "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def test_a_bad_bound_is_named():
    with pytest.raises(UsageError, match="TRAINING_WATCHDOG_FLOOR_S='x' is not a number"):
        Bounds.from_env({"TRAINING_WATCHDOG_FLOOR_S": "x"})


def test_the_launcher_says_the_verdict_first_and_records_each_attempt(tmp_path, capfd):
    """run_attempt with a stand-in for horovodrun: a process that leaves rank 1's code-fault record and fails."""
    out = tmp_path / "run"
    record_fault(out, {**_rec(9, "code"), "rank": 9})  # a previous attempt's record: cleared, not counted
    fail = [sys.executable, "-c", "import json, pathlib, sys; d = pathlib.Path(sys.argv[1]) / '.faults'; "
            "d.mkdir(parents=True, exist_ok=True); (d / 'rank-1.json').write_text(json.dumps(json.loads(sys.argv[2])));"
            " sys.exit(1)", str(out), json.dumps(_rec(1, "code", reason="exception"))]
    hosts = [Host("10.0.0.4", 1), Host("10.0.0.5", 1)]
    assert run_attempt(fail, hosts, out) == EXIT_CODE_FAULT
    err = capfd.readouterr().err.splitlines()
    assert err[0] == "fault: code: code 1"
    assert run_attempt([sys.executable, "-c", "pass"], hosts, out) == 0
    lines = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    assert [(a["attempt"], a["kind"], a["exit_code"], a["hosts"]) for a in lines] == [
        (1, "code", EXIT_CODE_FAULT, ["10.0.0.4", "10.0.0.5"]), (2, "ok", 0, ["10.0.0.4", "10.0.0.5"])]
    assert lines[0]["node_hours"] >= 0 and lines[1]["node_hours"] == 0


def test_the_output_dir_is_read_from_the_training_flags():
    assert flag_value(["--steps", "3", "--output-dir", "/a", "--output-dir=/b"], "--output-dir", "out") == "/b"
    assert flag_value(["--steps", "3"], "--output-dir", "out") == "out"


def test_batchs_retry_of_a_code_fault_is_refused_before_any_rank_starts(tmp_path, capfd, monkeypatch):
    """Batch retries whatever the exit code: the retried task itself refuses to run a code fault again (same job),
    while a node fault's retry runs, and outside Batch a person's rerun runs."""
    out = tmp_path / "run"
    hosts = [Host("10.0.0.4", 1)]
    started = tmp_path / "started"
    ranks = [sys.executable, "-c", f"open({str(started)!r}, 'a').write('x')"]
    attempts.append(out, attempts.attempt_record(0, 0, 36, ["10.0.0.4"], attempts.classify(
        [_rec(0, "code", reason="exception")], 1), job="team-a-job1"))
    monkeypatch.setenv("AZ_BATCH_JOB_ID", "team-a-job1")
    assert run_attempt(ranks, hosts, out) == EXIT_CODE_FAULT and not started.exists()
    assert capfd.readouterr().err.startswith("fault: code: not run again: attempt 1 of job team-a-job1 ended on a "
                                             "code/data fault (exception, exit 65)")
    monkeypatch.setenv("AZ_BATCH_JOB_ID", "team-a-job2")  # another job in the same folder: runs
    assert run_attempt(ranks, hosts, out) == 0 and started.exists()
    monkeypatch.delenv("AZ_BATCH_JOB_ID")
    assert attempts.code_fault_before(attempts.previous_attempts(out), "") is None


def test_each_attempt_prints_the_history_that_status_reads_back(tmp_path, capfd, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setenv("AZ_BATCH_JOB_ID", "team-a-job1")
    hosts = [Host("10.0.0.4", 1), Host("10.0.0.5", 1)]
    hang = attempts.attempt_record(0, 0, 1800, ["10.0.0.4", "10.0.0.5"], attempts.classify(
        [_rec(0, "node", ["10.0.0.5"])], 1), job="team-a-job1")
    hang.blamed_nodes = ["tvmps_5"]
    attempts.append(out, hang)
    assert run_attempt([sys.executable, "-c", "pass"], hosts, out) == 0
    stdout = capfd.readouterr().out
    assert attempts.status_lines(stdout) == [
        f"attempt 1: node fault (hang, exit {EXIT_HANG}); blamed: 10.0.0.5 (node tvmps_5 taken out of scheduling); "
        "cost 1.000 node-hours",
        "attempt 2: finished on 2 node(s)",
        "failures cost 1.000 node-hours in all"]


def test_a_code_fault_explains_the_peers_that_lost_it():
    """Rank 1 raised (a bad image); rank 0's collective then failed and its look named rank 1 as stopped: still the
    code's fault, since rank 1 said why it ended."""
    lost = {**_rec(0, "node", ["h1"], reason="peer lost", code=EXIT_NODE_FAULT), "blamed_ranks": [1]}
    verdict = attempts.classify([lost, _rec(1, "code", reason="exception")], 1)
    assert (verdict.kind, verdict.exit_code) == ("code", EXIT_CODE_FAULT)
    other = {**lost, "blamed_ranks": [2]}  # a third rank stopped without a word: the node's
    assert attempts.classify([other, _rec(1, "code")], 1).kind == "node"


def test_a_node_that_died_without_a_word_is_named_by_its_unanswered_port():
    def connect(host, port):
        if host == "10.0.0.5":
            raise ConnectionRefusedError(111, "Connection refused")
        assert port == 2222

    silent = attempts.classify([], 1)
    named = attempts.blame_unreachable(silent, ["10.0.0.4", "10.0.0.5"], 2222, connect)
    assert (named.kind, named.reason, named.blamed_hosts) == ("node", "host unreachable", ("10.0.0.5",))
    assert named.line.startswith("fault: node 10.0.0.5: host unreachable (no answer on port 2222")
    assert attempts.blame_unreachable(silent, ["localhost"], 2222, connect) == silent  # one machine: nothing to probe
    code = attempts.classify([_rec(1, "code")], 1)
    assert attempts.blame_unreachable(code, ["10.0.0.5"], 2222, connect) == code


def test_a_rank_that_refuses_its_input_leaves_a_code_record_under_launch(tmp_path):
    from training.watchdog import RUN_DIR_ENV, record_refusal

    record_refusal(ValueError("--data /x: no train/ folder"), EXIT_USAGE,
                   {"HOROVOD_RANK": "1", RUN_DIR_ENV: str(tmp_path), "HOROVOD_HOSTNAME": "10.0.0.5"})
    verdict = attempts.classify(attempts.read_records(tmp_path), 1)
    assert (verdict.kind, verdict.exit_code, verdict.reason) == ("code", EXIT_USAGE, "usage")
    assert verdict.line == "fault: code: rank 1 (10.0.0.5) refused its input: --data /x: no train/ folder"
    record_refusal(ValueError("x"), EXIT_USAGE, {})  # outside launch: nothing written, nothing raised


def test_an_injected_fault_is_read_from_the_environment():
    from training.watchdog import injected_fault

    assert injected_fault({}) is None
    assert injected_fault({"TRAINING_WATCHDOG_INJECT": "raise@5"}) == ("raise", 5, 0)
    assert injected_fault({"TRAINING_WATCHDOG_INJECT": "hang@5:1"}) == ("hang", 5, 1)
    with pytest.raises(UsageError, match="give KIND@STEP or KIND@STEP:RANK, KIND one of raise, hang, stop"):
        injected_fault({"TRAINING_WATCHDOG_INJECT": "sleep@5"})


def test_a_ranks_host_is_the_launchers_name_for_it_else_the_address_its_name_resolves_to(monkeypatch):
    from training import faults as watchdog  # the signs of life live there

    assert watchdog.host_name({"HOROVOD_HOSTNAME": "10.0.0.5"}) == "10.0.0.5"
    monkeypatch.setattr(watchdog.socket, "gethostname", lambda: "tvmps-node-5")
    monkeypatch.setattr(watchdog.socket, "gethostbyname", lambda name: "10.0.0.5")
    assert watchdog.host_name({}) == "10.0.0.5"  # under mpirun: the node's IP, as Nodes - List has it
    monkeypatch.setattr(watchdog.socket, "gethostbyname", lambda name: "127.0.1.1")
    assert watchdog.host_name({}) == "tvmps-node-5"


def test_a_node_whose_driver_lost_a_gpu_ends_the_attempt_before_any_rank_starts(tmp_path, capfd):
    from training.cluster import gpu_check

    listing = {"10.0.0.4": (0, "0, 00000001:00:00.0\n1, 00000002:00:00.0\n"),
               "10.0.0.5": (0, "0, 00000001:00:00.0\n"),  # one of two gone
               "10.0.0.6": (9, "Unable to determine the device handle for GPU0000:02:00.0: Unknown Error\n")}
    seen = []

    def run(host, local):
        seen.append((host, local))
        return listing[host]

    hosts = [Host(h, 2) for h in listing]
    assert gpu_check.failing([(h.name, h.slots) for h in hosts], lambda h: h == "10.0.0.4", run) == [
        ("10.0.0.5", "the driver sees 1 GPU(s) for 2 rank(s) (a GPU lost since boot?)"),
        ("10.0.0.6", "nvidia-smi failed (exit 9: Unable to determine the device handle for GPU0000:02:00.0: "
                     "Unknown Error)")]
    assert sorted(seen) == [("10.0.0.4", True), ("10.0.0.5", False), ("10.0.0.6", False)]  # checked at once
    started = tmp_path / "started"
    ranks = [sys.executable, "-c", f"open({str(started)!r}, 'w')"]
    code = run_attempt(ranks, hosts, tmp_path / "run",
                       check_gpus=lambda hs: gpu_check.failing([(h.name, h.slots) for h in hs], lambda h: False, run))
    assert code == EXIT_NODE_FAULT and not started.exists()
    assert capfd.readouterr().err.startswith("fault: node 10.0.0.5,10.0.0.6: gpu check (10.0.0.5: the driver sees 1 "
                                             "GPU(s)")
    [attempt] = attempts.previous_attempts(tmp_path / "run")
    assert (attempt["kind"], attempt["reason"], attempt["blamed_hosts"]) == ("node", "gpu check",
                                                                            ["10.0.0.5", "10.0.0.6"])


def test_an_attempt_stopped_from_outside_blames_no_node(tmp_path):
    """A cancel or an eviction signals the launcher: it passes the signal on and takes no node out (the other nodes'
    sshd may be gone by then too, which must not read as a node fault)."""
    import signal
    import subprocess

    out = tmp_path / "run"
    script = tmp_path / "launch_it.py"
    script.write_text(
        "import sys\nfrom pathlib import Path\nfrom training.cluster.launch import Host, run_attempt\n"
        "sys.exit(run_attempt([sys.executable, '-c', 'import time; print(\"ranks up\", flush=True); time.sleep(60)'], "
        f"[Host('10.255.255.1', 1)], Path({str(out)!r}), 2222, check_gpus=lambda hosts: []))\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])})
    assert proc.stdout.readline().strip() == "ranks up"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "fault: none: stopped by signal 15" in err and "disable scheduling" not in err
    [attempt] = attempts.previous_attempts(out)
    assert (attempt["kind"], attempt["blamed_hosts"]) == ("stopped", [])


def test_native_workers_are_classified_too_and_the_first_failure_stops_the_others(tmp_path, capfd):
    """--dist native (one worker per node, started by launch itself): run_attempt with `start`, as main passes it.
    Worker 1 leaves its code-fault record and fails; worker 0, which would wait for it forever, is stopped; the
    attempt is a code fault, recorded like Horovod's."""
    import subprocess
    import time

    out = tmp_path / "run"
    fail = [sys.executable, "-c", "import json, pathlib, sys; d = pathlib.Path(sys.argv[1]) / '.faults'; "
            "d.mkdir(parents=True, exist_ok=True); (d / 'rank-1.json').write_text(sys.argv[2]); sys.exit(65)",
            str(out), json.dumps(_rec(1, "code", reason="exception"))]
    workers = []

    def start():
        workers.extend([subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]), subprocess.Popen(fail)])
        return workers

    began = time.monotonic()
    assert run_attempt(None, [Host("10.0.0.4", 1), Host("10.0.0.5", 1)], out, start=start) == EXIT_CODE_FAULT
    assert time.monotonic() - began < 10 and workers[0].returncode == -15  # stopped, not waited for
    assert capfd.readouterr().err.splitlines()[0] == "fault: code: code 1"
    assert json.loads((out / "attempts.jsonl").read_text())["kind"] == "code"


def test_the_launcher_reads_a_ranks_fault_from_its_output_when_the_share_has_none(tmp_path, capfd):
    """A rank whose share hung could only say its fault on stderr: horovodrun prefixes the line with the rank; the
    launcher passes the output on and classifies the attempt from it."""
    from training.watchdog import FAULT_LINE

    record = {**_rec(1, "node", ["10.0.0.5"]), "blamed_ranks": [1], "reason": "stuck rank"}
    child = [sys.executable, "-c", "import sys; print('[1]<stderr>:' + sys.argv[1], file=sys.stderr); sys.exit(1)",
             FAULT_LINE + json.dumps(record)]
    hosts = [Host("10.0.0.4", 1), Host("10.0.0.5", 1)]
    assert run_attempt(child, hosts, tmp_path / "run", check_gpus=lambda hs: []) == EXIT_HANG
    err = capfd.readouterr().err
    assert "[1]<stderr>:" + FAULT_LINE in err  # passed on as it came
    assert "fault: node 10.0.0.5: stuck rank (node 1)" in err
    assert attempts.record_in_line("[1,1]<stderr>:" + FAULT_LINE + "{not json") is None


def test_nccls_flight_recorder_dumps_to_node_local_disk_on_a_timeout(node_local_disk):
    from training.watchdog import flight_recorder_env

    env = flight_recorder_env({"TRAINING_WATCHDOG_LOCAL_DIR": str(node_local_disk)})
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1" and int(env["TORCH_NCCL_TRACE_BUFFER_SIZE"]) > 0
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == str(node_local_disk / "training-watchdog" / "nccl-flight-recorder-rank-")
    assert "TORCH_FR_BUFFER_SIZE" not in flight_recorder_env({"TORCH_FR_BUFFER_SIZE": "0"})  # the user's choice


def test_ddps_collective_timeout_follows_the_compiler_as_the_start_up_bound_does():
    """8 ranks compiling with max-autotune may take longer than 900 s before their first all-reduce: NCCL must not
    time out on the ranks that finished first."""
    from training.watchdog import collective_timeout, start_up_s

    assert collective_timeout({}, "max-autotune").total_seconds() == start_up_s("max-autotune") == 2700
    assert collective_timeout({}, "eager").total_seconds() == 900  # the dataset's scan waits before it too
    assert collective_timeout({"TRAINING_WATCHDOG_FIRST_S": "30"}, "max-autotune").total_seconds() == 60  # its floor


def test_a_peer_busy_with_a_checkpoint_holds_this_rank_to_the_busy_bound_not_the_step_bound(tmp_path):
    """Rank 0 writes a checkpoint (busy, its signs of life moving) while rank 1 already waits in the next step's
    all-reduce: rank 1 does not end the run at its step bound (10 s) but only past the busy bound (50 s)."""
    clock = [0.0]
    ended = threading.Event()
    dog = Watchdog(1, 2, tmp_path, BOUNDS, clock=lambda: clock[0], host="node-b",
                   on_expire=lambda line, record: ended.set()).start()
    for step in range(1, 6):
        clock[0] = step
        dog.stepped(step)
    beats = [0]

    def rank0_checkpointing():
        while not ended.is_set() and beats[0] < 10_000:
            beats[0] += 1
            write_alive(tmp_path / ".watchdog", 0, "node-a", beats=beats[0], step=5, progress=10,
                        doing="step 5 done", busy="a checkpoint or a log line")
            time.sleep(0.005)

    import time
    writer = threading.Thread(target=rank0_checkpointing, daemon=True)
    writer.start()
    time.sleep(0.2)  # a few looks of rank 0 busy and beating
    clock[0] = 5 + 30  # past the step bound (10 s), within the busy bound (50 s)
    assert not ended.wait(1.5)  # longer than the two looks (0.52 s) that a firing watchdog takes first
    clock[0] = 5 + 30 + 51  # 51 s after this rank first saw rank 0 busy
    assert ended.wait(5)
    dog.stop()


def test_a_fault_record_line_only_for_a_launcher(tmp_path, monkeypatch):
    """A rank under a launcher prints its record for the launcher (FAULT_LINE) after its line; a process started by
    hand (a local run, predict) ends with its one human line and no record line."""
    from training import faults, launched

    record = {"rank": 0, "kind": "code", "exit_code": 2, "line": "error: code fault: a bad input"}
    for var in launched.RANK_VARS:
        monkeypatch.delenv(var, raising=False)
    for env, lines in (({}, 1), ({"OMPI_COMM_WORLD_RANK": "3"}, 2), ({"HOROVOD_RANK": "0"}, 2)):
        err = []
        monkeypatch.setattr(sys, "stderr", type("Err", (), {"write": lambda self, text: err.append(text),
                                                               "flush": lambda self: None})())
        assert faults.emit(record, tmp_path / "share", 5, env={faults.LOCAL_DIR_ENV: str(tmp_path / "local"), **env})
        printed = "".join(err).splitlines()
        assert len(printed) == lines, (env, printed)
        assert printed[0] == record["line"]
