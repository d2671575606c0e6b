"""Azure's arithmetic after a node fault, with the stack's own autoscale formula run by the evaluator of Batch's
documented semantics (devtools/rehearsal/autoscale.py): a node only taken out of scheduling still counts in
$CurrentDedicatedNodes, so the retry of a 2-node job gets no replacement on a 2-node pool whatever maxNodes is; once
the node has left the pool (Pool - Remove Nodes, training/cluster/keep_out.py) the target exceeds the pool by one."""
import pytest

from devtools.rehearsal.autoscale import nodes_added, target_after_retry
from infra.backends.batch import spec as batch_spec


@pytest.mark.parametrize("max_nodes", [2, 8])
@pytest.mark.parametrize("spot", [False, True])
@pytest.mark.parametrize("deadline", [None, 30])
def test_an_offline_node_gets_the_retry_no_replacement_and_a_removed_one_does(max_nodes, spot, deadline):
    formula = batch_spec.autoscale_formula(0, max_nodes, spot, deadline)
    # Disabled only: 2 nodes in the pool, one offline; the requeued task asks for 2 -> target 2, nothing added.
    assert target_after_retry(formula, instances=2, current=2, spot=spot) == 2
    # Removed once its task ended: 1 node left -> target 2, Batch adds one.
    assert target_after_retry(formula, instances=2, current=1, spot=spot) == 2


def test_the_rehearsal_pool_adds_only_what_the_formula_asks_for():
    formula = batch_spec.autoscale_formula(0, 8, False, 30)
    assert nodes_added(formula, instances=2, in_pool=2, spot=False) == 0  # the offline node counts
    assert nodes_added(formula, instances=2, in_pool=1, spot=False) == 1
    assert nodes_added(batch_spec.autoscale_formula(0, 1, False), instances=2, in_pool=1, spot=False) == 0
