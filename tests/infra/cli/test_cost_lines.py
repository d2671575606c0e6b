"""plan's cost lines: which region the prices are for, a month at minNodes, the ceiling of one job, and the idle
NFS server against azure-files, each figure recomputed here from the stack's config and the price tables."""
import dataclasses

import pytest

from infra.core.backend_facts import POOL_OS_DISK_GB
from infra.cli import plan
from infra.core import cost
from infra.core.skus import NFS_VM_SIZES
from tests.infra.conftest import STACKS, evaluation_for


def _disk_month(size_gib):
    """Premium SSD v1 monthly price of the tier a disk of this size bills at."""
    return next(price for limit, price in cost.PREMIUM_SSD_TIERS if size_gib <= limit)


def _section(text):
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Estimated cost"))
    return lines[start:lines.index("", start)]


@pytest.mark.parametrize("stack", STACKS)
def test_plan_labels_prices_with_their_region_and_gives_the_month_and_the_job_ceiling(stack):
    evaluation = evaluation_for(stack)
    cfg = evaluation.config
    lines = _section(plan.render(evaluation)[0])
    if cfg.location == "eastus":
        assert lines[0].startswith("Estimated cost, USD per hour at East US list prices (")
    else:
        assert lines[0].startswith(f"Estimated cost, USD per hour at East US list prices; {cfg.location} may differ")

    # By hand: the node's list price (+ its OS disk on Batch), the fixed items, 730 hours a month.
    sku = cfg.nodes.sku
    node = sku.price_per_hour + (_disk_month(POOL_OS_DISK_GB) / 730 if cfg.backend == "batch" else 0)
    fixed = sum(cost.estimate(cfg).fixed.values())
    idle = fixed + cfg.nodes.min_nodes * node
    assert f"  a month at minNodes={cfg.nodes.min_nodes}: {idle * 730:.0f} ({idle:.2f} x 730 hours, a month as " \
           "Azure's prices count it)" in lines
    attempts = cfg.training.retries + 1 if cfg.backend == "batch" else 1  # Azure ML's job sets no retries
    ceiling = cfg.nodes.max_nodes * node * cfg.training.max_hours * attempts
    job = next(line for line in lines if line.startswith("  one job at most: "))
    assert job.startswith(f"  one job at most: {ceiling:.0f} = {cfg.nodes.max_nodes} nodes x {node:.2f} x "
                          f"trainingMaxHours {cfg.training.max_hours} x {attempts} attempt")


def test_dev_idles_at_about_900_a_month_mostly_the_nfs_server():
    cfg = evaluation_for("dev").config
    nfs = cfg.nfs
    server = (NFS_VM_SIZES[nfs.vm_size] * 730 + nfs.disk_count * _disk_month(nfs.disk_size_gb) + _disk_month(30))
    lines = plan._month_and_job_lines(cfg, cost.estimate(cfg))
    files = nfs.disk_count * nfs.disk_size_gb * cost.AZURE_FILES_PREMIUM_PER_GIB_MONTH
    assert f"  the NFS server bills {server:.0f} a month whether or not a job reads it; nfsKind azure-files with " \
           f"the same {nfs.disk_count * nfs.disk_size_gb} GiB would bill {files:.0f} (premium share, 0.16 per " \
           f"provisioned GiB-month), less than this server up to {int(server / 0.16)} GiB (its throughput follows " \
           "its size: not estimated here)" in lines
    month = cost.monthly(cost.estimate(cfg).at(cfg.nodes.min_nodes))
    assert 850 < month < 1000 and server / month > 0.9  # issue 24: "dev idles at ~$900/month, mostly the NFS VM"


def test_an_azure_files_stack_is_told_what_its_share_and_a_vm_server_cost():
    cfg = evaluation_for("dev").config
    cfg = dataclasses.replace(cfg, nfs=dataclasses.replace(cfg.nfs, kind="azure-files", disk_size_gb=1024,
                                                           data_local_cache=False))
    lines = plan._month_and_job_lines(cfg, cost.estimate(cfg))
    vm_alone = NFS_VM_SIZES[cfg.nfs.vm_size] * 730 + _disk_month(30)
    assert f"  the NFS share bills {1024 * 0.16:.0f} a month on its provisioned 1024 GiB whether or not a job reads " \
           f"it; nfsKind vm would bill at least {vm_alone:.0f} a month for the server VM and OS disk alone" in lines


def test_azureml_stacks_have_no_file_server_line():
    for stack in STACKS:
        cfg = evaluation_for(stack).config
        lines = plan._month_and_job_lines(cfg, cost.estimate(cfg))
        assert any("NFS" in line for line in lines) == (cfg.backend == "batch"), stack
