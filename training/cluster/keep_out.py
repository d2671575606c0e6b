"""A node that failed is kept out of the job's next attempt: the primary disables task scheduling on it.

Batch retries a failed multi-instance task on whichever idle nodes it picks, and a node whose GPU fell off the bus
after boot is idle and, as far as Batch knows, healthy. So once an attempt ends on a node fault that names hosts
(training/cluster/attempts.py), the primary asks Batch to schedule no more tasks on them: Compute Node - Disable
Scheduling (`POST {account}/pools/{poolId}/nodes/{nodeId}/disablescheduling`, 200 on success, in the Batch REST spec
2025-06-01, BatchService.json, the version azure-batch 15.1.0 speaks: its `BatchClient.disable_node_scheduling`)
with `nodeDisableSchedulingOption: taskcompletion` ("Allow currently running Tasks to complete. Schedule no new
Tasks while waiting. Enter offline state when all Tasks have completed": BatchNodeDisableSchedulingOption). Not
`requeue` or `terminate`: the failing node runs this very task, which must end on its own to upload its logs and
exit with its code. The node goes offline and stays in the pool (and bills) until someone removes it; the pool's
autoscale (infra/backends/batch/spec.py, autoscale_formula) counts the requeued task's instances and adds nodes
for it, so the retry runs on healthy ones. Reboot or Remove Nodes were the other per-node operations: a reboot
brings a node with a failing GPU back as idle and healthy-looking, and removing one needs the pool's resize
rights (Pool - Remove Nodes), more than keeping one node out.

Who may: the pool's user-assigned identity (AZURE_CLIENT_ID in the task's environment), through Azure AD. Node
operations are pool operations in Batch's RBAC; no built-in Batch role grants them without also managing pools
and jobs, so the program does not grant it (docs/architecture.md says what role a team would add and why it is
not granted by default). Without it the call answers 403 and the attempt says so in its line: the retry then may
land on the same node, and the health checks that the coordination command runs again at each attempt's start
are what keep a node with a GPU the checks can see from taking part.

The node's ID comes from its IP (AZ_BATCH_HOST_LIST holds IPs; List Nodes gives each node's `ipAddress`).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

OPTION = "taskcompletion"


def batch_client(env: Mapping[str, str]):
    """The Batch client of this task's account, signed in as the pool's identity."""
    from azure.batch import BatchClient
    from azure.identity import ManagedIdentityCredential

    return BatchClient(env["AZ_BATCH_ACCOUNT_URL"],
                       ManagedIdentityCredential(client_id=env.get("AZURE_CLIENT_ID") or None))


def node_ids(nodes: Sequence[Any], hosts: Sequence[str]) -> dict[str, str]:
    """host (IP) -> node ID, for the hosts found among `nodes` (BatchNode: `.id`, `.ip_address`). Pure."""
    wanted = set(hosts)
    return {node.ip_address: node.id for node in nodes if node.ip_address in wanted}


def keep_out(hosts: Sequence[str], env: Mapping[str, str],
             client_factory: Callable[[Mapping[str, str]], Any] = batch_client) -> tuple[list[str], str]:
    """Disable scheduling on the nodes at `hosts`, in this Batch task's pool: (node IDs done, one line saying
    what happened). Never raises: the attempt's verdict and exit code stand whatever this does."""
    pool = env.get("AZ_BATCH_POOL_ID")
    if not pool or not env.get("AZ_BATCH_ACCOUNT_URL"):
        return [], (f"no Batch account to ask (AZ_BATCH_ACCOUNT_URL and AZ_BATCH_POOL_ID, which Batch sets for a task, "
                    f"are not both set): {', '.join(hosts)} not taken out")
    try:
        from azure.batch.models import BatchNodeDisableSchedulingOptions
        from azure.core.exceptions import HttpResponseError

        client = client_factory(env)
    except (ImportError, KeyError) as err:
        return [], f"cannot reach Batch from this node ({err}): {', '.join(hosts)} not taken out"
    done: list[str] = []
    try:
        ids = node_ids(list(client.list_nodes(pool, select=["id", "ipAddress"])), hosts)
        for host in hosts:
            if host not in ids:
                continue
            client.disable_node_scheduling(pool, ids[host], BatchNodeDisableSchedulingOptions(
                node_disable_scheduling_option=OPTION))
            done.append(ids[host])
    except HttpResponseError as err:
        code = getattr(getattr(err, "error", None), "code", None) or err.status_code
        why = (" (the pool's identity has no role that allows node operations: see docs/architecture.md, "
               "'A failed node kept out')" if err.status_code == 403 else "")
        return done, f"disable scheduling on {', '.join(hosts)} refused: {code}{why}"
    except Exception as err:  # noqa: BLE001 - a network fault here must not hide the attempt's verdict
        return done, f"disable scheduling on {', '.join(hosts)} failed: {type(err).__name__}: {err}"
    finally:
        close = getattr(client, "close", None)
        if close:
            close()
    missing = [h for h in hosts if h not in ids]
    text = f"scheduling disabled ({OPTION}) on node(s) {', '.join(done) or 'none'} of pool {pool}"
    return done, text + (f"; not in the pool: {', '.join(missing)}" if missing else "")
