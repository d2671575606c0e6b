"""The interconnect check's figure and verdict (pure), and what job builders get from it; its real run over the
job's 2 Gloo ranks is the rehearsal's end-to-end test (tests/devtools/rehearsal/test_rehearsal.py)."""
import pytest

from training.interconnect import ALLOW_SLOW, bus_bandwidth_gbps, job_check, verdict


def test_bus_bandwidth_is_nccl_tests_algbw_times_2_n_minus_1_over_n():
    # 1 GB in 0.01 s is 100 GB/s algbw; 8 ranks: x 2*7/8 = 175 GB/s; 2 ranks: x 1; 1 rank: nothing crosses a link
    assert bus_bandwidth_gbps(10**9, 0.01, 8) == pytest.approx(175.0)
    assert bus_bandwidth_gbps(10**9, 0.01, 2) == pytest.approx(100.0)
    assert bus_bandwidth_gbps(10**9, 0.01, 1) == 0.0


@pytest.mark.parametrize("figure,floor,allow,stops", [
    (12.5, 460.0, False, True),  # NCCL on TCP: far below the H100 floor
    (459.9, 460.0, False, True),
    (460.0, 460.0, False, False),
    (480.0, 431.0, False, False),
    (12.5, 460.0, True, False),  # --allow-slow-interconnect trains anyway
    (0.3, None, False, False),  # no floor (no InfiniBand, or the rehearsal): figure only
])
def test_the_verdict_against_given_figures(figure, floor, allow, stops):
    line = verdict(figure, floor, allow)
    assert (line is not None) == stops
    if stops:
        assert "\n" not in line and f"{figure:.1f} GB/s" in line and f"floor {floor:.1f} GB/s" in line
        for cause in ("NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME", "topology file", ALLOW_SLOW):
            assert cause in line


def test_job_check_only_on_multi_node_horovod_or_ddp_runs_and_the_flag_goes_to_the_check():
    args = ["--dist", "ddp", ALLOW_SLOW, "--epochs", "1"]
    check, train = job_check(args, nodes=2, framework="pytorch", floor_gbps=460.0, output="OUT/ic.json")
    assert check == ["--framework", "pytorch", "--dist", "ddp", "--output", "OUT/ic.json", "--floor-gbps", "460",
                     ALLOW_SLOW]
    assert train == ["--dist", "ddp", "--epochs", "1"]
    assert job_check(args, nodes=1, framework="pytorch", floor_gbps=460.0, output="O")[0] is None
    assert job_check(["--dist", "native"], nodes=2, framework="tensorflow", floor_gbps=None, output="O")[0] is None
    assert "--floor-gbps" not in job_check([], nodes=2, framework="keras", floor_gbps=None, output="O")[0]
