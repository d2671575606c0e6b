"""The program evaluated once per stack file under Pulumi's mocks, with the clock pinned."""
from datetime import datetime, timezone

import pytest

from infra.preview import offline
from infra.core.config import stack as config

NOW = datetime(2026, 11, 21, 12, 34, 56, tzinfo=timezone.utc)
STACKS = config.stack_names()
BACKEND_OF = {stack: config.from_stack_file(stack).backend for stack in STACKS}
BATCH_STACKS = [s for s in STACKS if BACKEND_OF[s] == "batch"]
AML_STACKS = [s for s in STACKS if BACKEND_OF[s] == "azureml"]
_cache: dict[str, offline.Evaluation] = {}


def evaluation_for(stack: str) -> offline.Evaluation:
    if stack not in _cache:
        _cache[stack] = offline.evaluate(config.from_stack_file(stack), now=NOW)
    return _cache[stack]


@pytest.fixture(params=STACKS)
def ev(request) -> offline.Evaluation:
    return evaluation_for(request.param)


@pytest.fixture(params=BATCH_STACKS)
def batch_ev(request) -> offline.Evaluation:
    """A stack with the Batch backend (the NFS server, the pool, the job)."""
    return evaluation_for(request.param)


@pytest.fixture(params=AML_STACKS)
def aml_ev(request) -> offline.Evaluation:
    """A stack with the Azure ML backend."""
    return evaluation_for(request.param)
