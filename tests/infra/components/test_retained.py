"""A retainOutputs stack plays up, destroy, up under the engine's rules for existing resources, with the resources
the program declares (Pulumi's mocks, infra/preview/offline.py):

- `pulumi destroy` deletes what the stack holds except what has retainOnDelete (it only forgets those);
- a resource without the `import` option that the stack does not hold is created, and azure-native refuses to
  create one that exists ("cannot create already existing resource", pulumi/pulumi-azure-native);
- with `import`: not in the stack, it is imported, which fails when it does not exist or when the program's inputs
  differ from the resource's (the engine's ImportStep); held with the same ID, it is "treated like any other
  resource" (pulumi/pulumi developer-docs/architecture/import.md).
Resources are keyed by their ARM IDs where their names are fixed (the retained ones), else by URN."""
import dataclasses

import pytest

from infra.core import leftovers, naming
from infra.core.config import stack as config
from infra.core.config.schema import ConfigError
from infra.preview import offline
from tests.infra.conftest import NOW, evaluation_for

SUB = "0a1b2c3d-0000-4000-8000-0000000000ee"


class EngineError(Exception):
    pass


def _arm_id(resource) -> str:
    """The ARM ID of a resource whose name the program fixes (the ones retainOutputs keeps), else its URN."""
    i = resource.inputs
    group = f"/subscriptions/{SUB}/resourceGroups/{i.get('resourceGroupName')}"
    account = f"{group}/providers/Microsoft.Storage/storageAccounts/{i.get('accountName')}"
    return {"azure-native:resources:ResourceGroup": group, "azure-native:storage:StorageAccount": account,
            "azure-native:storage:BlobServiceProperties": f"{account}/blobServices/default",
            "azure-native:storage:BlobContainer": f"{account}/blobServices/default/containers/{i.get('containerName')}",
            }.get(resource.type, resource.urn)


def up(state: dict, declared, azure: dict) -> dict:
    held = {}
    for r in (r for r in declared if r.custom):
        rid = _arm_id(r)
        if r.urn in state:
            assert not r.import_id or r.import_id == state[r.urn], r.urn  # same ID: an ordinary update
            azure[state[r.urn]] = r.inputs
            held[r.urn] = state[r.urn]
        elif r.import_id:
            if r.import_id not in azure:
                raise EngineError(f"{r.urn}: resource '{r.import_id}' does not exist")
            if azure[r.import_id] != r.inputs:
                raise EngineError(f"{r.urn}: inputs to import do not match the existing resource")
            held[r.urn] = r.import_id
        else:
            if rid in azure:
                raise EngineError(f"cannot create already existing resource '{rid}'")
            azure[rid] = r.inputs
            held[r.urn] = rid
    return held


def destroy(state: dict, declared, azure: dict) -> dict:
    retained = {r.urn for r in declared if r.retain_on_delete}
    for urn, rid in state.items():
        if urn not in retained:
            del azure[rid]
    return {}


_programs: dict[bool, list] = {}


def vision_in_subscription(adopt: bool) -> offline.Evaluation:
    """The vision stack (retainOutputs) in subscription SUB, as deployed or with adoptRetained; evaluated once per
    process (test_naming's plan names use the first too)."""
    if adopt not in _programs:
        cfg = dataclasses.replace(config.from_stack_file("vision"), subscription_id=SUB, adopt_retained=adopt)
        _programs[adopt] = offline.evaluate(cfg, now=NOW)
    return _programs[adopt]


@pytest.fixture(scope="module")
def programs():
    return vision_in_subscription(False).resources, vision_in_subscription(True).resources


def test_up_destroy_up_fails_on_the_retained_group_and_adopts_it_with_adopt_retained(programs):
    plain, adopting = programs
    azure: dict = {}
    state = up({}, plain, azure)
    kept = {state[r.urn] for r in plain if r.retain_on_delete and r.custom}
    state = destroy(state, plain, azure)
    assert set(azure) == kept  # the group, the data account, its blob service settings and its four containers
    cfg = config.from_stack_file("vision")
    group = naming.resource_group(cfg.team, cfg.stack)
    assert f"/subscriptions/{SUB}/resourceGroups/{group}" in kept and len(kept) == 7
    with pytest.raises(EngineError, match=f"cannot create already existing resource '/subscriptions/{SUB}/"):
        up(state, plain, azure)
    # adoptRetained: every retained resource is imported, with the inputs it was created with (no diff)...
    state = up({}, adopting, azure)
    assert {r.import_id for r in adopting if r.import_id} == kept
    # ...then the stack holds them: `up` again is an ordinary update, and destroy, up adopts them once more.
    state = up(state, adopting, azure)
    state = destroy(state, adopting, azure)
    assert set(azure) == kept
    assert up(state, adopting, azure)


def test_adopting_what_does_not_exist_fails_so_the_key_waits_for_a_destroy(programs):
    _, adopting = programs
    with pytest.raises(EngineError, match="does not exist"):
        up({}, adopting, {})


def test_only_adopt_retained_declares_imports():
    assert not [r for r in evaluation_for("vision").resources if r.import_id]


def test_adopt_retained_is_refused_in_one_line_where_it_cannot_work(tmp_path):
    from infra import REPO_ROOT

    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    base = "config:\n  azure-dl-training:allowedIpRanges: [20.50.1.7/32]\n  azure-dl-training:adoptRetained: true\n"
    for extra, words in (("", "this stack retains nothing"),
                         ("  azure-dl-training:retainOutputs: true\n", "needs azure-native:subscriptionId")):
        (tmp_path / "Pulumi.a.yaml").write_text(base + extra)
        with pytest.raises(ConfigError) as raised:
            config.from_stack_file("a", tmp_path)
        assert words in str(raised.value) and "\n" not in str(raised.value)


def test_leftovers_names_the_retained_account_and_group_and_the_way_back():
    group = {"name": "rg-dltrain-vision-vision"}
    found = leftovers.group_leftovers(group, [{"name": "stvision1", "type": "Microsoft.Storage/storageAccounts",
                                               "id": "/x"}], SUB)
    assert [item.what for item in found] == ["storage account stvision1 (retained)",
                                             "resource group rg-dltrain-vision-vision (1 resources in it)"]
    for item in found:
        assert "adoptRetained: true" in item.line() and "az " in item.command
