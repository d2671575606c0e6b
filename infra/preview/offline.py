"""Evaluate the Pulumi program without Azure and without the Pulumi CLI, using Pulumi's own mocks.

`evaluate_program(stack, engine_config)` runs __main__.py as the language host does, with the config the
Pulumi CLI would give it; `evaluate(config)` runs the program's body for a given StackConfig. Both run under
`pulumi.runtime.set_mocks` and return every
resource it declared (type, name, parent, inputs), every provider function it invoked, and its stack
outputs resolved. `plan` prints that; the tests assert on it. The mocks echo inputs and add what Azure
would compute (ids, names, endpoints): they stand in for the engine, not for our code.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import runpy
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pulumi

from infra import REPO_ROOT
from infra.backends.azureml import job as aml_job
from infra.backends.azureml import training_job as aml_training_job
from infra.backends.batch import spec as batch_spec
from infra.backends.batch import training_job as batch_training_job
from infra.core.security import resources as security
from infra.core.config.stack import PROJECT, StackConfig, from_pulumi
from infra.core.config.engine import EngineConfig
from infra.preview import pulumi_private

SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
MOCK_SAS_SIGNATURE = "sig=MOCK"
MOCK_ACCOUNT_KEY = "MOCK-ACCOUNT-KEY-a2V5"  # what the mock's SAS tokens carry, so tests can find leaked ones


@dataclass
class DeclaredResource:
    urn: str
    type: str
    name: str
    parent_urn: str
    custom: bool
    inputs: dict[str, Any]
    state: dict[str, Any]
    retain_on_delete: bool = False
    replace_on_changes: list[str] = field(default_factory=list)
    ignore_changes: list[str] = field(default_factory=list)
    additional_secret_outputs: list[str] = field(default_factory=list)
    dependencies: list[str] = field(default_factory=list)  # URNs: depends_on and the inputs' resources
    delete_before_replace: bool = False
    import_id: str = ""  # the `import` option: the ID of an existing resource the engine adopts


@dataclass
class Invocation:
    token: str
    args: dict[str, Any]


@dataclass
class Evaluation:
    config: StackConfig
    resources: list[DeclaredResource]
    invocations: list[Invocation]
    outputs: dict[str, Any]
    secret_outputs: set[str] = field(default_factory=set)

    def of_type(self, type_: str) -> list[DeclaredResource]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name_contains: str = "") -> DeclaredResource:
        found = [r for r in self.of_type(type_) if name_contains in r.name]
        assert len(found) == 1, f"expected one {type_} named *{name_contains}*, found {[r.name for r in found]}"
        return found[0]


def _arm_id(typ: str, name: str, resource_group: str) -> str:
    # azure-native:network:Subnet -> .../providers/Microsoft.Network/subnet/<name>, close enough for wiring; in the
    # resource group the resource names (resourceGroupName), as Azure's IDs are, so scopes can be checked against it.
    if typ == security.RESOURCE_GROUP:
        return f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{name}"
    _, module, kind = (typ.split(":") + ["", ""])[:3]
    return (f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{resource_group or 'rg-mock'}/providers/"
            f"Microsoft.{module.capitalize()}/{kind[:1].lower()}{kind[1:]}s/{name}")


class AzureMocks(pulumi.runtime.Mocks):
    """Echo inputs and add the outputs the providers would compute."""

    def __init__(self, autoname: Callable[[str], str] | None = None) -> None:
        self.invocations: list[Invocation] = []
        self._subnets: dict[str, str] = {}  # subnet ID -> its CIDR, to give NICs addresses inside it
        # azure-native names a resource without an explicit name "the logical name plus a random suffix", drawn at each
        # create (https://www.pulumi.com/docs/iac/concepts/resources/names/); by default the mocks take a hash of the
        # logical name so plans are stable, and a test of a re-created stack passes a random one (test_retained_network.py).
        self._autoname = autoname or (lambda logical: f"{logical}{hashlib.sha256(logical.encode()).hexdigest()[:6]}")

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        inputs = dict(args.inputs)
        # A resource named explicitly keeps that name; others get an autoname, as azure-native gives.
        known = security.RESOURCE_TYPES.get(args.typ)
        explicit = inputs.get(known.own_name) if known and known.own_name else None
        name = explicit or self._autoname(args.name)
        state = {**inputs, "name": name}
        if args.typ.startswith("azure-native:"):
            group = inputs.get("resourceGroupName")
            state["id"] = _arm_id(args.typ, name, group if isinstance(group, str) else "")
            if args.typ == security.SUBNET and isinstance(inputs.get("virtualNetworkName"), str):
                # A subnet's ID names its VNet, as Azure's does: .../virtualNetworks/<vnet>/subnets/<subnet>.
                vnet = _arm_id("azure-native:network:VirtualNetwork", inputs["virtualNetworkName"],
                               group if isinstance(group, str) else "")
                state["id"] = f"{vnet}/subnets/{name}"
        identity = state.get("identity")
        if isinstance(identity, dict) and identity.get("type") == "SystemAssigned":
            state["identity"] = {**identity, "principalId": f"principal-{name}", "tenantId": SUBSCRIPTION}
        if isinstance(identity, dict) and isinstance(identity.get("userAssignedIdentities"), list):
            # Inputs list the identity IDs; Azure answers with a map of ID -> principal.
            state["identity"] = {**identity, "userAssignedIdentities": {
                i: {"principalId": f"principal-{i}", "clientId": f"client-{i}"}
                for i in identity["userAssignedIdentities"]}}
        if args.typ == "azure-native:storage:StorageAccount":
            state["primaryEndpoints"] = {"blob": f"https://{name}.blob.core.windows.net/",
                                         "file": f"https://{name}.file.core.windows.net/"}
        elif args.typ == "azure-native:containerregistry:Registry":
            state["loginServer"] = f"{name}.azurecr.io"
        elif args.typ == "azure-native:managedidentity:UserAssignedIdentity":
            state.update(principalId=f"principal-{name}", clientId=f"client-{name}", tenantId=SUBSCRIPTION)
        elif args.typ == "azure-native:network:PublicIPAddress":
            state["ipAddress"] = "203.0.113.10"  # TEST-NET-3: documentation range
        elif args.typ == "docker-build:index:Image":
            tag = inputs["tags"][0]
            state.update(ref=f"{tag}@sha256:{'0' * 64}", digest=f"sha256:{'0' * 64}")
        elif args.typ == "azure-native:network:Subnet":
            self._subnets[state["id"]] = inputs.get("addressPrefix", "")
        elif args.typ == "azure-native:network:NetworkInterface":
            # Azure gives a NIC the first free address of its subnet: .4 (the first four are reserved).
            for config in state.get("ipConfigurations") or []:
                prefix = self._subnets.get((config.get("subnet") or {}).get("id"), "")
                if prefix:
                    config["privateIPAddress"] = str(ipaddress.IPv4Network(prefix)[4])
        elif args.typ == "azure-native:keyvault:Vault" and isinstance(state.get("properties"), dict):
            # properties.vaultUri, as Key Vault reports it in the public cloud
            state["properties"] = {**state["properties"], "vaultUri": f"https://{name}.vault.azure.net/"}
        elif args.typ == "azure-native:batch:BatchAccount":
            state["accountEndpoint"] = f"{name}.{inputs.get('location')}.batch.azure.com"
        elif args.typ == "pulumi-python:dynamic:Resource" and "batch_endpoint" in inputs:
            state["job_id"] = batch_spec.job_id(batch_training_job.inputs_from(inputs))
        elif args.typ == "pulumi-python:dynamic:Resource" and "workspace" in inputs:
            state["job_name"] = aml_job.job_name(aml_training_job.inputs_from(inputs))
        elif args.typ == "pulumi-python:dynamic:Resource" and "source_image" in inputs:
            pass  # an image import (image_import.py): its outputs are its inputs, `ref` among them
        elif args.typ == "pulumi-python:dynamic:Resource" and "propagation_s" in inputs:
            pass  # a wait after a role assignment (propagation.py): its outputs are its inputs
        elif args.typ == "pulumi-python:dynamic:Resource":
            state.update(username="training-image-push", password="mock-token-password")
        return (state.get("id") or f"{args.name}-id"), state

    def call(self, args: pulumi.runtime.MockCallArgs):
        self.invocations.append(Invocation(args.token, dict(args.args)))
        if args.token == "azure-native:storage:listStorageAccountKeys":
            # Never called by the program; recognisable if it ever is and the key leaks somewhere.
            return {"keys": [{"keyName": "key1", "value": MOCK_ACCOUNT_KEY, "permissions": "FULL"}]}
        if args.token == "azure-native:storage:listStorageAccountServiceSAS":
            a = args.args
            start = f"&st={a['sharedAccessStartTime']}" if a.get("sharedAccessStartTime") else ""
            token = f"sv=2024-01-01&sr={a['resource']}&sp={a['permissions']}&spr={a['protocols']}{start}&se={a['sharedAccessExpiryTime']}&{MOCK_SAS_SIGNATURE}"
            return {"serviceSasToken": token}
        if args.token == "azure-native:logic:listWorkflowTriggerCallbackUrl":
            # What Azure returns: the trigger's URL with its signature (sig), which the program keeps secret.
            return {"value": f"https://prod-00.westeurope.logic.azure.com/workflows/{args.args.get('workflowName')}"
                             f"/triggers/{args.args.get('triggerName')}/paths/invoke?api-version=2016-10-01"
                             f"&sp=%2Ftriggers%2Fbudget%2Frun&sv=1.0&{MOCK_SAS_SIGNATURE}"}
        if args.token == "azure-native:authorization:getClientConfig":
            return {"subscriptionId": SUBSCRIPTION, "tenantId": SUBSCRIPTION, "clientId": "deployer",
                    "objectId": "deployer"}
        return {}


def _declared(urn: str, request: Any, inputs: dict[str, Any], state: dict[str, Any]) -> DeclaredResource:
    """A RegisterResource request (the resource monitor's wire protocol, pulumi/pulumi proto/pulumi/resource.proto)
    as a record: with its parent, so the tree can be shown, and what the mocks answered."""
    return DeclaredResource(
        urn=urn, type=request.type, name=request.name, parent_urn=request.parent,
        custom=request.custom, inputs=_plain(inputs), state=_plain(state),
        retain_on_delete=bool(request.retainOnDelete),
        replace_on_changes=list(request.replaceOnChanges), ignore_changes=list(request.ignoreChanges),
        additional_secret_outputs=list(request.additionalSecretOutputs),
        dependencies=list(request.dependencies), delete_before_replace=bool(request.deleteBeforeReplace),
        import_id=str(request.importId))


def _plain(value: Any) -> Any:
    """Drop Pulumi's secret wrappers and resource references so values can be compared and printed."""
    if isinstance(value, dict):
        secret, plain = pulumi_private.secret_value(value)
        if secret:
            return _plain(plain)
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def evaluate(config: StackConfig, now: datetime | None = None,
             autoname: Callable[[str], str] | None = None) -> Evaluation:
    """Run the program's body, `deploy(config)`, under mocks; nothing leaves this process. For a config that no
    stack file holds (tests vary one); `plan` and the conformance tests run __main__.py with `evaluate_program`."""
    # The program's body, imported here for its weight (pulumi_azure_native's modules, the components): ~1.7 s that
    # only an evaluation needs, not every user of the mocks.
    from infra.stack import deploy

    return _evaluate(config.stack, lambda: deploy(config, now), lambda: config, autoname)


def evaluate_program(stack: str, engine: EngineConfig) -> Evaluation:
    """Run __main__.py as Pulumi's Python language host runs it, with `engine` (what the CLI computed from the
    stack file, infra/core/config/engine.py) as its config: the host puts the map in PULUMI_CONFIG and the secret
    keys in PULUMI_CONFIG_SECRET_KEYS, its exec script hands both to `set_all_config` and runs the program with
    runpy (pulumi/pulumi sdk/python/cmd/pulumi-language-python/main.go and pulumi-language-python-exec).
    A config the program refuses raises the program's `pulumi.RunError`."""
    def program():
        runpy.run_path(str(REPO_ROOT / "__main__.py"), run_name="__main__")

    wire = {"PULUMI_CONFIG": json.dumps(engine.values),
            "PULUMI_CONFIG_SECRET_KEYS": json.dumps(sorted(engine.secret_keys))}
    saved = {name: os.environ.get(name) for name in wire}
    os.environ.update(wire)
    try:
        pulumi.runtime.set_all_config(pulumi.runtime.get_config_env(), pulumi.runtime.get_config_secret_keys_env())
        return _evaluate(stack, program, from_pulumi)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        pulumi.runtime.set_all_config({}, [])


def _evaluate(stack: str, program: Callable[[], Any], config_of: Callable[[], StackConfig],
              autoname: Callable[[str], str] | None = None) -> Evaluation:
    azure_mocks = AzureMocks(autoname)
    declared: list[DeclaredResource] = []
    resolved: dict[str, Any] = {}
    secret: set[str] = set()
    evaluated: list[StackConfig] = []

    async def run():
        program()
        evaluated.append(config_of())
        for key, value in pulumi_private.stack_outputs().items():
            output = pulumi.Output.from_input(value)
            resolved[key] = await output.future(with_unknowns=True)
            if await output.is_secret():
                secret.add(key)

    pulumi_private.run_under_mocks(azure_mocks, lambda *registered: declared.append(_declared(*registered)),
                                   PROJECT, stack, run)
    return Evaluation(evaluated[0], declared, azure_mocks.invocations, resolved, secret)
