"""Every private name of Pulumi's Python runtime that the offline evaluation uses, and only here.

Written against pulumi==3.272.0, the version requirements.txt pins. Each name below is private (underscored, or
outside `pulumi.runtime.__all__`), so any Pulumi release may move or change it: on an upgrade,
tests/infra/preview/test_pulumi_private.py fails first, naming the name and the file. Paths are under
pulumi/pulumi's sdk/python/lib/pulumi/.

- `runtime/sync_await.py` `_sync_await(awaitable)`: runs a coroutine to its end on the runtime's event loop.
- `runtime/stack.py` `run_pulumi_func(func)`: runs a program, then waits for its outstanding RPCs, as the language
  host does.
- `runtime/settings.py` `SETTINGS.rpc_manager` (`runtime/rpc_manager.py` `RPCManager.clear()`) and
  `SETTINGS.outputs`: the RPCs and outputs the previous evaluation left tracked; `ROOT`, the context variable
  that holds the root stack resource (`set_mocks` makes a fresh root stack only when it is None). Clearing both
  and then running the program under `_sync_await(run_pulumi_func(...))` is what Pulumi's own
  `pulumi.runtime.test` decorator (`runtime/mocks.py`) does.
- `runtime/mocks.py` `MockMonitor`: the engine's resource monitor in mock mode; `set_mocks(monitor=...)` takes
  one. Subclassed to see each `RegisterResource` request (its fields are the resource monitor's wire protocol,
  proto/pulumi/resource.proto, public) and the state the mocks answered (`MockMonitor.resources[urn].state`).
- `runtime/stack.py` `Stack.outputs`: what the program exported, on the root stack resource that the public
  `get_root_resource()` returns.
- `runtime/rpc.py` `deserialize_properties(struct)`: a request's property struct as Python values;
  `_special_sig_key` and `_special_secret_sig`: how a deserialized secret is marked.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pulumi.runtime import get_root_resource, mocks, rpc, set_mocks, settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

PULUMI_VERSION = "3.272.0"  # the version this module was checked against; requirements.txt pins the same

# What the test checks, per name: (module, attribute path, file under sdk/python/lib/pulumi/).
PRIVATE_NAMES: tuple[tuple[str, str, str], ...] = (
    ("pulumi.runtime.sync_await", "_sync_await", "runtime/sync_await.py"),
    ("pulumi.runtime.stack", "run_pulumi_func", "runtime/stack.py"),
    ("pulumi.runtime.settings", "SETTINGS.rpc_manager.clear", "runtime/settings.py, runtime/rpc_manager.py"),
    ("pulumi.runtime.settings", "SETTINGS.outputs.clear", "runtime/settings.py"),
    ("pulumi.runtime.settings", "ROOT.set", "runtime/settings.py"),
    ("pulumi.runtime.stack", "Stack.outputs", "runtime/stack.py"),
    ("pulumi.runtime.mocks", "MockMonitor.RegisterResource", "runtime/mocks.py"),
    ("pulumi.runtime.rpc", "deserialize_properties", "runtime/rpc.py"),
    ("pulumi.runtime.rpc", "_special_sig_key", "runtime/rpc.py"),
    ("pulumi.runtime.rpc", "_special_secret_sig", "runtime/rpc.py"),
)

# Called with each resource the program registers (not the stack itself): its URN, the RegisterResource request,
# its inputs as Python values, and the state the mocks answered with.
OnRegister = Callable[[str, Any, dict[str, Any], dict[str, Any]], None]


class _RecordingMonitor(mocks.MockMonitor):
    """The mock monitor, also handing each registration to `on_register`."""

    def __init__(self, resource_mocks: mocks.Mocks, on_register: OnRegister):
        super().__init__(resource_mocks)
        self._on_register = on_register

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self._on_register(response.urn, request, rpc.deserialize_properties(request.object),
                              self.resources[response.urn].state)
        return response


def run_under_mocks(resource_mocks: mocks.Mocks, on_register: OnRegister, project: str, stack: str,
                    program: Callable[[], Awaitable[None]]) -> None:
    """Run `program` (a coroutine function) to its end under `resource_mocks`, in a fresh root stack (it collects
    this program's exports) with nothing left tracked from an earlier run; `on_register` sees every resource."""
    settings.ROOT.set(None)
    set_mocks(resource_mocks, project=project, stack=stack, preview=False,
              monitor=_RecordingMonitor(resource_mocks, on_register))
    settings.SETTINGS.rpc_manager.clear()
    settings.SETTINGS.outputs.clear()
    _sync_await(run_pulumi_func(program))


def stack_outputs() -> dict[str, Any]:
    """What the running program has exported so far (`pulumi.export`), by name."""
    return get_root_resource().outputs


def secret_value(value: Any) -> tuple[bool, Any]:
    """(True, the plain value) when `value` is a deserialized secret, else (False, value)."""
    if isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig:
        return True, value.get("value")
    return False, value
