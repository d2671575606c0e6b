"""The whole rehearsal with --scarce (devtools/rehearsal/scarce.py; root: the nodes' namespaces; ~85 s of wall, 39 s
of CPU alone): the partial allocation played on the local nodes, then the late nodes train. Run by `make
test-faults`, apart from make test, whose CPU is at its floor on 2 cores; the cheap checks of the same path are in
test_rehearsal_scarce.py."""
import pytest

from tests.devtools.rehearsal.rehearsal_runs import FAST, WHY_NOT, rehearse


@pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or "-")
def test_the_rehearsal_plays_the_partial_allocation_then_trains_on_the_late_nodes(tmp_path):
    result = rehearse("--nodes", "2", "--framework", "pytorch", f"--args={FAST}", "--work", str(tmp_path / "w"),
                      "--scarce")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = result.stdout.split("Rehearsal report")[-1]
    assert "scarce capacity:" in report, report
    assert "the pool stopped at 1 of 2 node(s) (resizeErrors: AccountCoreQuotaReached" in report, report
    assert "node-hours billed waiting so far" in report and "allocation: ended (AllocationTimeout)" in report, report
    assert "(no node left)" in report and "task exit code 0" in report, report
