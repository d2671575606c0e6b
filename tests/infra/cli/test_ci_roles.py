"""The deploy identity's grantable roles (infra/core/ci_roles.py, `python -m infra ci-roles`): the condition has
Azure's "Constrain roles" form, and the roles it admits cover every role assignment the program declares, on
both backends (the program evaluated offline, as plan evaluates it)."""
import json
import re
import shutil

import pytest

from infra import REPO_ROOT
from infra.cli.main import main
from infra.core import ci_roles, config
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
