"""The private Pulumi names infra/preview/pulumi_private.py wraps, checked against the installed Pulumi for each
Pulumi version the requirements pin: an upgrade that moves or changes one fails here, naming it and its file."""
import asyncio
import inspect
import re
from contextvars import ContextVar

import pulumi
import pytest

from infra import REPO_ROOT
from infra.preview import pulumi_private

PINNED = sorted({m for req in REPO_ROOT.glob("requirements*.txt")
                 for m in re.findall(r"^pulumi==(\S+)", req.read_text(), re.M)})


def _installed_version() -> str:
    from importlib.metadata import version

    return version("pulumi")


def _resolve(module: str, path: str):
    import importlib

    value = importlib.import_module(module)
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _params(function) -> list[str]:
    return [p for p in inspect.signature(function).parameters if p != "self"]


def _check_sync_await(f):
    assert _params(f) == ["awaitable"]

    async def seven():
        return 7

    assert f(seven()) == 7


def _check_run_pulumi_func(f):
    assert inspect.iscoroutinefunction(f) and _params(f) == ["func"]


def _check_callable(f):
    assert callable(f)


def _check_root_set(_):
    from pulumi.runtime import settings

    assert isinstance(settings.ROOT, ContextVar)


def _check_stack_outputs(_):
    # Set in Stack.__init__; what a program exports lands there (the behaviour test runs one).
    from pulumi.runtime.stack import Stack

    assert "self.outputs = {}" in inspect.getsource(Stack.__init__)
    assert _params(Stack.output) == ["name", "value"]


def _check_register_resource(f):
    from pulumi.runtime import mocks

    assert _params(f) == ["request"]
    assert "resources" in mocks.MockMonitor.__annotations__
    assert "state" in mocks.MockMonitor.ResourceRegistration._fields


def _check_deserialize(f):
    assert _params(f)[0] == "props_struct"


def _check_string(value):
    assert isinstance(value, str) and value


CHECKS = {
    "_sync_await": _check_sync_await,
    "run_pulumi_func": _check_run_pulumi_func,
    "SETTINGS.rpc_manager.clear": _check_callable,
    "SETTINGS.outputs.clear": _check_callable,
    "ROOT.set": _check_root_set,
    "Stack.outputs": _check_stack_outputs,
    "MockMonitor.RegisterResource": _check_register_resource,
    "deserialize_properties": _check_deserialize,
    "_special_sig_key": _check_string,
    "_special_secret_sig": _check_string,
}


def test_every_wrapped_name_has_a_check():
    assert {path for _, path, _ in pulumi_private.PRIVATE_NAMES} == set(CHECKS)


@pytest.mark.parametrize("version", PINNED, ids=[f"pulumi-{v}" for v in PINNED])
def test_the_pinned_pulumi_is_the_one_checked_and_installed(version):
    assert version == pulumi_private.PULUMI_VERSION, (
        f"requirements pin pulumi=={version}; infra/preview/pulumi_private.py was checked against "
        f"{pulumi_private.PULUMI_VERSION}: check each name in PRIVATE_NAMES against that release, then update it")
    assert f"pulumi=={version}" in (pulumi_private.__doc__ or ""), "pulumi_private's docstring names another version"
    assert _installed_version() == version, (
        f"pulumi {_installed_version()} installed, {version} pinned (and checked in infra/preview/pulumi_private.py): "
        f"reinstall .venv, or move the pin as docs/upgrade.md says (\"How the pins move\")")


@pytest.mark.parametrize("version,module,path,where", [
    (version, module, path, where) for version in PINNED for module, path, where in pulumi_private.PRIVATE_NAMES
], ids=[f"pulumi-{version}-{path}" for version in PINNED for _, path, _ in pulumi_private.PRIVATE_NAMES])
def test_each_private_name_is_there_as_we_use_it(version, module, path, where):
    if path == "Stack.outputs":  # an instance attribute: checked on the class's constructor
        target = None
    else:
        try:
            target = _resolve(module, path)
        except AttributeError as error:
            pytest.fail(f"pulumi {_installed_version()}: {module}.{path} is gone (sdk/python/lib/pulumi/{where}); "
                        f"infra/preview/pulumi_private.py needs another way: {error}")
    try:
        CHECKS[path](target)
    except AssertionError as error:
        pytest.fail(f"pulumi {_installed_version()}: {module}.{path} changed (sdk/python/lib/pulumi/{where}): {error!r}")


class _EchoMocks(pulumi.runtime.Mocks):
    def new_resource(self, args):
        return f"{args.name}-id", {**args.inputs, "answered": True}

    def call(self, args):
        return {}


@pytest.mark.parametrize("version", PINNED, ids=[f"pulumi-{v}" for v in PINNED])
def test_a_program_runs_under_the_wrapped_runtime(version):
    """What offline.py relies on, end to end: registrations seen with their inputs (a secret marked as one) and the
    mocks' state, the exports read from a fresh root stack each run, and the program's error raised."""

    def run_once(export: str, fail: bool = False):
        seen = []

        async def program():
            pulumi.CustomResource("test:index:Thing", "thing", {"plain": "p", "hidden": pulumi.Output.secret("s")})
            pulumi.export(export, 42)
            if fail:
                raise ValueError("the program's own error")
            await asyncio.sleep(0)
            outputs.update(pulumi_private.stack_outputs())

        outputs = {}
        pulumi_private.run_under_mocks(_EchoMocks(), lambda *registered: seen.append(registered), "proj", "stk",
                                       program)
        return seen, outputs

    seen, outputs = run_once("first")
    [(urn, request, inputs, state)] = seen
    assert urn.endswith("$test:index:Thing::thing") and request.type == "test:index:Thing" and request.custom
    assert inputs["plain"] == "p" and pulumi_private.secret_value(inputs["hidden"]) == (True, "s")
    assert pulumi_private.secret_value("p") == (False, "p")
    assert state["answered"] is True
    assert set(outputs) == {"first"}
    _, outputs = run_once("second")
    assert set(outputs) == {"second"}, "a second run saw the first run's exports: the root stack was not fresh"
    with pytest.raises(ValueError, match="the program's own error"):
        run_once("third", fail=True)
