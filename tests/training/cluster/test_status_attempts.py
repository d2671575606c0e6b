"""`status` says each attempt (infra/backends/batch/operate.py reading training/cluster/attempts.py's lines from the
primary's stdout.txt through the real azure-batch client and the local Batch endpoint): the fault, the node it
blamed and took out, the node-hours it cost."""
import dataclasses
import io

import pytest

from infra.backends.batch import operate
from infra.backends.batch import spec as batch_spec
from infra.backends.shared import StackOutputs, now_utc
from infra.core.config import stack as config
from tests.infra.backends.batch.fake_batch import FakeBatch
from tests.infra.backends.batch.test_operate import OUTPUTS
from training.cluster import attempts


@pytest.fixture
def batch():
    service = FakeBatch()
    yield service
    service.close()


def test_status_shows_each_attempt_the_node_it_blamed_and_what_it_cost(batch):
    spec = batch_spec.job_inputs(config.from_stack_file("dev"), StackOutputs.from_json(OUTPUTS))
    job = operate.submit(batch, dataclasses.replace(spec, nodes=2), now_utc(), io.StringIO())
    hang = attempts.attempt_record(0, 0, 900, ["10.0.0.4", "10.0.0.5"], attempts.classify(
        [{"rank": 0, "host": "10.0.0.4", "kind": "node", "exit_code": 76, "reason": "hang",
          "blamed_hosts": ["10.0.0.5"], "line": "error: node fault: ..."}], 1), job=job)
    hang.blamed_nodes = ["tvmps_5"]
    done = attempts.attempt_record(1, 1000, 4600, ["10.0.0.4", "10.0.0.6"], attempts.classify([], 0), job=job)
    batch.tasks[job]["state"] = "completed"
    batch.tasks[job]["executionInfo"] = {"retryCount": 1, "requeueCount": 0, "exitCode": 0}
    batch.files[(job, "stdout.txt")] = "\n".join(
        [attempts.record_line(dataclasses.asdict(hang)), "step 10/90 ...", attempts.record_line(dataclasses.asdict(done))]
    ).encode()
    lines = operate.status(batch, job).lines()
    assert "  attempt 1: node fault (hang, exit 76); blamed: 10.0.0.5 (node tvmps_5 taken out of scheduling); " \
           "cost 0.500 node-hours" in lines, lines
    assert "  attempt 2: finished on 2 node(s)" in lines
    assert "  failures cost 0.500 node-hours in all" in lines
