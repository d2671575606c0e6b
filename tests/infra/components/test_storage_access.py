"""Least privilege on storage, the control plane included: every principal the stacks grant (the team's groups, the
GPU nodes' identity, the NFS server's, the deployer) holds on storage what docs/teams.md's table says and nothing beyond,
judged by ALL the Actions and DataActions of its roles' definitions (infra/core/security/role_ids.py ROLE_PERMISSIONS, from
https://learn.microsoft.com/azure/role-based-access-control/built-in-roles), not by the roles' names. A grant on the
resource group counts (Reader's */read and Contributor's * reach the account); an ABAC condition does not narrow the
control plane (conditions-format), so it is not read here."""
import re

import pytest

from infra import REPO_ROOT
from infra.components import roles
from infra.core.security import role_ids
from infra.preview import offline
from tests.infra.components.test_access import ADMINS, MEMBERS, ROLE_ASSIGNMENT, with_team
from tests.infra.conftest import AML_STACKS, BATCH_STACKS, evaluation_for

PREFIX = "Microsoft.Storage/storageAccounts/blobServices/"
# What would let a principal delete or replace a container through ARM (Blob Containers - Delete / Create).
CONTAINER_CONTROL = {"*", "containers/delete", "containers/write"}


def readme_table() -> dict[str, tuple[set[str], set[str]]]:
    text = (REPO_ROOT / "docs" / "teams.md").read_text()
    block = text.split("<!-- storage-access-table -->")[1].split("<!-- /storage-access-table -->")[0]
    rows = {}
    for line in block.strip().splitlines()[2:]:
        principal, actions, data = [cell.strip() for cell in line.strip().strip("|").split("|")]
        rows[principal] = (set(re.findall(r"`([^`]+)`", actions)), set(re.findall(r"`([^`]+)`", data)))
    return rows


def principal_kind(ev: offline.Evaluation, assignment) -> str:
    p = assignment.inputs
    if p["principalId"] == MEMBERS:
        return "teamMembers"
    if p["principalId"] == ADMINS:
        return "teamAdmins"
    if str(p.get("description") or "").startswith(roles.DEPLOYER):
        return "deployer"
    guards = {w.state["identity"]["principalId"] for w in ev.of_type("azure-native:logic:Workflow")}
    if p["principalId"] in guards:
        return "budget guard"
    identities = {i.state["principalId"]: i.name for i in ev.of_type("azure-native:managedidentity:UserAssignedIdentity")}
    name = identities.get(p["principalId"], "")
    if name.endswith("-nfs-id"):
        return "NFS server"
    if "-nodes-" in name:
        return "nodes"
    return f"unknown principal {p['principalId']} ({assignment.urn})"


def on_storage(ev: offline.Evaluation) -> dict[str, tuple[set[str], set[str]]]:
    """principal kind -> (storage Actions, storage DataActions) it holds, relative to PREFIX."""
    group = ev.one("azure-native:resources:ResourceGroup").state["id"]
    held: dict[str, tuple[set[str], set[str]]] = {}
    for assignment in ev.of_type(ROLE_ASSIGNMENT):
        scope = assignment.inputs["scope"]
        if scope != group and "/Microsoft.Storage/storageAccounts/" not in scope:
            continue  # a grant on the registry, the Batch account, the workspace or a pool reaches no storage
        role = role_ids.role_key(assignment.inputs["roleDefinitionId"], scope)
        assert role in role_ids.ROLE_PERMISSIONS, f"{assignment.urn}: judge {role}'s Actions in security/role_ids.py first"
        actions, data = role_ids.ROLE_PERMISSIONS[role]
        kind = principal_kind(ev, assignment)
        mine = held.setdefault(kind, (set(), set()))
        mine[0].update(a.removeprefix(PREFIX) for a in actions)
        mine[1].update(d.removeprefix(PREFIX) for d in data)
    return held


@pytest.mark.parametrize("stack", BATCH_STACKS[:1] + AML_STACKS[:1])
@pytest.mark.parametrize("team", [True, False], ids=["with-team", "without-team"])
def test_each_principal_holds_on_storage_what_the_readme_table_says_and_no_container_control(stack, team):
    from tests.infra.components.test_budget import with_budget

    ev = with_team(stack) if team else with_budget(stack)  # the budget's guard too
    table = readme_table()
    for kind, (actions, data) in on_storage(ev).items():
        assert kind in table, kind
        assert actions <= table[kind][0] and data <= table[kind][1], (stack, kind, actions, data)
        if kind != "teamAdmins":  # Contributor, for `pulumi up`, is the one role that may
            assert not actions & CONTAINER_CONTROL, (stack, kind, actions & CONTAINER_CONTROL)


def test_the_writer_role_is_declared_in_the_stacks_group_with_the_table_s_actions_only():
    ev = evaluation_for(BATCH_STACKS[0])
    [definition] = ev.of_type("azure-native:authorization:RoleDefinition")
    group = ev.one("azure-native:resources:ResourceGroup").state["id"]
    assert definition.inputs["assignableScopes"] == [group] and definition.inputs["scope"] == group
    [permission] = definition.inputs["permissions"]
    actions, data = role_ids.ROLE_PERMISSIONS[role_ids.BLOB_DATA_WRITER]
    assert permission["actions"] == list(actions) and permission["dataActions"] == list(data)
    assert not {a.removeprefix(PREFIX) for a in actions} & CONTAINER_CONTROL
    rg = ev.one("azure-native:resources:ResourceGroup").state["name"]
    assert definition.inputs["roleDefinitionId"] == role_ids.custom_role_id(offline.SUBSCRIPTION, rg,
                                                                            role_ids.BLOB_DATA_WRITER)


def test_deleted_blobs_and_containers_stay_restorable():
    from infra.components.storage import SOFT_DELETE_DAYS
    from infra.core.security import resources as security

    ev = evaluation_for(BATCH_STACKS[0])
    [service] = ev.of_type("azure-native:storage:BlobServiceProperties")
    account = ev.one("azure-native:storage:StorageAccount", "-data-")
    assert service.inputs["accountName"] == account.state["name"] and service.inputs["blobServicesName"] == "default"
    for key in ("deleteRetentionPolicy", "containerDeleteRetentionPolicy"):
        assert service.inputs[key] == {"enabled": True, "days": SOFT_DELETE_DAYS}
    [check] = [c for c in security.RESOURCE_CHECKS if c.name == "storage-soft-delete"]
    assert check.validate(service.inputs) is None
    assert "containerDeleteRetentionPolicy not enabled" in check.validate({**service.inputs,
                                                                    "containerDeleteRetentionPolicy": {"enabled": False}})
