"""The program evaluated once per stack file under Pulumi's mocks, with the clock pinned."""
from datetime import datetime, timezone

import pytest

from infra.cli import offline
from infra.core import config

NOW = datetime(2026, 11, 21, 12, 34, 56, tzinfo=timezone.utc)
STACKS = config.stack_names()
_cache: dict[str, offline.Evaluation] = {}


def evaluation_for(stack: str) -> offline.Evaluation:
    if stack not in _cache:
        _cache[stack] = offline.evaluate(config.from_stack_file(stack), now=NOW)
    return _cache[stack]


@pytest.fixture(params=STACKS)
def ev(request) -> offline.Evaluation:
    return evaluation_for(request.param)
