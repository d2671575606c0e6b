"""Node health before training (infra/core/node_health.py): the catalog names each InfiniBand size's
azurehpc-health-checks configuration, and the pool's start task runs it, for real here, against a stand-in
run-health-checks.sh with the real one's exit codes and output."""
import dataclasses
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from infra.backends import backend
from infra.backends.batch import spec as batch_spec
from infra.core import node_health
from infra.core.config import stack as config
from infra.core.skus import CATALOG

# The conf files of azurehpc-health-checks v0.4.5 (git ls-tree v0.4.5 conf/ of https://github.com/Azure/azurehpc-health-checks),
# the release the pinned HPC image installs ("aznhc" 0.4.5 in azhpc-images' versions.json at ubuntu-hpc-2026072901).
CONFS_0_4_5 = {
    "hb120-16rs_v3", "hb120-32rs_v3", "hb120-64rs_v3", "hb120-96rs_v3", "hb120rs_v2", "hb120rs_v3", "hb176-144rs_v4",
    "hb176-24rs_v4", "hb176-48rs_v4", "hb176-96rs_v4", "hb176rs_v4", "hc44-16rs", "hc44-32rs", "hc44rs",
    "hx176-144rs", "hx176-24rs", "hx176-48rs", "hx176-96rs", "hx176rs", "nc12s_v3", "nc24ads_a100_v4", "nc24rs_v3",
    "nc24s_v3", "nc40ads_h100_v5", "nc48ads_a100_v4", "nc6s_v3", "nc80adis_h100_v5", "nc96ads_a100_v4", "nd40rs_v2",
    "nd96amsr_a100_v4", "nd96asr_mi200_v4", "nd96asr_v4", "nd96is_h100_v5", "nd96is_h200_v5", "nd96isr_h100_v5",
    "nd96isr_h200_v5", "nd96isr_mi300x_v5", "nd96isrf_h200_v5"}

H100 = CATALOG["Standard_ND96isr_H100_v5"]
T4 = CATALOG["Standard_NC4as_T4_v3"]
# How NHC words a failed check (azurehpc-health-checks distributed_nhc/README.md) and how the container's entrypoint
# ends (dockerfile/aznhc-entrypoint.sh).
NHC_FAILURE = "ERROR:  nhc:  Health check failed:  check_hw_ib: No IB port mlx5_ib7:1 is ACTIVE (LinkUp 400 Gb/sec)."


@pytest.mark.parametrize("sku", [s for s in CATALOG.values() if s.infiniband], ids=lambda s: s.name)
def test_every_infiniband_size_names_the_conf_the_image_ships_for_it(sku):
    # run-health-checks.sh's own name for a size: lower case, without "standard_"
    assert sku.health_conf == sku.name.lower().removeprefix("standard_") and sku.health_conf in CONFS_0_4_5


def _stand_in(root: Path, exit_code: int) -> Path:
    """run-health-checks.sh as the image installs it, playing its output and exit status (the container's)."""
    (root / "conf").mkdir(parents=True)
    (root / "conf" / f"{H100.health_conf}.conf").write_text(" * || check_gpu_count 8\n")
    script = root / "run-health-checks.sh"
    failure = f"echo '{NHC_FAILURE}' >&2; " if exit_code else ""
    script.write_text("#!/bin/bash\n"
                      'echo "args: $*" > "$(dirname "$0")/called"\n'
                      f'echo "Running health checks using $2 and outputting to $4"; {failure}'
                      f'echo "Health checks completed with exit code: {exit_code}." | tee -a "$4"; exit {exit_code}\n')
    script.chmod(0o755)
    return root


def _start_task(command_line: str, stand_in: Path, cwd: Path) -> subprocess.CompletedProcess:
    """The pool's start task as Batch runs it (its words, no shell of Batch's own), the checks at `stand_in`."""
    command_line = command_line.replace(node_health.HEALTH_CHECKS_DIR, str(stand_in))
    return subprocess.run(shlex.split(command_line), cwd=cwd, capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ["PATH"]})


def test_a_node_that_fails_its_checks_fails_its_start_task_with_their_exit_code(tmp_path):
    checks = _stand_in(tmp_path / "aznhc", 1)
    run = _start_task(batch_spec.start_task_command(False, 30, H100), checks, tmp_path)
    assert run.returncode == 1, run
    assert (checks / "called").read_text().split() == ["args:", "-c", str(checks / "conf/nd96isr_h100_v5.conf"),
                                                      "-o", node_health.HEALTH_LOG]
    assert NHC_FAILURE in run.stderr and f"error: {node_health.FAILED_LINE} (azurehpc-health-checks, conf " \
                                          "nd96isr_h100_v5, exit code 1)" in run.stderr
    assert "node ready" not in run.stdout  # nothing after the checks runs on a failed node


def test_a_healthy_node_goes_on_to_the_rest_of_the_start_task(tmp_path):
    checks = _stand_in(tmp_path / "aznhc", 0)
    run = _start_task(batch_spec.start_task_command(False, 30, H100), checks, tmp_path)
    assert run.returncode == 0, run
    assert "Health checks completed with exit code: 0." in run.stdout and "node ready" in run.stdout
    assert (tmp_path / node_health.HEALTH_LOG).exists()  # the log stays in the start task's working folder


def test_a_size_without_a_configuration_and_a_node_without_the_checks_pass_with_one_line(tmp_path):
    run = _start_task(batch_spec.start_task_command(False, 30, T4), tmp_path / "none", tmp_path)
    assert run.returncode == 0 and run.stdout.splitlines() == [
        "node health: azurehpc-health-checks has no configuration for Standard_NC4as_T4_v3 here: not checked",
        "node ready"]
    run = _start_task(batch_spec.start_task_command(False, 30, H100), tmp_path / "none", tmp_path)
    assert run.returncode == 0 and "is not on this node" in run.stdout and "not checked" in run.stdout


def test_the_checks_run_before_the_data_is_copied_to_the_node():
    start = batch_spec.start_task_command(True, 30, H100)
    assert start.index(node_health.RUN_HEALTH_CHECKS) < start.index("rsync -a")


def on(stack: str, sku) -> str | None:
    """Plan's node health line for `stack` on `sku`, from its backend's describing face."""
    cfg = config.from_stack_file(stack)
    nodes = dataclasses.replace(cfg.nodes, gpu_sku=sku.name)
    return backend(cfg.backend).node_health_line(dataclasses.replace(cfg, nodes=nodes))


def test_plan_names_the_check_on_infiniband_sizes_only():
    assert "azurehpc-health-checks (nd96isr_h100_v5.conf)" in on("dev", H100)
    assert "never takes a task" in on("dev", H100)
    assert on("dev", T4) is None
    assert "not checked before `train` on azureml" in on("nlp", H100)
