"""A node that failed is kept out of the job's next attempt, and leaves the pool so the retry gets a replacement.

Batch retries a failed multi-instance task on whichever idle nodes it picks, and a node whose GPU fell off the bus
after boot is idle and, as far as Batch knows, healthy. So once an attempt ends on a node fault that names hosts
(training/cluster/attempts.py), the primary makes two calls for each (Batch REST spec 2025-06-01, BatchService.json,
the version azure-batch 15.1.0 speaks):

1. Compute Node - Disable Scheduling (`POST {account}/pools/{poolId}/nodes/{nodeId}/disablescheduling`) with
   `nodeDisableSchedulingOption: taskcompletion` ("Allow currently running Tasks to complete. Schedule no new Tasks
   while waiting. Enter offline state when all Tasks have completed": BatchNodeDisableSchedulingOption). It takes
   effect in any allocation state of the pool: the node is out of the retry at once. Not `requeue` or `terminate`:
   the failing node runs this very task, which must end on its own to upload its logs and exit with its code.
2. Pool - Remove Nodes (`POST {account}/pools/{poolId}/removenodes`, `nodeList` and `nodeDeallocationOption:
   taskcompletion`: "Allow currently running Tasks to complete. Schedule no new Tasks while waiting. Remove Compute
   Nodes when all Tasks have completed", BatchNodeDeallocationOption). Disabling alone gets the retry no node: an
   offline node still counts in $CurrentDedicatedNodes and the requeued task's instances in $ActiveTasks, so the
   autoscale formula's target (infra/backends/batch/spec.py, autoscale_formula: the waiting instances) equals the
   pool's size and Batch adds nothing (the formula evaluator gives target 2 for 2 nodes with one offline). Once the
   node has left, the pool holds one node fewer than the target and Batch adds one. The spec's one precondition:
   "This operation can only run when the allocation state of the Pool is steady" (Pools_RemoveNodes); a pool in the
   middle of a resize refuses it (409), and then the line says the node stays offline, and billed, until someone
   removes it (the portal: the pool's Nodes show it offline). Whether Batch accepts Remove Nodes on an autoscale pool
   the docs do not say beyond that precondition. The call is not waited for: the removal completes only after this
   very task has ended (the SDK's poller is left behind, polling once an hour at most).

Who may: the pool's user-assigned identity (AZURE_CLIENT_ID in the task's environment), through Azure AD, and from
where: the account's firewall must admit the nodes' egress address (the NAT gateway's, which the stack adds to the
account's ipRules: infra/backends/batch/cluster.py). Node operations are pool writes in Batch's RBAC
(https://learn.microsoft.com/azure/batch/batch-role-based-access-control: `Microsoft.Batch/batchAccounts/pools/write`,
`.../pools/read`, and `Microsoft.Batch/batchAccounts/read` "for any read operation"); no built-in Batch role grants
them without also managing jobs and the account's applications, so the program does not grant them
(docs/architecture.md, "A failed node kept out", gives the custom role a team adds). A 403 is either cause, the
firewall or the role: the line names both. The retry may then land on the same node, and the health checks that
the coordination command runs again at each attempt's start are what keep a node with a GPU the checks can see
from taking part.

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
        return done, f"disable scheduling on {', '.join(hosts)} refused: {_refusal(err)}"
    except Exception as err:  # noqa: BLE001 - a network fault here must not hide the attempt's verdict
        return done, f"disable scheduling on {', '.join(hosts)} failed: {type(err).__name__}: {err}"
    else:
        removal = _remove(client, pool, done)
    finally:
        close = getattr(client, "close", None)
        if close:
            close()
    missing = [h for h in hosts if h not in ids]
    text = f"scheduling disabled ({OPTION}) on node(s) {', '.join(done) or 'none'} of pool {pool}"
    return done, text + (f"; not in the pool: {', '.join(missing)}" if missing else "") + removal


def _refusal(err) -> str:
    """The refusal's code, and for a 403 both of its possible causes."""
    code = getattr(getattr(err, "error", None), "code", None) or err.status_code
    if err.status_code != 403:
        return str(code)
    return (f"{code} (either the account's firewall does not admit this node's egress address, the NAT gateway's, "
            "which `pulumi up` adds to the account's ipRules, or the pool's identity has no role that allows node "
            "operations: see docs/architecture.md, 'A failed node kept out')")


def _remove(client, pool: str, nodes: list[str]) -> str:
    """Pool - Remove Nodes (taskcompletion) for `nodes`, not waited for: "; ..." saying what it did, for the line."""
    if not nodes:
        return ""
    from azure.batch.models import BatchNodeRemoveOptions
    from azure.core.exceptions import HttpResponseError

    try:
        client.begin_remove_nodes(pool, BatchNodeRemoveOptions(node_ids=nodes, node_deallocation_option=OPTION),
                                  polling_interval=3600)
    except HttpResponseError as err:
        stays = ("the pool is resizing (Remove Nodes needs a steady pool)" if err.status_code == 409
                 else _refusal(err))
        return (f"; removing it refused: {stays}: it stays in the pool offline, and billed, and the retry gets no "
                "replacement until it is removed (the portal: the pool's Nodes, Delete)")
    except Exception as err:  # noqa: BLE001 - as above
        return f"; removing it failed: {type(err).__name__}: {err}"
    return f"; removal asked ({OPTION}): it leaves the pool when this task ends, and autoscale adds a replacement"
