"""`python -m infra plan` as a reviewer runs it: a real subprocess, no Azure, no Pulumi CLI."""
import dataclasses
import re
import shutil
import subprocess
import sys

import pytest

from infra.core.config import stack as config

from infra import REPO_ROOT
from infra.preview.offline import MOCK_SAS_SIGNATURE
from tests.infra.conftest import STACKS, evaluation_for


def run_plan(*args):
    return subprocess.run([sys.executable, "-m", "infra", "plan", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def plans():
    """`plan --stack NAME` for every stack in the repo, run once and read by several tests."""
    return {stack: run_plan("--stack", stack) for stack in STACKS}


def test_plan_prints_tree_cost_and_verdicts_for_dev(plans):
    result = plans["dev"]
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for expected in ("dltrain:index:Environment", "├─ dltrain:network:Network", "azure-native:storage:StorageAccount",
                     "networkRuleSet.defaultAction=Deny", "adminUserEnabled=false", "docker-build:index:Image",
                     "at minNodes=0: 1.25 per hour", "at maxNodes=2: 55.76 per hour (16 GPUs)",
                     "├─ dltrain:nfs:NfsServer", "azure-native:compute:VirtualMachine", "NFS server VM (Standard_D16s_v5)",
                     "azure-native:batch:Pool", "provision=NoPublicIPAddresses", "interNodeCommunication=Enabled",
                     "mountConfiguration.nfsMountConfiguration.source=10.10.16.4:/data",
                     "dltrain-dev-job  framework=pytorch nodes=2 gpu_sku=Standard_ND96asr_v4",
                     "launched on `pulumi up`: pytorch on 2 node(s) x 8 GPUs", "PASS batch-pool-private",
                     "PASS storage-https-only", "PASS sas-least-privilege", "sas: [secret]",
                     # What `pulumi up` will need that the program cannot do: the placeholder, the GPU quota.
                     "Before `pulumi up`", "203.0.113.0/24 is the example stack's placeholder",
                     "Batch dedicated core quota for the Standard_ND96asr_v4 family (StandardNDASv4_A100Family) in "
                     "westeurope: 192 vCPUs",
                     "Is Standard_ND96asr_v4 offered to Batch pools in westeurope? Batch's supported-size table lists "
                     "its series", "az batch location list-skus --location westeurope",
                     # The roles `up` grants the identity running it, and the rules Azure enforces at the service.
                     "`pulumi up` grants your identity (User, deployerPrincipalType) Azure Batch Job Submitter on ",
                     "`pulumi up` grants your identity (User, deployerPrincipalType) Storage Blob Data Reader on ",
                     "Azure service rules", "PASS storage-firewall-ip-rules", "PASS vnet-rule-service-endpoints",
                     "osDisk.diskSizeGB=256"):
        assert expected in out, expected
    assert "FAIL" not in out
    assert MOCK_SAS_SIGNATURE not in out + result.stderr  # SAS values are never printed


def test_plan_refuses_a_bad_stack_with_one_line(tmp_path):
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path)
    (tmp_path / "Pulumi.bad.yaml").write_text("config:\n  azure-dl-training:allowedIpRanges: [20.50.1.7/32]\n"
                                              "  azure-dl-training:gpuSku: Standard_NC24rs_v3\n")
    result = run_plan("--stack", "bad", "--project-dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "error: Pulumi.bad.yaml: config key 'gpuSku': Standard_NC24rs_v3 was retired on 2025-09-30; "
        "use Standard_ND96asr_v4"]


def test_plan_unknown_stack_names_the_known_ones():
    result = run_plan("--stack", "nope")
    assert result.returncode == 2 and f"stacks here: {', '.join(config.stack_names())}" in result.stderr
    assert "dev, nlp, trial, vision" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_teaches_the_commands():
    result = subprocess.run([sys.executable, "-m", "infra", "--help"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0 and "plan" in result.stdout and "Examples" in result.stdout


def test_help_lists_each_command_once_then_the_examples():
    result = subprocess.run([sys.executable, "-m", "infra", "--help"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    commands = ("plan", "preflight", "leftovers", "changed-stacks", "ci-roles", "shared-images", "new-team", "teams", "member-file", "upload", "datasets", "shard", "submit", "status",
                "logs", "download", "cancel", "register-model", "restage", "rehearse")
    first_words = [line.split()[0] for line in result.stdout.splitlines() if line.strip()]
    assert {name: first_words.count(name) for name in commands} == dict.fromkeys(commands, 1)
    listed = result.stdout.split("\ncommands:\n", 1)[1].split("\n\n", 1)[0]
    # In the order of use: plan, preflight, leftovers, the fleet pipeline's verbs, the teams' stack files, a member's file and data, the job
    # verbs, restage, the rehearsal.
    assert [line.split()[0] for line in listed.splitlines() if re.match(r" {4}\S", line)] == list(commands)
    examples = result.stdout.split("\nExamples:\n", 1)[1]
    assert "python -m infra plan --stack vision" in examples and "sudo python -m infra rehearse" in examples


def test_the_deployers_grants_print_in_one_order_whatever_order_the_resources_registered_in():
    """The program registers resources from a thread pool: their order varies from run to run, the plan's must not."""
    from infra.cli import plan

    evaluation = evaluation_for("dev")
    text, _ = plan.render(evaluation)
    reordered, _ = plan.render(dataclasses.replace(evaluation, resources=evaluation.resources[::-1]))
    grants = [line for line in text.splitlines() if "`pulumi up` grants your identity" in line]
    assert len(grants) == 2  # more than one, or there is no order to keep (dataTier node-local: no `status` read)
    assert reordered == text


def test_plan_passes_its_security_checks_for_every_stack_in_the_repo(plans):
    for result in plans.values():
        assert result.returncode == 0 and "FAIL" not in result.stdout, result.stdout + result.stderr
        assert "note: allowedIpRanges: 203.0.113.0/24" in result.stderr


def test_a_batch_node_costs_its_size_and_its_os_disk_at_the_premium_tier_it_fits():
    """The pool's nodes carry a premium OS disk sized for the images (cluster.py): it bills per node."""
    from infra.core import cost
    from infra.core.backend_facts import POOL_OS_DISK_GB

    cfg = config.from_stack_file("dev")
    p15_per_month = dict(cost.PREMIUM_SSD_TIERS)[256]  # Azure's P15 tier: up to 256 GiB
    assert POOL_OS_DISK_GB <= 256
    assert cost.estimate(cfg).node_price == pytest.approx(cfg.nodes.sku.price_per_hour + p15_per_month / 730)
    aml = config.from_stack_file("nlp")
    assert cost.estimate(aml).node_price == aml.nodes.sku.price_per_hour


# --- spot: true, and the catalog's rows as plan shows them (issue 25) --------------------------------------------

def _batch_config(**values):
    base = config.from_stack_file("dev")
    return dataclasses.replace(base, nodes=dataclasses.replace(base.nodes, **values))


def test_plan_shows_batch_spot_nodes_their_cost_bound_and_their_quota():
    from infra.cli import plan

    cfg = _batch_config(spot=True)
    lines = plan._spot_lines(cfg)
    assert lines[0].startswith(f"  spot: true: Spot nodes bill the Spot rate of {cfg.nodes.gpu_sku} in {cfg.location}")
    assert "at most the pay-as-you-go price" in lines[0] and "upper bound" in lines[0]
    assert "evicted node bills until Azure removes it" in lines[1] and "newest checkpoint" in lines[1]
    assert "--checkpoint-minutes 30 bounds what an eviction loses" in lines[1]  # the default
    trial = config.from_stack_file("trial")  # its trainingArgs set --checkpoint-minutes 10
    assert "--checkpoint-minutes 10 bounds what an eviction loses" in plan._spot_lines(trial)[1]
    quota = next(line for line in plan.before_up(cfg) if "quota" in line)
    assert quota.startswith(f"Batch Spot core quota (the account's lowPriorityCoreQuota, one for all VM families, "
                            f"spot: true) in {cfg.location}: {cfg.nodes.max_nodes * cfg.nodes.sku.vcpus} vCPUs")
    assert plan._spot_lines(_batch_config(spot=False)) == []
    assert "dedicated core quota" in next(line for line in plan.before_up(_batch_config(spot=False)) if "quota" in line)


def test_plan_says_how_to_check_a_size_the_docs_are_silent_on_and_that_its_price_is_rough():
    from infra.cli import plan

    cfg = _batch_config(gpu_sku="Standard_ND96isr_H200_v5")
    offered = next(line for line in plan.before_up(cfg) if line.startswith("Is Standard_ND96isr_H200_v5 offered"))
    assert "Batch's size docs are silent on it" in offered
    assert "az batch location list-skus --location westeurope --query \"[?name=='Standard_ND96isr_H200_v5']\"" in offered
    assert "(standardNDISRH200V5Family)" in next(line for line in plan.before_up(cfg) if "quota" in line)


@pytest.mark.parametrize("days,warned", [(400, False), (365, True), (30, True)])
def test_plan_warns_on_a_size_near_its_retirement_with_its_successor(days, warned):
    from datetime import date, timedelta

    from infra.cli import plan
    from infra.core import skus

    today = date(2026, 11, 23)
    retiring = dataclasses.replace(skus.CATALOG["Standard_ND96asr_v4"], retiring_on=str(today + timedelta(days)),
                                   successor="Standard_ND96isr_H100_v5")
    line = skus.retirement_warning(retiring, today)
    assert (line is not None) == warned
    if warned:
        assert line == (f"gpuSku Standard_ND96asr_v4 retires on {today + timedelta(days)} (in {days} days): pools "
                        "and clusters of it stop getting nodes then; move to Standard_ND96isr_H100_v5")
    # No size in the catalog has an announced retirement ahead (none found in Azure's docs): plan warns on none.
    assert not any(w for w in plan.before_up(config.from_stack_file("dev"), today) if "retires on" in w)


def test_plan_of_an_infiniband_gpu_stack_names_the_node_health_check():
    """One line, under the training job (infra/core/node_health.py: the pool's start task runs azurehpc-health-checks)."""
    result = run_plan("--stack", "dev")  # Batch, Standard_ND96asr_v4
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stdout.splitlines() if "node health" in line]
    assert line.startswith("  node health: the pool's start task runs azurehpc-health-checks (nd96asr_v4.conf) on every "
                           "node") and "never takes a task" in line
