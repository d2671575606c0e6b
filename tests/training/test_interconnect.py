"""The interconnect check's figure and verdict (pure), and what job builders get from it; its real run over the
job's 2 Gloo ranks (inside train) is the rehearsal's end-to-end test (tests/devtools/rehearsal/test_rehearsal.py)."""
import json

import pytest

from training.interconnect import ALLOW_SLOW, CHECK, FLOOR, bus_bandwidth_gbps, job_train_args, measure, verdict


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


def test_train_checks_the_interconnect_only_on_multi_node_horovod_or_ddp_runs():
    args = ["--dist", "ddp", ALLOW_SLOW, "--epochs", "1"]
    assert job_train_args(args, nodes=2, floor_gbps=460.0) == [*args, CHECK, FLOOR, "460"]
    assert job_train_args(args, nodes=1, floor_gbps=460.0) == args
    assert job_train_args(["--dist", "native"], nodes=2, floor_gbps=None) == ["--dist", "native"]
    assert job_train_args([], nodes=2, floor_gbps=None) == [CHECK]  # no floor for the size: the figure only
    assert job_train_args([CHECK], nodes=2, floor_gbps=None) == [CHECK]  # asked for already: not twice


@pytest.mark.parametrize("figure_gbps,floor,allow,stops", [(1.0, 2.0, False, True), (1.0, 2.0, True, False),
                                                          (3.0, 2.0, False, False), (1.0, None, False, False)])
def test_measure_writes_rank_0s_figure_and_says_whether_the_run_stops(tmp_path, capsys, figure_gbps, floor, allow,
                                                                      stops):
    # a timer whose all-reduce of 4 MB over 2 ranks takes what gives `figure_gbps` (busbw = algbw at n = 2)
    output = tmp_path / "ic.json"
    stop = measure(lambda count, iters: count * 4 / (figure_gbps * 1e9), rank=0, size=2, gpu=False, floor_gbps=floor,
                   allow_slow=allow, output=output)
    assert (stop is not None) == stops
    record = json.loads(output.read_text())
    assert record["interconnect_busbw_gbps"] == pytest.approx(figure_gbps) and record["interconnect_ranks"] == 2
    printed = capsys.readouterr()
    assert "interconnect-check: all-reduce bus bandwidth" in printed.out and (stop in printed.err if stops else True)
    other = tmp_path / "rank1.json"
    measure(lambda count, iters: 1.0, rank=1, size=2, gpu=False, output=other)
    assert not other.exists() and capsys.readouterr().out == ""  # rank 0 alone prints and writes


def test_an_infiniband_sizes_ceiling_and_floor_follow_from_its_rails():
    from training.interconnect import infiniband_ceiling_gbps, infiniband_floor_gbps

    assert infiniband_ceiling_gbps(8, 400) == 400.0  # ND H100 v5 / H200 v5: 8 x NDR
    assert infiniband_ceiling_gbps(8, 200) == 200.0  # ND A100 v4: 8 x HDR
    assert infiniband_floor_gbps(8, 400) == 100.0
    assert infiniband_floor_gbps(8, 400) > 10 * 2  # well above what NCCL on the 80 Gbit/s Ethernet can reach
