"""Node health before training: the health checks the HPC image ships (azurehpc-health-checks), run by the Batch
pool's start task so that a node that fails them never takes a task.

Facts this relies on, each from its source:
- The Ubuntu HPC image installs https://github.com/Azure/azurehpc-health-checks (the tag its versions.json names:
  "aznhc" 0.4.5 in the release the pool pins, https://github.com/Azure/azhpc-images/blob/ubuntu-hpc-2026072901/versions.json)
  into /opt/azurehpc/test/azurehpc-health-checks and pulls its container image (mcr.microsoft.com/aznhc/aznhc-nv)
  at build time (components/install_health_checks.sh in azhpc-images; ubuntu24.04/install.sh runs it on every size
  but NCv6).
- run-health-checks.sh (same repo): `-c <conf>` names the configuration (default: conf/<vm size, lower case,
  without "standard_">.conf, and for a size without one it prints "The vm SKU ... is currently not supported by
  Azure health checks." and exits 0); `-o <file>` is the log (default ./health.log). It runs the checks in the NHC
  container (`sudo docker run ... --gpus all --privileged`), and its exit status is that container's, whose
  entrypoint (dockerfile/aznhc-entrypoint.sh) exits with NHC's: 0 when every check passed, non-zero when one failed,
  after printing "Health checks completed with exit code: N."; NHC reports a failure as
  "ERROR:  nhc:  Health check failed:  <check>: <why>" (distributed_nhc/README.md shows such lines: a down IB
  port, ECC errors, Xid errors, low NCCL all-reduce bandwidth). Each check times out after 500 s by default (-t).
- A start task with waitForSuccess true that still fails after maxTaskRetryCount retries leaves the node unusable:
  "the Batch service marks the Node unusable, and will not schedule Tasks to it. This condition can be detected via
  the Compute Node state and failure info details" (BatchStartTask.waitForSuccess in the Batch REST spec,
  https://github.com/Azure/azure-rest-api-specs/blob/main/specification/batch/data-plane/Azure.Batch/stable/2025-06-01/BatchService.json);
  the node's state is then `starttaskfailed` (BatchNodeState) and its startTaskInfo carries exitCode, retryCount,
  result and failureInfo (BatchStartTaskInfo, BatchTaskFailureInfo). Such a node stays in the pool, and bills.
"""
from __future__ import annotations

import shlex

from infra.core.skus import GpuSku

HEALTH_CHECKS_DIR = "/opt/azurehpc/test/azurehpc-health-checks"
RUN_HEALTH_CHECKS = f"{HEALTH_CHECKS_DIR}/run-health-checks.sh"
HEALTH_LOG = "health.log"  # in the start task's working folder ($AZ_BATCH_NODE_STARTUP_DIR/wd)
FAILED_LINE = "node health check failed"  # what the start task's stderr says first when a check fails
REPO = "https://github.com/Azure/azurehpc-health-checks"


def conf_path(sku: GpuSku) -> str:
    return f"{HEALTH_CHECKS_DIR}/conf/{sku.health_conf}.conf"


def check_command(sku: GpuSku) -> str:
    """Shell (bash) for the start task: the size's health checks, exiting with their status when one fails; a size
    without a configuration, or a node without the checks or the conf, passes with one line saying why."""
    if not sku.health_conf:
        return shlex.join(["echo", f"node health: azurehpc-health-checks has no configuration for {sku.name} here: "
                                   "not checked"])
    conf, script = shlex.quote(conf_path(sku)), shlex.quote(RUN_HEALTH_CHECKS)
    missing = shlex.quote(f"node health: {RUN_HEALTH_CHECKS} or its conf {sku.health_conf}.conf is not on this node "
                          f"(the HPC image installs them: {REPO}): not checked")
    failed = (f"{FAILED_LINE} (azurehpc-health-checks, conf {sku.health_conf}, exit code $rc): this node takes no task; "
              f"the failed check is in its start task's stderr.txt and wd/{HEALTH_LOG}")
    return (f"if [ -x {script} ] && [ -f {conf} ]; then echo 'node health: running azurehpc-health-checks "
            f"({sku.health_conf})'; {script} -c {conf} -o {HEALTH_LOG}; rc=$?; "
            f"if [ $rc -ne 0 ]; then echo \"error: {failed}\" >&2; exit $rc; fi; "
            f"else echo {missing}; fi")


def plan_line(sku: GpuSku) -> str | None:
    """Plan's one line on the pool's node health checks for an InfiniBand GPU size (None for the others)."""
    if not sku.infiniband:
        return None
    if not sku.health_conf:
        return f"  node health: azurehpc-health-checks has no configuration for {sku.name}: nodes are not checked"
    return (f"  node health: the pool's start task runs azurehpc-health-checks ({sku.health_conf}.conf) on every node "
            "(a few minutes per boot); a node that fails them never takes a task (waitForSuccess) but stays and "
            "bills: `python -m infra status` names it and why")
