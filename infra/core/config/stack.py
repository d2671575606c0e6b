"""Typed, validated stack configuration: a stack's values loaded into a `StackConfig`.

Pulumi.yaml declares every key (type, default, description); this module turns a stack's values into a
`StackConfig` or refuses them with a `ConfigError` that names the key and the fix. A `StackConfig` holds one
frozen section per concern (sections.py: each with its keys and its own validation beside them); what a
key is and may be (its type, bounds and allowed values, written once in RANGES and ALLOWED, which Pulumi.yaml's
descriptions state) is schema.py's. The same `parse` serves the real program (`from_pulumi`: the values
the engine hands over) and the offline `plan` and job verbs (`from_stack_file`: the same values, computed from
the stack file by the engine's own merge in engine.py), so both see every default merged in, every value
as a string, and refuse exactly the same configs.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra import REPO_ROOT
from infra.core.config import engine
# From the backends table: the keys that mean something to one backend only (setting one for another backend is
# refused, not ignored).
from infra.core.backend_facts import BACKEND_ONLY_KEYS
from infra.core.config.schema import (RANGES, RENAMED_KEYS, ConfigError, ConfigKey, check_one_of, coerce,
                                      field_name, sas_expiry_hours_problem)
from infra.core.config.sections import (AccessConfig, AmlConfig, BudgetConfig, MonitoringConfig, NetworkConfig,
                                        NfsConfig, NodesConfig, RegistryConfig, StorageConfig, TaggingConfig,
                                        TrainingConfig)
from infra.core.config.engine import EngineConfig
from infra.core.regions import REGIONS

PROJECT = "azure-dl-training"
# Config namespaces a stack file may use besides this project's: the providers the program uses, and Pulumi's.
PROVIDER_NAMESPACES = ("azure-native", "docker-build", "pulumi")


SECTIONS = {"network": NetworkConfig, "nodes": NodesConfig, "storage": StorageConfig, "monitoring": MonitoringConfig,
            "registry": RegistryConfig, "nfs": NfsConfig, "training": TrainingConfig, "aml": AmlConfig,
            "access": AccessConfig, "tagging": TaggingConfig, "budget": BudgetConfig}
TOP_KEYS = ("team", "location", "backend", "deployerPrincipalType", "namesWithoutSubscription",  # StackConfig's own
            "adoptRetained", "networkAutoNamed")
# Every key Pulumi.yaml declares -> where it lands ("section.field", or the StackConfig field). A new key: its
# Pulumi.yaml entry, its field in one section's KEYS and class, its check in that section's `parse`
# (sections.py).
KEYS = {**{key: field_name(key) for key in TOP_KEYS},
        **{key: f"{section}.{field}" for section, cls in SECTIONS.items() for key, field in cls.KEYS.items()}}


@dataclass(frozen=True, kw_only=True)
class StackConfig:
    stack: str
    team: str
    location: str
    backend: str  # batch | azureml
    deployer_principal_type: str  # User | ServicePrincipal: who runs `pulumi up`, for its own role assignments
    # A stack deployed before names hashed the subscription keeps its names when it adds azure-native:subscriptionId.
    names_without_subscription: bool = False
    # retainOutputs stacks after `pulumi destroy`: the next `up` adopts the retained group and storage (naming.retained_ids)
    adopt_retained: bool = False
    # A stack deployed before the VNet and subnets had fixed names keeps azure-native's (infra/components/network.py).
    network_auto_named: bool = False
    network: NetworkConfig
    nodes: NodesConfig
    storage: StorageConfig
    monitoring: MonitoringConfig
    registry: RegistryConfig
    nfs: NfsConfig
    training: TrainingConfig
    aml: AmlConfig
    access: AccessConfig = AccessConfig()
    tagging: TaggingConfig = TaggingConfig()
    budget: BudgetConfig = BudgetConfig()
    placeholders: tuple[str, ...] = ()  # values `plan` accepts but `pulumi up` refuses, each with its fix
    # The subscription the stack deploys to: the provider's own key `azure-native:subscriptionId` in the stack file
    # (None when unset: the provider then takes the CLI's or the environment's default subscription, which `plan`
    # cannot know offline). Globally unique names hash it when set (naming.py); fleet groups teams by it.
    subscription_id: str | None = None

    @property
    def naming_subscription(self) -> str | None:
        """The subscription the globally unique names hash (naming.py): the stack's, unless its names are pinned."""
        return None if self.names_without_subscription else self.subscription_id

    @property
    def tags(self) -> dict[str, str]:
        """Tags on every taggable resource: who owns it and what made it."""
        return {**dict(self.tagging.extra), "team": self.team, "stack": self.stack, "project": PROJECT,
                "managed-by": "pulumi"}


def load_project(root: Path = REPO_ROOT) -> dict[str, Any]:
    """Pulumi.yaml of the project in `root`, parsed: read once per command, however many stacks it serves."""
    return yaml.load((root / "Pulumi.yaml").read_text(), Loader=_FAST_LOADER)


def schema_of(project: Mapping[str, Any]) -> dict[str, ConfigKey]:
    """The config keys a parsed Pulumi.yaml declares."""
    return {
        name: ConfigKey(name, spec["type"], spec.get("default"), spec.get("description", ""))
        for name, spec in project["config"].items()
    }


def load_schema(project_file: Path = REPO_ROOT / "Pulumi.yaml") -> dict[str, ConfigKey]:
    return schema_of(yaml.load(project_file.read_text(), Loader=_FAST_LOADER))


def check_team(team: str) -> str:
    """The team name's rules (`team`, and `new-team NAME`, whose stack file and team are both NAME)."""
    low, high = RANGES["team"].low, RANGES["team"].high
    if not re.fullmatch(rf"[a-z][a-z0-9]{{{low - 1},{high - 1}}}", team):
        # A suggestion that passes: lower case, letters and digits only, from the first letter, cut to the length.
        fit = re.sub(r"^[^a-z]+", "", re.sub(r"[^a-z0-9]", "", str(team).lower()))[:high]
        hint = f"; try {fit!r}" if len(fit) >= low and fit != team else ""
        raise ConfigError("team", f"{team!r} must be {RANGES['team']} lowercase letters or digits, starting with a "
                                  f"letter (it goes into storage account and registry names){hint}")
    return team


# A subscription ID is "a GUID-formatted string (e.g. 00000000-0000-0000-0000-000000000000)" (the Az modules' own
# description: https://learn.microsoft.com/dotnet/api/microsoft.azure.powershell.cmdlets.websites.models.
# iwebsitesidentity.subscriptionid); the provider would send anything else to ARM and fail at its first request.
_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
SUBSCRIPTION_KEY = "azure-native:subscriptionId"


def check_subscription_id(value: Any) -> str | None:
    """The stack's `azure-native:subscriptionId`, lowercased (ARM compares it case-insensitively, and a name hashed
    from it must not change with its spelling), or None when unset or empty."""
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip()
    if not _GUID.fullmatch(text):
        raise ConfigError(SUBSCRIPTION_KEY, f"{text!r} is not a subscription ID (a GUID such as "
                                            "00000000-0000-0000-0000-000000000000; `az account show --query id -o tsv` "
                                            "prints yours)")
    return text.lower()


def _check_adopt(merged: Mapping[str, Any], subscription_id: Any) -> bool:
    """adoptRetained: only where there is something retained to adopt, and with the subscription its IDs carry."""
    if not merged["adoptRetained"]:
        return False
    if not merged["retainOutputs"]:
        raise ConfigError("adoptRetained", "adopts what retainOutputs kept after `pulumi destroy`, and this stack "
                                           "retains nothing; remove it")
    if not subscription_id:
        raise ConfigError("adoptRetained", f"needs {SUBSCRIPTION_KEY} in the stack file (the adopted resources' IDs "
                                           "carry it): `az account show --query id -o tsv` prints yours")
    return True


def parse(stack: str, values: Mapping[str, Any], schema: Mapping[str, ConfigKey] | None = None, *,
          placeholders_ok: bool = False, subscription_id: Any = None) -> StackConfig:
    """Defaults from the schema, overridden by `values` (unqualified keys), then validated section by section.
    With `placeholders_ok` (offline: plan, job verbs) the example stacks' placeholders pass, listed in
    `placeholders`. `subscription_id`: the provider's `azure-native:subscriptionId` (not a key of this project)."""
    schema = schema if schema is not None else load_schema()
    for name in values:
        if name in RENAMED_KEYS and name not in schema:
            raise ConfigError(name, RENAMED_KEYS[name])
        if name not in schema:
            close = difflib.get_close_matches(name, list(schema), n=1)
            hint = f"did you mean '{close[0]}'?" if close else "Pulumi.yaml declares every key the program reads"
            raise ConfigError(name, f"unknown key; {hint}")
    merged = {name: coerce(key, values.get(name, key.default)) for name, key in schema.items()}
    missing, unread = set(KEYS) - set(merged), set(merged) - set(KEYS)
    if missing:
        raise ConfigError(field_name(sorted(missing)[0]), "not declared in Pulumi.yaml's config schema")
    if unread:  # a key Pulumi.yaml declares that the program would never read
        raise ConfigError(field_name(sorted(unread)[0]), "declared in Pulumi.yaml but not a StackConfig field")

    backend = check_one_of("backend", merged["backend"])
    for other, keys in BACKEND_ONLY_KEYS.items():
        for key in keys:
            # The engine gives every stack Pulumi.yaml's default for each key it leaves unset
            # (engine.py), so "set by the stack" cannot be told from "default": only a value other than
            # the default means someone asked for something this backend would ignore.
            if other != backend and merged[key] != coerce(schema[key], schema[key].default):
                raise ConfigError(key, f"applies to backend {other} only, and this stack's backend is {backend}; "
                                       "remove it")
    team = check_team(merged["team"])
    location = merged["location"]
    if location not in REGIONS:
        close = difflib.get_close_matches(str(location).lower().replace(" ", ""), sorted(REGIONS), n=1)
        hint = f"did you mean '{close[0]}'?" if close else "use a region name such as westeurope or eastus"
        raise ConfigError("location", f"{location!r} is not an Azure region; {hint} "
                                      "(`az account list-locations -o table` lists them)")
    deployer = check_one_of("deployerPrincipalType", merged["deployerPrincipalType"],
                             " (User for `az login` as a person, ServicePrincipal for a service principal or "
                             "managed identity running `pulumi up`)")
    # Section by section, in the order the keys were always checked (the first bad key is the one named).
    network, placeholders = NetworkConfig.parse(merged, placeholders_ok)
    nodes = NodesConfig.parse(merged, network)
    # Over the 7 days the storage accounts' SAS expiration policy allows: said with its reason, not as a bare range.
    if isinstance(merged["sasExpiryHours"], int) and (problem := sas_expiry_hours_problem(merged["sasExpiryHours"])):
        raise ConfigError("sasExpiryHours", problem)
    storage, monitoring = StorageConfig.parse(merged), MonitoringConfig.parse(merged)
    registry = RegistryConfig.parse(merged)
    nfs = NfsConfig.parse(merged)
    training = TrainingConfig.parse(merged, registry)
    return StackConfig(stack=stack, team=team, location=location, backend=backend, deployer_principal_type=deployer,
                       names_without_subscription=merged["namesWithoutSubscription"],
                       adopt_retained=_check_adopt(merged, subscription_id),
                       network_auto_named=merged["networkAutoNamed"],
                       network=network, nodes=nodes, storage=storage, monitoring=monitoring, registry=registry,
                       nfs=nfs, training=training, aml=AmlConfig.parse(merged), access=AccessConfig.parse(merged),
                       tagging=TaggingConfig.parse(merged, backend), budget=BudgetConfig.parse(merged),
                       placeholders=placeholders, subscription_id=check_subscription_id(subscription_id))


def stack_names(root: Path = REPO_ROOT) -> list[str]:
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


class _UniqueKeys:
    """YAML that refuses a key given twice in one mapping (plain YAML keeps the last value silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                mark = key_node.start_mark
                raise ConfigError(str(key), f"given twice (line {mark.line + 1}); keep one")
            seen.add(key)
        return super().construct_mapping(node, deep)


class _UniqueKeyLoader(_UniqueKeys, yaml.SafeLoader):
    """PyYAML's own parser: its error messages are the ones users see."""


# libyaml's parser (PyYAML's C extension, ~15x faster here) with the same constructor and resolver, so the same
# values: a fleet of stack files is read with it, and a file it refuses is read again with the Python parser for
# the message (libyaml words its errors differently).
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_FastUniqueKeyLoader = type("_FastUniqueKeyLoader", (_UniqueKeys, _FAST_LOADER), {})


def _stack_document_config(stack: str, root: Path) -> dict[str, Any]:
    """The stack file's `config:` mapping (qualified keys), after the checks Pulumi would not make: a key given
    twice, a key of another project's namespace (the program would never see it). A key without a namespace is
    this project's: the CLI qualifies it with the project's name (pulumi/pulumi sdk/go/common/workspace/loaders.go,
    stackConfigNamespacedWithProject)."""
    path = root / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise ConfigError(None, f"--stack {stack}: no {path.name} in {root}; stacks here: "
                                f"{', '.join(stack_names(root)) or 'none'}")
    text = path.read_text()
    try:
        try:
            document = yaml.load(text, Loader=_FastUniqueKeyLoader) or {}
        except yaml.YAMLError:
            document = yaml.load(text, Loader=_UniqueKeyLoader) or {}  # refuses it too, in PyYAML's words
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise ConfigError(None, f"not valid YAML at {where}: {err.problem or err.context}") from None
    except yaml.YAMLError as err:
        raise ConfigError(None, f"not valid YAML: {str(err).splitlines()[0]}") from None
    if isinstance(document, dict) and document.get("environment"):
        raise ConfigError(None, f"{path.name} imports a Pulumi ESC environment, which only the Pulumi CLI can "
                                "resolve; put the values in the stack file to plan offline")
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        return {}
    qualified: dict[str, Any] = {}
    for key, value in config.items():
        namespace, _, name = str(key).rpartition(":")
        if namespace and namespace != PROJECT and namespace not in PROVIDER_NAMESPACES:
            raise ConfigError(str(key), f"namespace '{namespace}' is neither this project's ({PROJECT}) nor a "
                                        f"provider's ({', '.join(PROVIDER_NAMESPACES)}); did you mean "
                                        f"{PROJECT}:{name}?")
        full = f"{namespace or PROJECT}:{name}"
        if full in qualified:
            # Both spellings of one key: the CLI keeps whichever its map iteration gives last (Go maps have no
            # order), so which value `up` would see is left to chance.
            raise ConfigError(full, f"given twice, as {name} and as {PROJECT}:{name} (the same key); keep one")
        qualified[full] = value
    return qualified


def read_stack_file(stack: str, root: Path = REPO_ROOT) -> dict[str, Any]:
    """The stack's own values for this project, unqualified, as written in the file (YAML types, no defaults).
    Keys of the providers' namespaces (azure-native:...) are left to Pulumi."""
    prefix = f"{PROJECT}:"
    return {key[len(prefix):]: value for key, value in _stack_document_config(stack, root).items()
            if key.startswith(prefix)}


def engine_config(stack: str, root: Path = REPO_ROOT, project: Mapping[str, Any] | None = None) -> EngineConfig:
    """What the Pulumi CLI gives the program for this stack: Pulumi.yaml's defaults merged in, every value a
    string (infra/core/config/engine.py has the rules and their source). `project`: Pulumi.yaml already parsed
    (load_project), when the caller reads several stacks."""
    project = project if project is not None else load_project(root)
    try:
        return engine.merge(project, stack, _stack_document_config(stack, root))
    except engine.EngineConfigError as err:
        raise ConfigError(None, str(err)) from None


def from_engine_config(stack: str, engine_values: EngineConfig, project: Mapping[str, Any]) -> StackConfig:
    """A stack's merged config (engine_config) validated as the program validates it; placeholders allowed."""
    return parse(stack, engine_values.of_project(PROJECT), schema_of(project), placeholders_ok=True,
                 subscription_id=engine_values.values.get(SUBSCRIPTION_KEY))


def from_stack_file(stack: str, root: Path = REPO_ROOT, project: Mapping[str, Any] | None = None) -> StackConfig:
    """A stack file's config as `pulumi up` would receive it (the engine's merge), validated as the program
    validates it; placeholders are allowed and listed (plan, job verbs). Pulumi.yaml is read once (or given)."""
    project = project if project is not None else load_project(root)
    return from_engine_config(stack, engine_config(stack, root, project), project)


def from_pulumi() -> StackConfig:
    """The running program's config. The engine has merged Pulumi.yaml's defaults in already: every declared key
    has a value (a string), whether the stack set it or not."""
    import pulumi

    config = pulumi.Config()
    schema = load_schema()
    values = {name: config.get(name) for name in schema}
    # A key the stack sets that Pulumi.yaml does not declare reaches the program too (the language host passes
    # the whole map as PULUMI_CONFIG); name it, as plan does, instead of ignoring it.
    prefix = f"{PROJECT}:"
    for key, text in pulumi.runtime.get_config_env().items():
        if key.startswith(prefix) and key[len(prefix):] not in schema:
            values[key[len(prefix):]] = text
    return parse(pulumi.get_stack(), {k: v for k, v in values.items() if v is not None}, schema,
                 subscription_id=pulumi.Config("azure-native").get("subscriptionId"))
