"""The data path's arithmetic (infra/core/data/path.py): what the GPUs need at maxNodes against what each tier
delivers, from the published figures, for the vision stack (8 ND H100 v5 nodes) and the same stack at 32 nodes."""
import dataclasses

import pytest

from infra.core import cost, skus
from infra.core.config import stack as config
from infra.core.data import path as data_path

H100 = skus.CATALOG["Standard_ND96isr_H100_v5"]


def vision(**nodes_or_nfs):
    """The shipped vision stack, with nodes or nfs fields replaced (max_nodes=32, data_tier="nfs", ...)."""
    cfg = config.from_stack_file("vision")
    nodes = {k: v for k, v in nodes_or_nfs.items() if k in {f.name for f in dataclasses.fields(cfg.nodes)}}
    nfs = {k: v for k, v in nodes_or_nfs.items() if k not in nodes}
    return dataclasses.replace(cfg, nodes=dataclasses.replace(cfg.nodes, **nodes), nfs=dataclasses.replace(cfg.nfs, **nfs))


def test_the_need_is_the_sizes_figure_times_the_gpus_and_scales_with_max_nodes():
    at_8, at_32 = data_path.of_stack(vision()), data_path.of_stack(vision(max_nodes=32))
    assert at_8.need.img_per_sec == pytest.approx(5363 * 64)
    assert at_32.need.img_per_sec == pytest.approx(4 * at_8.need.img_per_sec)
    assert "64 GPUs x 5,363" in at_8.line() and "maxNodes=32" in at_32.line()


@pytest.mark.parametrize("nodes", [8, 32])
def test_nfs_on_the_vision_stack_feeds_a_sliver_of_the_need_and_names_the_fix(nodes):
    path = data_path.of_stack(vision(max_nodes=nodes, data_tier="nfs"))
    # D16s_v5's uncached disk cap (600 MB/s) = 4 x P20 (150 MB/s): 600 MB/s of 115.4 KB JPEGs.
    assert path.slowest.name == "source"
    assert path.delivered == pytest.approx(600e6 / data_path.IMAGENET.image_bytes)
    assert path.share < 0.02 and path.short
    line = path.line()
    assert line.startswith("data path: ") and "below 0.95" in line and "fix: set dataTier node-local" in line
    assert path.warning().startswith("warning: data path: ") and "dataTier node-local" in path.warning()


@pytest.mark.parametrize("nodes", [8, 32])
def test_node_local_on_the_vision_stack_is_fed_by_the_h100_decoders(nodes):
    path = data_path.of_stack(vision(max_nodes=nodes))
    assert path.tier == "node-local" and path.slowest.name == "decode"
    assert path.delivered == pytest.approx(57_200 * nodes)
    assert path.share >= data_path.FED_SHARE and not path.short and path.warning() is None
    # The NVMe read speed is not published: named, never used as a figure.
    assert "local disk: no published figure" in path.line()


def test_the_decode_figure_is_dalis_alone_and_auto_is_dali_on_the_node_whatever_plan_runs_on(monkeypatch):
    """MLPerf's 57.2k img/s a node is DALI's hardware decode: a stack whose ranks read with --loader pil or nvjpeg is
    not called fed on it. --loader auto is dali on the GPU image, with or without DALI on the machine running plan."""
    from training import config as train_config

    for installed in (False, True):
        monkeypatch.setattr(train_config, "dali_installed", lambda: installed)
        auto = data_path.of_stack(vision())
        assert data_path.node_loader(vision()) == "dali" and auto.slowest.name == "decode" and not auto.short
        assert "dali data" in auto.line() and "nvjpeg data" not in auto.line()
    for loader in ("pil", "nvjpeg"):
        cfg = vision()
        cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, args=("--loader", loader)))
        path = data_path.of_stack(cfg)
        assert path.delivered is None and "fed" not in path.verdict()
        assert f"decode: no published figure (--loader {loader}: " in path.line()


def test_staging_from_blob_is_bound_by_the_accounts_egress_at_cluster_scale_and_priced_at_the_node_price():
    at_8, at_32 = data_path.of_stack(vision()), data_path.of_stack(vision(max_nodes=32))
    # eastus: 200 Gb/s = 25 GB/s shared by every node; one node's 80 Gb/s NIC alone would take 14.8 s.
    assert at_8.staging.seconds == pytest.approx(8 * 147.9e9 / 25e9)
    assert at_32.staging.seconds == pytest.approx(4 * at_8.staging.seconds)
    node_price = cost.estimate(vision()).node_price  # the size's price and its OS disk, as plan prints it
    assert node_price > H100.price_per_hour
    assert at_8.staging.cost == pytest.approx(8 * at_8.staging.seconds / 3600 * node_price)
    assert "200 Gb/s egress (eastus)" in at_8.line()


def test_a_region_outside_the_high_target_list_gets_50_gbps():
    assert data_path.egress_gbps("eastus") == 200 and data_path.egress_gbps("West Europe") == 200
    assert data_path.egress_gbps("brazilsoutheast") == 50


def test_azure_files_premium_follows_the_provisioned_v1_formulas_of_its_quota():
    # The docs' own examples: 100 GiB -> 3,100 IOPS and 110 MiB/s; 10,240 GiB -> 13,240 IOPS and 1,125 MiB/s.
    assert data_path.azure_files_premium(100) == (3100, pytest.approx(110 * 1.048576))
    assert data_path.azure_files_premium(10240) == (13240, pytest.approx(1125 * 1.048576))


def test_premium_ssd_tiers_by_size():
    assert data_path.premium_ssd(512) == (2300, 150) and data_path.premium_ssd(513) == (5000, 200)
    assert data_path.premium_ssd(4096) == (7500, 250)


def test_an_unknown_need_gives_no_verdict_and_no_warning():
    cfg = config.from_stack_file("dev")  # ND A100 v4: no benchmark, no published decode figure
    path = data_path.of_stack(dataclasses.replace(cfg, nfs=dataclasses.replace(cfg.nfs, data_tier="nfs")))
    assert path.need.img_per_sec is None and path.share is None and path.warning() is None
    assert "no verdict: the need is unknown" in path.line()


def test_a_dataset_larger_than_the_local_disk_says_so_instead_of_a_staging_time():
    t4 = skus.CATALOG["Standard_NC4as_T4_v3"]  # 176 GiB temp disk
    path = data_path.assess(sku=t4, nodes=1, location="eastus", backend="batch", tier="node-local",
                            nfs_kind="vm", nfs_vm_size="Standard_D16s_v5", nfs_disk_count=4, nfs_disk_size_gb=512,
                            data_local_cache=False, aml_data_mode="download", per_gpu=None, need_basis="none",
                            node_price=t4.price_per_hour, data=data_path.Dataset("big", 300e9, 2_000_000))
    assert path.staging.seconds is None and "does not fit" in path.line()


def test_a_stage_without_a_figure_is_never_the_slowest():
    stages = (data_path.Stage("local disk", None, "not published"), data_path.Stage("decode", 10.0, "x"))
    path = data_path.DataPath("node-local", data_path.Need(20.0, "x"), stages, data_path.Staging(0, "x"), "", 1)
    assert path.slowest.name == "decode" and path.share == 0.5
