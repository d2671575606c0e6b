"""The program gets its config as the Pulumi CLI gives it, and evaluates for every stack and every backend/framework.

Two halves. First, `engine_config.merge` against the Pulumi engine's own unit tests (pulumi/pulumi commit 1b59498,
pkg/workspace/config_project_test.go): the same project and stack files, the same expected strings and error
messages. Then __main__.py run as the language host runs it (offline.evaluate_program) with that config: every
stack file in the repo, and a stack per backend and framework with nothing but the keys a stack must set.
"""
import textwrap

import pytest
import yaml

import pulumi
from infra import REPO_ROOT
from infra.preview import offline
from infra.core import backend_facts
from infra.core.config import stack as config, schema as config_schema, engine as engine_config
from infra.core.config.engine import EngineConfig, EngineConfigError

# A public address, as README tells the deployer to put in allowedIpRanges (the stack files hold a placeholder).
DEPLOYER_IP = "20.50.1.7/32"


def _merge(project_yaml: str, stack_yaml: str, stack: str = "dev") -> dict[str, str]:
    project = yaml.safe_load(textwrap.dedent(project_yaml))
    stack_config = (yaml.safe_load(textwrap.dedent(stack_yaml)) or {}).get("config") or {}
    return engine_config.merge(project, stack, stack_config).values


# --- Pulumi's own cases (test name in config_project_test.go -> the same inputs and expectations) ---

def test_stack_config_is_inherited_from_project_config():  # TestStackConfigIsInheritedFromProjectConfig
    values = _merge("""
        name: test
        runtime: dotnet
        config:
          instanceSize: t3.micro
          instanceCount: 20
          protect: true""", """
        config:
          test:instanceSize: t4.large""")
    assert values == {"test:instanceSize": "t4.large", "test:instanceCount": "20", "test:protect": "true"}


def test_namespaced_config_values_are_inherited_correctly():  # TestNamespacedConfigValuesAreInheritedCorrectly
    values = _merge("""
        name: test
        runtime: dotnet
        config:
          aws:region: us-west-1
          pulumi:disable-default-providers: ["*"]
          instanceSize: t3.micro""", """
        config:
          test:instanceSize: t4.large""")
    assert values == {"test:instanceSize": "t4.large", "aws:region": "us-west-1",
                      "pulumi:disable-default-providers": '["*"]'}


def test_untyped_project_object_values_pass_down_as_json():  # TestUntypedProjectConfigObjectValuesPassedDownToStack
    values = _merge("""
        name: test
        runtime: dotnet
        config:
          instanceSize:
            value:
              hello: world
          aws:config:
            value:
              region: us-west-1""", """
        config:
          aws:whatever: 42""")
    assert values == {"test:instanceSize": '{"hello":"world"}', "aws:config": '{"region":"us-west-1"}',
                      "aws:whatever": "42"}


def test_a_stack_value_of_the_wrong_type_is_refused():  # TestStackConfigErrorsWhenStackValueIsNotCorrectlyTyped
    with pytest.raises(EngineConfigError, match=r"^Stack 'dev' with configuration key 'values' must be of type "
                                                r"'array<string>'$"):
        _merge("""
            name: test
            runtime: dotnet
            config:
              values:
                type: array
                items:
                  type: string
                default: [value]""", """
            config:
              test:values: someValue""")


def test_integer_type_is_validated():  # TestStackConfigIntegerTypeIsCorrectlyValidated
    project = """
        name: test
        runtime: dotnet
        config:
          importantNumber:
            type: integer"""
    assert _merge(project, "config:\n  test:importantNumber: 20") == {"test:importantNumber": "20"}
    with pytest.raises(EngineConfigError, match="^Stack 'dev' with configuration key 'importantNumber' must be of "
                                                "type 'integer'$"):
        _merge(project, "config:\n  test:importantNumber: hello")


@pytest.mark.parametrize("declared, message", [
    # TestStackConfigErrorsWhenMissing{,Two,Multiple}StackValueForConfigTypeWithNoDefault
    ({"values": {"type": "array", "items": {"type": "string"}}}, "missing configuration value 'values'"),
    ({"another": {"type": "string"}, "values": {"type": "array", "items": {"type": "string"}}},
     "missing configuration values 'another' and 'values'"),
    ({"hello": {"type": "integer"}, "values": {"type": "array", "items": {"type": "string"}},
      "world": {"type": "string"}}, "missing configuration values 'hello', 'values' and 'world'"),
])
def test_a_declared_key_without_default_must_be_set_by_the_stack(declared, message):
    with pytest.raises(EngineConfigError) as err:
        engine_config.merge({"name": "test", "runtime": "dotnet", "config": declared}, "dev", {})
    assert str(err.value) == f"Stack 'dev' is {message}"


# --- This project's stacks, as `pulumi up` receives them ---

def _with_deployer_ip(engine: EngineConfig) -> EngineConfig:
    return EngineConfig({**engine.values, f"{config.PROJECT}:allowedIpRanges": f'["{DEPLOYER_IP}"]'})


def test_every_declared_key_reaches_the_program_as_a_string():
    engine = config.engine_config("dev")
    schema = config.load_schema()
    assert set(engine.of_project(config.PROJECT)) == set(schema)  # defaults merged in: the stack sets only some
    assert all(isinstance(text, str) for text in engine.values.values())
    assert engine.values[f"{config.PROJECT}:amlDataMode"] == "download"  # a default, on a batch stack
    assert engine.values[f"{config.PROJECT}:frameworks"] == '["pytorch","tensorflow"]'
    assert engine.values[f"{config.PROJECT}:reservedAddressSpaces"] == '["10.0.0.0/16","10.20.0.0/16"]'
    assert engine.values[f"{config.PROJECT}:retainOutputs"] == "false"


@pytest.mark.parametrize("stack", config.stack_names())
def test_pulumi_up_evaluates_every_stack_file_as_plan_does(stack):
    """__main__.py, run with the engine's config, declares what `plan` shows (which reads the same merge)."""
    up = offline.evaluate_program(stack, _with_deployer_ip(config.engine_config(stack)))
    planned = offline.evaluate(config.from_stack_file(stack))
    assert {(r.type, r.name) for r in up.resources} == {(r.type, r.name) for r in planned.resources}
    assert set(up.outputs) == set(planned.outputs)
    assert up.config.network.allowed_ip_ranges == (DEPLOYER_IP,)


def test_pulumi_up_refuses_the_example_placeholder_in_one_line():
    with pytest.raises(pulumi.RunError) as err:
        offline.evaluate_program("dev", config.engine_config("dev"))
    assert str(err.value).startswith("config key 'allowedIpRanges': 203.0.113.0/24 is a placeholder")
    assert "\n" not in str(err.value)


def _minimal_stack(tmp_path, backend: str, framework: str) -> EngineConfig:
    """A stack file with nothing but what a stack must say: where the deployers come from, and its choices."""
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.min.yaml").write_text(yaml.safe_dump({"config": {
        f"{config.PROJECT}:allowedIpRanges": [DEPLOYER_IP], f"{config.PROJECT}:backend": backend,
        f"{config.PROJECT}:trainingFramework": framework}}))
    return config.engine_config("min", tmp_path)


@pytest.mark.parametrize("backend", backend_facts.BACKENDS)
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "keras"])
def test_every_default_is_valid_for_every_backend_and_framework(tmp_path, backend, framework):
    ev = offline.evaluate_program("min", _minimal_stack(tmp_path, backend, framework))
    assert (ev.config.backend, ev.config.training.framework) == (backend, framework)
    assert ev.resources and ev.outputs["backend"] == backend


@pytest.mark.parametrize("key, value, refused", [
    ("amlDataMode", "download", False),  # the default, which the engine gives every stack: accepted
    ("amlDataMode", "mount", True),  # asks for something a batch stack would ignore: refused
    ("nfsDiskCount", 4, False),
    ("nfsDiskCount", 8, True),
])
def test_another_backends_key_is_refused_only_when_it_differs_from_the_default(tmp_path, key, value, refused):
    stack = {f"{config.PROJECT}:allowedIpRanges": [DEPLOYER_IP], f"{config.PROJECT}:{key}": value,
             f"{config.PROJECT}:backend": "azureml" if key.startswith("nfs") else "batch"}
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.t.yaml").write_text(yaml.safe_dump({"config": stack}))
    if refused:
        with pytest.raises(config_schema.ConfigError, match=f"config key '{key}': applies to backend"):
            config.from_stack_file("t", tmp_path)
    else:
        assert config.from_stack_file("t", tmp_path)


def test_plan_stops_where_the_engine_would(tmp_path):
    """A value of the wrong type stops at plan with the engine's own words, before the program runs."""
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.t.yaml").write_text(f"config:\n  {config.PROJECT}:maxNodes: two\n")
    with pytest.raises(config_schema.ConfigError, match="^Stack 't' with configuration key 'maxNodes' must be of type "
                                                 "'integer'$"):
        config.from_stack_file("t", tmp_path)


def test_a_key_pulumi_yaml_does_not_declare_is_named_by_up_as_by_plan():
    engine = _with_deployer_ip(config.engine_config("dev"))
    engine = EngineConfig({**engine.values, f"{config.PROJECT}:maxNode": "4"})
    with pytest.raises(pulumi.RunError, match="config key 'maxNode': unknown key; did you mean 'maxNodes'"):
        offline.evaluate_program("dev", engine)


def test_a_stack_key_without_namespace_is_the_projects():  # TestLoadingStackConfigWithoutNamespacingTheProject
    values = _merge("""
        name: test
        runtime: dotnet
        config:
          aws:region: us-west-1
          instanceSize: t3.micro""", """
        config:
          instanceSize: t4.large""")
    assert values == {"test:instanceSize": "t4.large", "aws:region": "us-west-1"}


@pytest.mark.parametrize("yaml_value, text", [
    # Go's encoding/json (object.go MarshalString marshals numbers and lists with it): the values Go writes.
    ("2.0", "2"), ("0.00001", "0.00001"), ("1.0e-7", "1e-7"), ("1.5e+21", "1.5e+21"), ("true", "true"),
    ("[a<b, c&d, é]", '["a\\u003cb","c\\u0026d","é"]'), ("{b: 1, a: 2}", '{"a":2,"b":1}'),
])
def test_stack_values_become_the_text_go_writes(yaml_value, text):
    values = _merge("name: test\nruntime: python\n", f"config:\n  test:v: {yaml_value}\n")
    assert values == {"test:v": text}


def test_a_whole_float_passes_an_integer_key_as_in_pulumi_up():
    assert _merge("name: test\nruntime: python\nconfig:\n  n:\n    type: integer\n",
                  "config:\n  test:n: 2.0\n") == {"test:n": "2"}


@pytest.mark.parametrize("declared", [{"type": "array"}, {"type": "number"}])
def test_types_go_does_not_validate_as_given_fail(declared):
    """project.go ValidateConfigValue: an array needs its items' type; an unknown type name is never valid."""
    with pytest.raises(EngineConfigError, match="must be of type"):
        engine_config.merge({"name": "test", "config": {"v": declared}}, "dev", {"test:v": ["x"]})
