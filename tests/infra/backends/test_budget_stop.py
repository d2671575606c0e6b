"""Day 2 of a budget stop, played end to end at the level the local endpoints reach: the guard's PATCH (the body the
stack's Logic App sends) leaves the Batch pool at fixed scale 0; `submit` refuses while spend is over the budget,
then, with the budget raised, refuses again naming `pulumi up` while the pool is still stopped (a job would wait for
nodes forever); the next `up` refreshes first (Pulumi.yaml's options.refresh: always) and so sees the live pool and
patches the declared autoscale formula back in place; then a job is submitted and runs to its end.

What is not played here: Pulumi's engine itself (its refresh reads the pool through azure-native: the Pulumi CLI
cannot run on these machines), so the `up` step is the project option the CLI reads (pkg/cmd/pulumi/operations/
io.go, getRefreshOption: "always" refreshes every update, preview and destroy) plus the declared pool the
refreshed diff compares against, applied to the account as Pools - Update would."""

import yaml

from infra import REPO_ROOT
from infra.backends.batch import cluster, operate
from infra.core.config import stack as config
from infra.preview import offline
from tests.infra.backends.test_spend import cost, project, run  # noqa: F401 - fixtures
from tests.infra.conftest import NOW


def declared(project_dir):
    """The stack's Logic App definition (the guard's PATCH) and its declared pool, as `up` sends them."""
    cfg = config.from_stack_file("dev", project_dir)
    ev = offline.evaluate(cfg, now=NOW)
    action = ev.one("azure-native:logic:Workflow").inputs["definition"]["actions"]["when_spent"]["actions"][
        "scale_to_zero"]
    return action["inputs"]["body"], ev.one("azure-native:batch:Pool").inputs


def as_batch_sees(arm_scale: dict) -> dict:
    """ARM's ScaleSettings (fixedScale or autoScale: https://learn.microsoft.com/azure/templates/microsoft.batch/
    batchaccounts/pools) as the Batch data plane's pool shows them (Pools - Get: enableAutoScale, autoScaleFormula,
    targetDedicatedNodes, targetLowPriorityNodes)."""
    if "autoScale" in arm_scale:
        return {"enableAutoScale": True, "autoScaleFormula": arm_scale["autoScale"]["formula"],
                "autoScaleEvaluationInterval": arm_scale["autoScale"]["evaluationInterval"]}
    fixed = arm_scale["fixedScale"]
    return {"enableAutoScale": False, "targetDedicatedNodes": fixed["targetDedicatedNodes"],
            "targetLowPriorityNodes": fixed["targetLowPriorityNodes"]}


def test_after_a_budget_stop_submit_names_the_fix_and_the_next_up_brings_the_pool_back(project, batch, cost, capsys):
    guard_body, pool = declared(project)
    batch.account.pools["gpu"] = {"id": "gpu", "state": "active", "allocationState": "steady",
                                  "currentDedicatedNodes": 0, "currentLowPriorityNodes": 0,
                                  **as_batch_sees(pool["scaleSettings"])}
    # The month's spend reaches the budget: the budget's action group runs the guard, whose PATCH stops the pool.
    cost.rows = [[1000.0, "USD"]]
    batch.account.pools["gpu"].update(as_batch_sees(guard_body["properties"]["scaleSettings"]))
    code, _, err = run("submit", project, batch, cost, capsys, "--nodes", "1")
    assert code == 1 and "no new job until next month" in err and not batch.jobs

    # The team raises monthlyBudgetUsd: spend is under it, but the pool is still at fixed scale 0.
    stack = project / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text().replace("monthlyBudgetUsd: 1000", "monthlyBudgetUsd: 3000"))
    code, _, err = run("submit", project, batch, cost, capsys, "--nodes", "1")
    assert code == 1 and err.count("\n") == 1 and not batch.jobs, err
    assert "pool gpu is at fixed scale 0" in err and "pulumi up --stack dev" in err and "refreshes first" in err

    # The next `up`: the project refreshes before every update, so the diff is live pool vs declared pool, and
    # scaleSettings is patched in place (not among the properties that replace the pool).
    project_file = yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())
    assert project_file["options"] == {"refresh": "always"}
    assert "scaleSettings" not in cluster.REPLACE_ON_CHANGES and "autoScale" in pool["scaleSettings"]
    batch.account.pools["gpu"].update(as_batch_sees(pool["scaleSettings"]))

    code, out, err = run("submit", project, batch, cost, capsys, "--nodes", "1")
    assert code == 0, err
    [job] = batch.jobs
    batch.tasks[job].update(state="completed", executionInfo={"exitCode": 0, "retryCount": 0, "requeueCount": 0})
    batch.account.update_job(job, {})
    assert batch.jobs[job]["state"] == "completed"


def test_a_pool_at_fixed_scale_with_nodes_or_on_autoscale_is_not_a_stop():
    assert operate.budget_stop_line(None, "dev") is None
    assert operate.budget_stop_line({"id": "gpu", "enableAutoScale": True}, "dev") is None
    assert operate.budget_stop_line({"id": "gpu", "enableAutoScale": False, "targetDedicatedNodes": 2,
                                     "targetLowPriorityNodes": 0}, "dev") is None
    assert operate.budget_stop_line({"id": "gpu", "enableAutoScale": False, "targetDedicatedNodes": 0,
                                     "targetLowPriorityNodes": 0}, "dev").startswith("pool gpu is at fixed scale 0")
