"""mpirun's notice of a rank ended by a signal names the host to blame (training/cluster/mpirun.py): pure."""
import io

from training.cluster import attempts, mpirun
from training.errors import EXIT_NODE_FAULT

HOSTS = [("10.250.0.1", 2), ("10.250.0.2", 2)]
NOTICE = "mpirun noticed that process rank 3 with PID 0 on node node1 exited on signal 9 (Killed)."
LOST = attempts.classify([], 137)  # what the ranks' records alone say: a node fault naming no host


def test_the_notice_names_the_host_of_the_rank_by_slot_order():
    notice = mpirun.signalled(NOTICE)
    assert notice == mpirun.Signalled(3, "node1", 9, "Killed")
    assert [mpirun.host_of_rank(HOSTS, rank) for rank in range(5)] == ["10.250.0.1", "10.250.0.1", "10.250.0.2",
                                                                       "10.250.0.2", None]
    assert LOST.kind == "node" and LOST.blamed_hosts == ()
    verdict = mpirun.blame_signalled(LOST, notice, HOSTS)
    assert verdict == attempts.Verdict(
        "node", EXIT_NODE_FAULT, "rank killed", ("10.250.0.2",),
        "fault: node 10.250.0.2: rank 3 ended by signal 9 (Killed) (mpirun: on node node1), and mpirun ended the others")


def test_a_wrapped_notice_is_read_and_a_verdict_with_a_host_or_a_code_fault_is_kept():
    wrapped = "mpirun noticed that process rank 0 with PID 12 on node\ntvm-1 exited on signal 11 (Segmentation fault).\n"
    watch = mpirun.Watch(io.StringIO())
    for line in ["--------------------------------------------------------------------------\n",
                 *wrapped.splitlines(keepends=True)]:
        watch.write(line)
    assert watch.notice == mpirun.Signalled(0, "tvm-1", 11, "Segmentation fault")
    named = attempts.Verdict("node", 76, "hang", ("10.250.0.1",), "fault: node 10.250.0.1: hang")
    code = attempts.Verdict("code", 65, "exception", (), "fault: code: ...")
    for kept in (named, code):
        assert mpirun.blame_signalled(kept, watch.notice, HOSTS) is kept
    assert mpirun.blame_signalled(LOST, None, HOSTS) is LOST
    assert mpirun.signalled("[1,2]<stderr>: step 10 loss 1.2") is None
