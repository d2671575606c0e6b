"""The rehearsal's nodes as the host sees them: every pool's links are its own, and gone when it closes."""
from __future__ import annotations

import subprocess

import pytest

from tests.infra.backends.batch import job_nodes

NODES_UNAVAILABLE = job_nodes.unavailable()


def host_links() -> set[str]:
    shown = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in shown.splitlines()}


@pytest.mark.skipif(bool(NODES_UNAVAILABLE), reason=NODES_UNAVAILABLE or "-")
def test_pools_one_after_another_in_one_process_never_meet_each_others_links(tmp_path):
    """The CI's failure: a pool closed, the next one in the same process met its veth ("File exists"), because a
    namespace's teardown is asynchronous. Now each pool names its links apart, and close() removes them itself."""
    seen: set[str] = set()
    for round_ in range(3):
        with job_nodes.pool(tmp_path / str(round_), 2) as nodes:
            links = {nodes.bridge, *(nodes.host_link(node) for node in nodes.nodes)}
            assert all(len(name) <= 15 for name in links), links  # Linux's IFNAMSIZ - 1
            assert links <= host_links()
            assert not links & seen, "a pool reused the names of one before it"
            seen |= links
        assert not links & host_links(), "a closed pool's links outlived close()"
