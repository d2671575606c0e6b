"""Team access (teamAdmins, teamMembers) and the stack's extra tags, evaluated under the offline mocks: who gets
which role on which scope, as what principal type and under what name; the config's refusals; plan's lines."""
import dataclasses

import pytest

from infra import REPO_ROOT
from infra.backends import backend
from infra.cli import plan
from infra.components import access, roles
from infra.core.config import stack as config, sections as config_sections
from infra.core.security import resources as security
from infra.core.config.schema import ConfigError
from infra.preview import offline
from tests.infra.conftest import AML_STACKS, BATCH_STACKS, NOW, evaluation_for
from infra.core.security.role_ids import role_key

ADMINS = "0b1c2d3e-4f50-4617-8283-94a5b6c7d8e9"
MEMBERS = "1b1c2d3e-4f50-4617-8283-94a5b6c7d8e9"
EXTRA_TAGS = (("costCenter", "00123"), ("owner", "ml-platform"))
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
_cache: dict[str, offline.Evaluation] = {}


def with_team(stack: str) -> offline.Evaluation:
    """`stack` with one admin group, one member group and two extra tags."""
    if stack not in _cache:
        base = config.from_stack_file(stack)
        cfg = dataclasses.replace(base, access=config_sections.AccessConfig(admins=(ADMINS,), members=(MEMBERS,)),
                                  tagging=config_sections.TaggingConfig(extra=EXTRA_TAGS))
        _cache[stack] = offline.evaluate(cfg, now=NOW)
    return _cache[stack]


def scope_kind(ev: offline.Evaluation, scope: str) -> str:
    """What a grant's scope is, by the resource whose ID it is."""
    kinds = {ev.one("azure-native:resources:ResourceGroup").state["id"]: "resource group",
             ev.one("azure-native:storage:StorageAccount", "-data-").state["id"]: "storage account"}
    for container in ev.of_type("azure-native:storage:BlobContainer"):
        kinds[container.state["id"]] = f"container {container.inputs['containerName']}"
    for service in ev.of_type("azure-native:batch:BatchAccount") + ev.of_type(
            "azure-native:machinelearningservices:Workspace"):
        kinds[service.state["id"]] = "batch account" if "batch" in service.type else "workspace"
    return kinds[scope]


def team_grants(ev: offline.Evaluation) -> dict[str, set[tuple[str, str, bool]]]:
    """group -> {(role name, scope kind, has a condition)}, checking what every team grant must be on the way."""
    found: dict[str, set] = {}
    for assignment in ev.of_type(ROLE_ASSIGNMENT):
        p = assignment.inputs
        if p["principalId"] not in (ADMINS, MEMBERS):
            continue
        role = role_key(p["roleDefinitionId"], p["scope"])
        # A group, named so that ARM skips the directory lookup a new group may not pass yet (PrincipalNotFound).
        assert p["principalType"] == "Group", assignment.urn
        assert p["roleAssignmentName"] == roles.assignment_name(p["scope"], p["principalId"], role), assignment.urn
        assert p["roleDefinitionId"].startswith(f"/subscriptions/{offline.SUBSCRIPTION}/providers/Microsoft."
                                                "Authorization/roleDefinitions/"), assignment.urn
        assert p["description"].startswith(access.TEAM), assignment.urn
        found.setdefault(p["principalId"], set()).add((roles.ROLE_NAMES[role], scope_kind(ev, p["scope"]),
                                                       bool(p.get("condition"))))
    return found


# What each group gets, written out here (not computed from the program's table).
COMMON_MEMBERS = {("Reader", "resource group", False), ("Blob Data Writer (custom)", "container data", False),
                  ("Storage Blob Data Reader", "container outputs", False)}
COMMON_ADMINS = {("Contributor", "resource group", False), ("Blob Data Writer (custom)", "container data", False),
                 ("Storage Blob Data Reader", "container outputs", False)}
# `infra submit` reads the staging report in `status`; `infra restage` writes its request there, no other blob.
BATCH_VM = {("Azure Batch Job Submitter", "batch account", False),
            ("Blob Data Writer (custom)", "container status", True)}


@pytest.mark.parametrize("stack", BATCH_STACKS[:1])
def test_batch_stack_grants_each_group_its_roles_on_this_stack_only(stack):
    ev = with_team(stack)
    assert ev.config.nfs.kind == "vm"
    # dataTier node-local (the default): no NFS staging report to read nor restage to ask (the nodes stage)
    nfs_staging = ev.config.nfs.data_tier == "nfs"
    batch = BATCH_VM if nfs_staging else {("Azure Batch Job Submitter", "batch account", False)}
    assert team_grants(ev) == {MEMBERS: COMMON_MEMBERS | batch, ADMINS: COMMON_ADMINS | batch}
    conditions = {a.inputs["condition"] for a in ev.of_type(ROLE_ASSIGNMENT)
                  if a.inputs["principalId"] in (ADMINS, MEMBERS) and a.inputs.get("condition")}
    # training.data.staged.request_name
    assert conditions == ({roles.blob_writes_only("imagenet.restage")} if nfs_staging else set())


def test_with_data_tier_nfs_members_read_the_staging_report_and_ask_a_restage():
    cfg = config.from_stack_file(BATCH_STACKS[0])
    cfg = dataclasses.replace(cfg, nfs=dataclasses.replace(cfg.nfs, data_tier="nfs"))
    grants = backend("batch").team_grants(cfg, "members")
    assert [(g.scope, g.role) for g in grants] == [("service", roles.BATCH_JOB_SUBMITTER),
                                                   ("status", roles.BLOB_DATA_WRITER)]


@pytest.mark.parametrize("stack", AML_STACKS[:1])
def test_azureml_stack_grants_each_group_its_roles_on_this_stack_only(stack):
    ev = with_team(stack)
    workspace = ("AzureML Data Scientist", "workspace", False)
    assert team_grants(ev) == {
        # azure-ai-ml uploads a job's code and reads its outputs in the workspace's containers: members write
        # there under a condition that keeps them out of scripts, status and outputs.
        MEMBERS: COMMON_MEMBERS | {workspace, ("Blob Data Writer (custom)", "storage account", True)},
        ADMINS: COMMON_ADMINS | {workspace, ("Blob Data Writer (custom)", "storage account", False)}}
    member_condition = [a.inputs["condition"] for a in ev.of_type(ROLE_ASSIGNMENT)
                        if a.inputs["principalId"] == MEMBERS and a.inputs.get("condition")]
    assert member_condition == [roles.blob_writes_except(("scripts", "status", "outputs"))]


def test_with_nfs_kind_azure_files_no_staging_report_is_read():
    cfg = config.from_stack_file(BATCH_STACKS[0])
    cfg = dataclasses.replace(cfg, nfs=dataclasses.replace(cfg.nfs, kind="azure-files", disk_size_gb=1024))
    grants = backend("batch").team_grants(cfg, "members")
    assert [(g.scope, g.role) for g in grants] == [("service", roles.BATCH_JOB_SUBMITTER)]


@pytest.mark.parametrize("stack", BATCH_STACKS[:1] + AML_STACKS[:1])
def test_with_admins_up_grants_the_deployer_nothing_and_the_admins_hold_all_it_would_get(stack):
    """The deployer's grants follow whoever runs `up`, and a Contributor (an admin) cannot delete the previous
    runner's: with teamAdmins there are none, plan says why, and what `up` would have granted the deployer (the
    same stack without groups), admins have on the same scope (Contributor on a scope covers Reader there)."""
    ev = with_team(stack)
    assignments = [a.inputs for a in ev.of_type(ROLE_ASSIGNMENT)]
    assert not [a for a in assignments if str(a.get("description", "")).startswith(roles.DEPLOYER)]
    text, _ = plan.render(ev)
    assert "teamAdmins is set, so `up` grants the identity running it no roles of its own" in text
    assert "grants your identity" not in text
    assert "no roles of its own" not in plan.render(evaluation_for(stack))[0]
    deployer = {(a.inputs["scope"], role_key(a.inputs["roleDefinitionId"], a.inputs["scope"]))
                for a in evaluation_for(stack).of_type(ROLE_ASSIGNMENT)
                if str(a.inputs.get("description", "")).startswith(roles.DEPLOYER)}
    admins = {(a["scope"], role_key(a["roleDefinitionId"], a["scope"])) for a in assignments
              if a["principalId"] == ADMINS}  # a condition here limits writes only: reads stay whole
    assert deployer
    covers = {roles.BLOB_DATA_READER: {roles.BLOB_DATA_READER, roles.BLOB_DATA_WRITER}}
    for scope, role in deployer:
        assert any((scope, held) in admins for held in covers.get(role, {role})), (scope, role)


@pytest.mark.parametrize("stack", BATCH_STACKS[:1] + AML_STACKS[:1])
def test_every_check_passes_with_team_groups_and_extra_tags(stack):
    ev = with_team(stack)
    results = plan.verdicts(ev) + plan.service_verdicts(ev)
    assert [r for r in results if r[0] == "FAIL"] == []
    passed = {name for verdict, name, _ in results if verdict == "PASS"}
    assert {"role-assignment-within-resource-group", "role-assignment-not-privileged", "team-tag"} <= passed


@pytest.mark.parametrize("stack", BATCH_STACKS[:1] + AML_STACKS[:1])
def test_extra_tags_are_merged_onto_every_resource_that_takes_tags(stack):
    ev = with_team(stack)
    taggable = [r for r in ev.resources if r.custom and security.takes_tags(r.type)]
    assert len(taggable) >= 10
    for resource in taggable:
        tags = resource.inputs.get("tags") or {}
        assert tags.get("costCenter") == "00123" and tags.get("owner") == "ml-platform", resource.urn
        assert (tags.get("team"), tags.get("stack")) == (ev.config.team, ev.config.stack), resource.urn


@pytest.mark.parametrize("stack", BATCH_STACKS[:1] + AML_STACKS[:1])
def test_plan_lists_who_gets_what_one_line_per_group_role_and_scope_sorted(stack):
    ev = with_team(stack)
    text, ok = plan.render(ev)
    lines = [line for line in text.splitlines() if " group " in line and "(Group)" in line]
    assert ok and len(lines) == sum(len(v) for v in team_grants(ev).values())
    assert lines == sorted(lines) and lines[0].lstrip(" -").startswith("`pulumi up` grants teamAdmins group " + ADMINS)
    assert any(f"teamMembers group {MEMBERS} (Group) Reader on resourceGroups " in line for line in lines)
    assert "teamAdmins cannot create role assignments" in text


def test_a_stack_without_groups_grants_nothing_to_groups(ev):
    assert [a for a in ev.of_type(ROLE_ASSIGNMENT) if a.inputs.get("principalType") == "Group"] == []


BASE = {"allowedIpRanges": ["20.50.1.7"]}


@pytest.mark.parametrize("values,key,words", [
    ({"teamMembers": ["ml-team"]}, "teamMembers", "not a group object ID"),
    ({"teamAdmins": [ADMINS[:-1]]}, "teamAdmins", "az ad group show"),
    ({"teamAdmins": "not a list"}, "teamAdmins", "expected a list"),
    # A group in both lists is refused: admins get what members get, and one list keeps one grant per role.
    ({"teamAdmins": [ADMINS], "teamMembers": [ADMINS.upper()]}, "teamMembers", "listed in teamAdmins already"),
    ({"teamMembers": [MEMBERS, MEMBERS]}, "teamMembers", "listed in teamMembers already"),
    ({"tags": {"team": "other"}}, "tags", "set by the stack itself"),
    ({"tags": {"Network-Access": "public"}}, "tags", "set by the stack itself"),  # would open the AML workspace
    ({"tags": {"cost/center": "1"}}, "tags", "without"),
    ({"tags": {"c" * 129: "1"}}, "tags", "1 to 128 characters"),
    ({"tags": {"owner": "x" * 257}}, "tags", "at most 256"),
    ({"tags": {f"t{i}": "x" for i in range(46)}}, "tags", "at most 45"),
    # Azure ML's private DNS zones and links take 15 tags: the stack sets up to 5 of them itself.
    ({"backend": "azureml", "tags": {f"t{i}": "x" for i in range(11)}}, "tags", "at most 10"),
    ({"tags": {"costCenter": 123}}, "tags", "quote numbers"),
    ({"tags": '{"costCenter": 123}'}, "tags", "quote numbers"),  # as Pulumi hands it over: JSON text
    ({"tags": "[1]"}, "tags", "map of names to text"),
])
def test_bad_team_access_or_tags_are_refused_in_one_line(values, key, words):
    with pytest.raises(ConfigError) as raised:
        config.parse("x", {**BASE, **values})
    assert raised.value.key == key and words in str(raised.value) and "\n" not in str(raised.value)


def test_team_access_and_tags_as_pulumi_passes_them():
    cfg = config.parse("x", {**BASE, "teamAdmins": f'["{ADMINS.upper()}"]', "teamMembers": f'["{MEMBERS}"]',
                             "tags": '{"costCenter": "00123"}'})
    assert cfg.access == config_sections.AccessConfig(admins=(ADMINS,), members=(MEMBERS,))
    assert cfg.tags["costCenter"] == "00123" and cfg.tags["team"] == "dev"
    assert config.parse("x", {**BASE, "tags": {f"t{i}": "x" for i in range(45)}}).tags["t44"] == "x"
    assert config.parse("x", {**BASE, "backend": "azureml", "tags": {f"t{i}": "x" for i in range(10)}}).tags["t9"]


def test_the_restage_condition_lets_writes_reach_one_blob_only():
    condition = roles.blob_writes_only("imagenet.restage")
    for action in ("write", "add/action", "delete", "move/action"):
        assert f"!(ActionMatches{{'Microsoft.Storage/storageAccounts/blobServices/containers/blobs/{action}'}})" \
               in condition
    assert condition.endswith("@Resource[Microsoft.Storage/storageAccounts/blobServices/containers/blobs:path] "
                              "StringEquals 'imagenet.restage'\n )\n)")


def test_a_stack_file_gives_groups_and_tags_through_the_engines_merge(tmp_path):
    """As `pulumi up` would receive them: YAML list and map, turned into JSON text by the CLI's merge."""
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.t1.yaml").write_text(
        "config:\n  azure-dl-training:allowedIpRanges: [20.50.1.7]\n"
        f"  azure-dl-training:teamMembers: [{MEMBERS}]\n"
        "  azure-dl-training:tags:\n    costCenter: '00123'\n    owner: ml-platform\n")
    cfg = config.from_stack_file("t1", tmp_path)
    assert cfg.access.members == (MEMBERS,) and cfg.tags["costCenter"] == "00123" and cfg.tags["stack"] == "t1"
    (tmp_path / "Pulumi.t2.yaml").write_text("config:\n  azure-dl-training:allowedIpRanges: [20.50.1.7]\n"
                                             "  azure-dl-training:tags:\n    costCenter: 00123\n")
    with pytest.raises(ConfigError, match="quote numbers"):
        config.from_stack_file("t2", tmp_path)
