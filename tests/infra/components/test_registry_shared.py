"""sharedImages: the key's rules (one line per bad value, nothing else), and the program under Pulumi's mocks with
it set: the images it names are imported by digest (no Docker build, no push token for them) and the job and the
pool run this registry's copy by digest; an image it does not name is still built here."""
import dataclasses

import pytest

from infra.cli import plan
from infra.core.config import stack as config, shared_images
from infra.core.config.schema import ConfigError
from infra.preview import offline
from tests.infra.conftest import NOW

PLATFORM = ("/subscriptions/11111111-1111-1111-1111-111111111111/resourceGroups/platform-images/providers/"
            "Microsoft.ContainerRegistry/registries/dltrainplatform")
TORCH = "dltrain/pytorch@sha256:" + "a" * 64
TF = "dltrain/tensorflow@sha256:" + "b" * 64
BASE = {"allowedIpRanges": ["20.50.1.7/32"]}  # frameworks default: pytorch, tensorflow


def parsed(value, **keys):
    return config.parse("dev", {**BASE, **keys, "sharedImages": value})


def test_a_platform_registry_and_digests_parse():
    cfg = parsed({"registry": PLATFORM, "pytorch": TORCH, "tensorflow": TF})
    shared = cfg.registry.shared_images
    assert shared.registry_id == PLATFORM and shared.registry_name == "dltrainplatform"
    assert [(i.framework, i.repository, i.digest) for i in shared.images] == [
        ("pytorch", "dltrain/pytorch", "sha256:" + "a" * 64), ("tensorflow", "dltrain/tensorflow", "sha256:" + "b" * 64)]
    assert shared.image("pytorch").source == TORCH
    # Pulumi hands an object over as JSON text: the same value.
    import json
    assert config.parse("dev", {**BASE, "sharedImages": json.dumps({"registry": PLATFORM, "pytorch": TORCH,
                                                                    "tensorflow": TF})}) == cfg


def test_unset_or_empty_builds_every_image_here():
    assert config.parse("dev", BASE).registry.shared_images is None
    assert parsed({}).registry.shared_images is None


BAD = [
    ({"registry": "dltrainplatform.azurecr.io", "pytorch": TORCH},
     "registry: 'dltrainplatform.azurecr.io' is not a registry's resource ID; write the platform registry's ID "
     "(`az acr show --name dltrainplatform --query id -o tsv`)"),
    ({"registry": PLATFORM.replace("Microsoft.ContainerRegistry/registries", "Microsoft.Storage/storageAccounts"),
      "pytorch": TORCH}, "is not a container registry's resource ID"),
    ({"registry": PLATFORM.replace("dltrainplatform", "acr"), "pytorch": TORCH},
     "registry: 'acr' is not a registry name (5-50 letters and digits)"),
    ({"registry": PLATFORM.replace("dltrainplatform", "dltrain-platform"), "pytorch": TORCH},
     "is not a registry name"),
    ({"registry": PLATFORM.replace("platform-images", "images."), "pytorch": TORCH},
     "resource group 'images.' is not a resource group name"),
    ({"registry": PLATFORM, "pytorch": "dltrain/pytorch:2026.11"},
     "pytorch: 'dltrain/pytorch:2026.11' is not pinned by digest ('2026.11' is a tag, which can move); write "
     "<repository>@sha256:<64 hex>"),
    ({"registry": PLATFORM, "pytorch": "dltrain/pytorch:v1@sha256:" + "a" * 64}, "has both a tag and a digest"),
    ({"registry": PLATFORM, "pytorch": "dltrainplatform.azurecr.io/dltrain/pytorch@sha256:" + "a" * 64},
     "names a registry host; write the repository in the platform registry only, as dltrain/pytorch@sha256:<digest>"),
    ({"registry": PLATFORM, "pytorch": "dltrain/pytorch@sha256:" + "A" * 64}, "is not a sha256 digest"),
    ({"registry": PLATFORM, "pytorch": "dltrain/pytorch@sha256:abc"}, "is not a sha256 digest"),
    ({"registry": PLATFORM, "pytorch": "dltrain/PyTorch@sha256:" + "a" * 64}, "'dltrain/PyTorch' is not a repository"),
    ({"registry": PLATFORM, "pytroch": TORCH}, "unknown entry 'pytroch'; did you mean 'pytorch'?"),
    ({"pytorch": TORCH}, "names images but no registry; add registry:"),
    ({"registry": PLATFORM}, "names a registry but no image"),
    ({"registry": PLATFORM, "pytorch": 7}, "expected a map of names to text values"),
]


@pytest.mark.parametrize("value, message", BAD, ids=range(len(BAD)))
def test_bad_input_is_one_line_naming_the_key(value, message):
    with pytest.raises(ConfigError) as refused:
        parsed(value)
    text = str(refused.value)
    assert text.startswith("config key 'sharedImages': ") and message in text and "\n" not in text


def test_an_image_the_stack_does_not_run_is_refused():
    with pytest.raises(ConfigError, match=r"tensorflow: frameworks \['pytorch'\] does not list it"):
        parsed({"registry": PLATFORM, "pytorch": TORCH, "tensorflow": TF}, frameworks=["pytorch"],
               trainingFramework="pytorch")


def with_shared(stack: str, **images) -> config.StackConfig:
    cfg = config.from_stack_file(stack)
    shared = shared_images.parse((("registry", PLATFORM), *images.items()), cfg.registry.frameworks)
    return dataclasses.replace(cfg, registry=dataclasses.replace(cfg.registry, shared_images=shared))


@pytest.fixture(scope="module")
def imported():
    """trial (Batch, pytorch only) importing its one image."""
    return offline.evaluate(with_shared("trial", pytorch=TORCH), now=NOW)


def test_an_imported_image_is_not_built_and_needs_no_push_token(imported):
    assert imported.of_type("docker-build:index:Image") == []
    for kind in ("ScopeMap", "Token"):
        assert imported.of_type(f"azure-native:containerregistry:{kind}") == []
    assert not [r for r in imported.of_type("pulumi-python:dynamic:Resource") if "token_id" in r.inputs]


def test_the_import_is_by_digest_into_this_registry_from_the_platform_one(imported):
    (load,) = [r for r in imported.of_type("pulumi-python:dynamic:Resource") if "source_image" in r.inputs]
    acr = imported.one("azure-native:containerregistry:Registry")
    assert load.inputs["registry_id"] == acr.state["id"] and load.inputs["source_registry_id"] == PLATFORM
    assert load.inputs["source_image"] == TORCH and load.inputs["framework"] == "pytorch"
    # Trusted services may pass the registry's firewall: the import comes through it (Premium stacks).
    assert acr.inputs["networkRuleBypassOptions"] == "AzureServices"


def test_the_job_and_the_pool_run_this_registrys_copy_by_digest(imported):
    login = imported.outputs["registryLoginServer"]
    ref = f"{login}/pytorch@sha256:{'a' * 64}"
    assert imported.outputs["imageRefs"] == {"pytorch": ref}
    job = imported.one("pulumi-python:dynamic:Resource", "-job")
    assert job.inputs["image"] == ref
    pool = imported.one("azure-native:batch:Pool")
    containers = pool.inputs["deploymentConfiguration"]["virtualMachineConfiguration"]["containerConfiguration"]
    assert containers["containerImageNames"] == [ref]
    load = imported.one("pulumi-python:dynamic:Resource", "pytorch-import")
    assert load.urn in pool.dependencies  # the nodes prefetch it once imported


def test_plan_says_imported_and_what_it_needs(imported):
    text, _ = plan.render(imported)
    section = text.split("Training images")[1].split("Training job")[0]
    assert "pytorch: imported by digest from the platform registry dltrainplatform" in section
    assert "no Docker build" in section and "built here by" not in section
    assert "needs Reader on the platform registry dltrainplatform" in text


def test_an_image_sharedimages_does_not_name_is_still_built_here():
    ev = offline.evaluate(with_shared("dev", pytorch=TORCH), now=NOW)  # dev: pytorch and tensorflow
    (image,) = ev.of_type("docker-build:index:Image")
    assert image.inputs["dockerfile"]["location"] == "images/tensorflow.Dockerfile"
    scope = ev.one("azure-native:containerregistry:ScopeMap")
    assert sorted(scope.inputs["actions"]) == ["repositories/tensorflow/content/read",
                                               "repositories/tensorflow/content/write"]
    login = ev.outputs["registryLoginServer"]
    assert ev.outputs["imageRefs"]["pytorch"] == f"{login}/pytorch@sha256:{'a' * 64}"
    assert ev.outputs["imageRefs"]["tensorflow"].startswith(f"{login}/tensorflow:")
    text, _ = plan.render(ev)
    assert "tensorflow: built here by `up`" in text and "pytorch: imported by digest" in text


def test_azure_ml_runs_the_imported_image_once_imported():
    ev = offline.evaluate(with_shared("nlp", pytorch=TORCH), now=NOW)  # nlp: Azure ML, pytorch
    assert ev.of_type("docker-build:index:Image") == []
    version = ev.one("azure-native:machinelearningservices:EnvironmentVersion", "pytorch")
    assert version.inputs["properties"]["image"] == f"{ev.outputs['registryLoginServer']}/pytorch@sha256:{'a' * 64}"
    assert ev.one("pulumi-python:dynamic:Resource", "pytorch-import").urn in version.dependencies
