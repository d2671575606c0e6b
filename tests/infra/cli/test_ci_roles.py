"""The deploy identity's grantable roles (infra/core/security/ci_roles.py, `python -m infra ci-roles`): the condition has
Azure's "Constrain roles" form, and the roles it admits cover every role assignment the program declares, on
both backends (the program evaluated offline, as plan evaluates it)."""
import dataclasses
import json
import re
import shutil

import pytest

from infra import REPO_ROOT
from infra.cli.main import main
from infra.core.security import ci_roles, role_ids
from infra.core.config import stack as config
from infra.preview import offline

# Azure's example "Constrain roles" (Backup Contributor, Backup Reader), as its page writes it:
# https://learn.microsoft.com/azure/role-based-access-control/delegate-role-assignments-examples#example-constrain-roles
DOC_EXAMPLE = """
(
 (
  !(ActionMatches{'Microsoft.Authorization/roleAssignments/write'})
 )
 OR
 (
  @Request[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals {5e467623-bb1f-42f4-a55d-6e525e11384b, a795c7a0-d4a2-40c1-ae25-d81f01202912}
 )
)
AND
(
 (
  !(ActionMatches{'Microsoft.Authorization/roleAssignments/delete'})
 )
 OR
 (
  @Resource[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals {5e467623-bb1f-42f4-a55d-6e525e11384b, a795c7a0-d4a2-40c1-ae25-d81f01202912}
 )
)
"""


def _squeezed(text):
    return re.sub(r"\s+", "", text)


def test_the_condition_has_azures_constrain_roles_form():
    made = ci_roles.condition(["a795c7a0-d4a2-40c1-ae25-d81f01202912", "5e467623-bb1f-42f4-a55d-6e525e11384b"])
    assert _squeezed(made) == _squeezed(DOC_EXAMPLE)


@pytest.mark.parametrize("stack", ["trial", "nlp"])  # the Batch and the Azure ML backend
def test_every_role_the_program_assigns_is_admitted(stack):
    cfg = config.from_stack_file(stack)
    evaluation = offline.evaluate(cfg)
    allowed = ci_roles.assignable(offline.SUBSCRIPTION, [(cfg.team, cfg.stack)])
    assigned = {str(r.inputs["roleDefinitionId"]).rsplit("/", 1)[-1]
                for r in evaluation.of_type("azure-native:authorization:RoleAssignment")}
    assert assigned and assigned <= set(allowed), assigned - set(allowed)
    custom = {r.inputs["roleDefinitionId"] for r in evaluation.of_type("azure-native:authorization:RoleDefinition")}
    assert custom and custom <= set(allowed)
    # and nothing that lets it grant itself more: Owner, User Access Administrator, RBAC Administrator
    assert not {"8e3af657-a8ff-443c-a75c-2fe8c4bcb635", "18d7d88d-d35e-4fb5-a5c3-7773c20a72d9",
                "f58310d9-a9f6-439a-9e8d-f62e7b41a168"} & set(allowed)


def test_the_verb_takes_the_subscriptions_stacks(tmp_path, capsys):
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path)
    for stack in ("trial", "vision"):
        shutil.copy(REPO_ROOT / f"Pulumi.{stack}.yaml", tmp_path)
    other = "11111111-2222-3333-4444-555555555555"
    vision = tmp_path / "Pulumi.vision.yaml"
    vision.write_text(vision.read_text().replace("config:\n", f"config:\n  azure-native:subscriptionId: {other}\n", 1))
    sub = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    assert main(["ci-roles", "--subscription", sub, "--json", "--project-dir", str(tmp_path)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["stacks"] == ["trial"]  # vision deploys to the other subscription; trial sets none
    assert got["roles"] == ci_roles.assignable(sub, [("trial", "trial")])
    assert main(["ci-roles", "--subscription", other, "--condition-only", "--project-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == ci_roles.condition(ci_roles.assignable(other, [("trial", "trial"),
                                                                                     ("vision", "vision")])) + "\n"
    assert main(["ci-roles", "--subscription", "nope", "--project-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'nope' is not a subscription ID" in err


def test_shared_images_name_the_importer_role_on_the_platform_registry(tmp_path, capsys):
    """sharedImages: `up` imports with the deploy identity, which needs the platform registry's importer role (given
    once, outside the stacks); ci-roles names it with the command, and --json under readerOn."""
    platform = ("/subscriptions/11111111-1111-1111-1111-111111111111/resourceGroups/platform-images/providers/"
                "Microsoft.ContainerRegistry/registries/dltrainplatform")
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path)
    for stack in ("trial", "vision"):
        shutil.copy(REPO_ROOT / f"Pulumi.{stack}.yaml", tmp_path)
    trial = tmp_path / "Pulumi.trial.yaml"
    trial.write_text(trial.read_text().rstrip("\n") + "\n  azure-dl-training:sharedImages: {registry: "
                     f"\"{platform}\", pytorch: \"dltrain/pytorch@sha256:{'a' * 64}\"}}\n")
    sub = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    assert main(["ci-roles", "--subscription", sub, "--json", "--project-dir", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["readerOn"] == {platform: ["trial"]}
    assert main(["ci-roles", "--subscription", sub, "--project-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "sharedImages (trial): the deploy identity needs Reader on the platform registry" in out
    assert f"az role assignment create --assignee <its object id> --role \"Reader\" --scope {platform}" in out


# Azure's example "Constrain roles and specific groups" (Backup Contributor, Backup Reader; Marketing, Sales):
# https://learn.microsoft.com/azure/role-based-access-control/delegate-role-assignments-examples#example-constrain-roles-and-specific-groups
DOC_EXAMPLE_PRINCIPALS = """
(
 (
  !(ActionMatches{'Microsoft.Authorization/roleAssignments/write'})
 )
 OR
 (
  @Request[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals {5e467623-bb1f-42f4-a55d-6e525e11384b, a795c7a0-d4a2-40c1-ae25-d81f01202912}
  AND
  @Request[Microsoft.Authorization/roleAssignments:PrincipalId] ForAnyOfAnyValues:GuidEquals {28c35fea-2099-4cf5-8ad9-473547bc9423, 86951b8b-723a-407b-a74a-1bca3f0c95d0}
 )
)
AND
(
 (
  !(ActionMatches{'Microsoft.Authorization/roleAssignments/delete'})
 )
 OR
 (
  @Resource[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals {5e467623-bb1f-42f4-a55d-6e525e11384b, a795c7a0-d4a2-40c1-ae25-d81f01202912}
  AND
  @Resource[Microsoft.Authorization/roleAssignments:PrincipalId] ForAnyOfAnyValues:GuidEquals {28c35fea-2099-4cf5-8ad9-473547bc9423, 86951b8b-723a-407b-a74a-1bca3f0c95d0}
 )
)
"""
BATCH_SERVICE = "f520d84c-3fd3-4cc8-88d4-2ed25b00d27a"  # the "Microsoft Azure Batch" SP's object ID in some tenant
SECRETS_OFFICER = "b86a8fe4-44ce-4948-aee5-eccb2c155cd7"
OWNER = "8e3af657-a8ff-443c-a75c-2fe8c4bcb635"
WRITE, DELETE = "Microsoft.Authorization/roleAssignments/write", "Microsoft.Authorization/roleAssignments/delete"


def admits(text, action, role, principal):
    """The condition's verdict on one role assignment action, read as the condition format defines it
    (https://learn.microsoft.com/azure/role-based-access-control/conditions-format: ActionMatches, AND/OR/!,
    ForAnyOfAnyValues:GuidEquals over one value). Only the constructs the condition uses are translated; anything
    else stays and makes eval fail."""
    values = {"RoleDefinitionId": role, "PrincipalId": principal}
    source = "Request" if action == WRITE else "Resource"

    def attribute(match):
        if match[1] != source:  # the other action's attribute source: not present on this request
            return "False"
        wanted = {guid.strip().lower() for guid in match[3].split(",")}
        return repr(values[match[2]].lower() in wanted)

    py = re.sub(r"ActionMatches\{'([^']+)'\}", lambda m: repr(m[1] == action), text)
    py = re.sub(r"@(Request|Resource)\[Microsoft\.Authorization/roleAssignments:(\w+)\] "
                r"ForAnyOfAnyValues:GuidEquals \{([^}]*)\}", attribute, py)
    py = py.replace("!(", " not (").replace(" AND ", " and ").replace(" OR ", " or ")
    return eval(py, {"__builtins__": {}})  # noqa: S307 (only True/False/not/and/or/parentheses are left)


def test_a_principal_bound_role_has_azures_constrain_roles_and_principals_form():
    groups = ci_roles.bound(["86951b8b-723a-407b-a74a-1bca3f0c95d0", "28C35FEA-2099-4CF5-8AD9-473547BC9423"])
    [principals] = groups.values()  # bound() sorts and lowercases the principals, as the example lists them
    made = ci_roles.condition([], {"a795c7a0-d4a2-40c1-ae25-d81f01202912": principals,
                                   "5e467623-bb1f-42f4-a55d-6e525e11384b": principals})
    assert _squeezed(made) == _squeezed(DOC_EXAMPLE_PRINCIPALS)


def test_key_vault_secrets_officer_only_where_a_stack_needs_it_and_only_to_the_batch_service():
    sub = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    roles = ci_roles.assignable(sub, [("trial", "trial")])
    assert SECRETS_OFFICER not in roles
    plain = ci_roles.condition(roles, ci_roles.bound([]))
    assert SECRETS_OFFICER not in plain
    for action in (WRITE, DELETE):
        assert not admits(plain, action, SECRETS_OFFICER, BATCH_SERVICE)
        assert admits(plain, action, role_ids.ACR_PULL, "11111111-1111-1111-1111-111111111111")
        assert not admits(plain, action, OWNER, BATCH_SERVICE)
    text = ci_roles.condition(roles, ci_roles.bound([BATCH_SERVICE.upper(), "", BATCH_SERVICE]))
    for action in (WRITE, DELETE):
        assert admits(text, action, SECRETS_OFFICER, BATCH_SERVICE)
        assert not admits(text, action, SECRETS_OFFICER, "11111111-1111-1111-1111-111111111111")  # e.g. itself
        assert admits(text, action, role_ids.ACR_PULL, "11111111-1111-1111-1111-111111111111")
        assert not admits(text, action, OWNER, BATCH_SERVICE)
    assert admits(text, "Microsoft.Authorization/roleAssignments/read", OWNER, BATCH_SERVICE)  # not constrained


def test_a_user_subscription_stacks_every_assignment_is_admitted_and_the_vault_grant_only_to_the_batch_service():
    cfg = config.from_stack_file("dev")
    cfg = dataclasses.replace(cfg, nodes=dataclasses.replace(cfg.nodes, pool_allocation="user-subscription",
                                                             batch_service_object_id=BATCH_SERVICE))
    evaluation = offline.evaluate(cfg)
    text = ci_roles.condition(ci_roles.assignable(offline.SUBSCRIPTION, [(cfg.team, cfg.stack)]),
                              ci_roles.bound([cfg.nodes.batch_service_object_id]))
    grants = [(str(r.inputs["roleDefinitionId"]).rsplit("/", 1)[-1], str(r.inputs["principalId"]))
              for r in evaluation.of_type("azure-native:authorization:RoleAssignment")]
    assert (SECRETS_OFFICER, BATCH_SERVICE) in grants
    for role, principal in grants:
        assert admits(text, WRITE, role, principal), (role, principal)
        assert admits(text, DELETE, role, principal), (role, principal)


def test_the_verb_admits_the_vault_role_for_user_subscription_stacks_only(tmp_path, capsys):
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path)
    for stack in ("trial", "vision"):
        shutil.copy(REPO_ROOT / f"Pulumi.{stack}.yaml", tmp_path)
    sub = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    assert main(["ci-roles", "--subscription", sub, "--json", "--project-dir", str(tmp_path)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["boundTo"] == {} and SECRETS_OFFICER not in got["condition"]
    trial = tmp_path / "Pulumi.trial.yaml"
    trial.write_text(trial.read_text().rstrip("\n") + "\n  azure-dl-training:batchPoolAllocation: user-subscription"
                     f"\n  azure-dl-training:batchServiceObjectId: {BATCH_SERVICE}\n")
    assert main(["ci-roles", "--subscription", sub, "--json", "--project-dir", str(tmp_path)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["boundTo"] == {SECRETS_OFFICER: {"name": "Key Vault Secrets Officer", "principals": [BATCH_SERVICE]}}
    assert admits(got["condition"], WRITE, SECRETS_OFFICER, BATCH_SERVICE)
    assert not admits(got["condition"], WRITE, SECRETS_OFFICER, "11111111-1111-1111-1111-111111111111")
    assert main(["ci-roles", "--subscription", sub, "--project-dir", str(tmp_path)]) == 0
    assert (f"  {SECRETS_OFFICER}  Key Vault Secrets Officer, only to the Batch service of the user-subscription "
            f"stacks: {BATCH_SERVICE} (trial)") in capsys.readouterr().out
