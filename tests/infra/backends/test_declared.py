"""A backend's `declare` hands back what it declared as one value (infra/backends/declared.py: Declared) and writes
nothing onto the stack it is handed: the stack reads its outputs, its service, its budget stop from that value."""
import dataclasses

import pulumi
import pytest

from infra import stack
from infra.backends import backend
from infra.backends.declared import Declared, Foundation
from infra.backends.shared import StackOutputs
from infra.core.config import stack as config
from infra.preview import offline
from tests.infra.conftest import NOW

# What the backends wrote onto the environment before they returned a value.
WRITTEN_BEFORE = ("nfs", "cluster", "azureml", "job", "deployer_grants")


def declared_of(cfg: config.StackConfig, monkeypatch) -> tuple[offline.Evaluation, Declared, dict[str, list[str]]]:
    """The program under mocks, with what the backend declared and the URNs of its parts, resolved."""
    seen: dict = {}
    urns: dict[str, list[str]] = {}
    real_deploy = stack.deploy

    def deploy(config_, now):
        env = real_deploy(config_, now)
        seen.update(env=env, declared=env.declared)
        assert not [name for name in WRITTEN_BEFORE if hasattr(env, name)], "a backend wrote onto the stack"
        parts = {"env": [env], "components": list(env.declared.components.values()),
                 "job": [env.declared.job] if env.declared.job else [],
                 "deployer_grants": list(env.declared.deployer_grants)}
        for key, resources in parts.items():
            urns[key] = []
            pulumi.Output.all(*[r.urn for r in resources]).apply(urns[key].extend)
        return env

    monkeypatch.setattr(stack, "deploy", deploy)
    return offline.evaluate(cfg, now=NOW), seen["declared"], urns


@pytest.mark.parametrize("name, components", [("dev", {"nfs", "cluster"}), ("nlp", {"azureml"})])
def test_declare_returns_its_components_job_and_grants_as_children_of_the_stack(name, components, monkeypatch):
    cfg = config.from_stack_file(name)
    ev, declared, urns = declared_of(cfg, monkeypatch)
    assert set(declared.components) == components
    [env_urn] = urns["env"]
    by_urn = {r.urn: r for r in ev.resources}
    assert {by_urn[urn].parent_urn for urn in urns["components"] + urns["job"]} == {env_urn}, urns
    jobs = [r.urn for r in ev.of_type("pulumi-python:dynamic:Resource") if r.name.endswith("-job")]
    assert urns["job"] == jobs and bool(jobs) == backend(cfg.backend).launches_on_up(cfg)
    deployer = sorted(r.urn for r in ev.of_type("azure-native:authorization:RoleAssignment")
                      if "-deployer-" in r.name)
    assert sorted(urns["deployer_grants"]) == deployer
    assert set(declared.outputs) <= {f.name for f in dataclasses.fields(StackOutputs)}  # what the stack exports


def test_without_launch_on_up_there_is_no_job_and_no_deployer_grant(monkeypatch):
    cfg = config.from_stack_file("dev")
    cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, launch_on_up=False))
    _, declared, urns = declared_of(cfg, monkeypatch)
    assert declared.job is None and declared.deployer_grants == () and urns["job"] == []
    assert declared.outputs["training_job_id"] == ""


def test_the_foundation_a_backend_reads_is_read_only():
    assert dataclasses.fields(Foundation) and Foundation.__dataclass_params__.frozen
    assert Declared.__dataclass_params__.frozen
