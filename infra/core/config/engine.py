"""The config a Pulumi program receives, computed by the Pulumi CLI's own rules.

The program cannot see the stack file: the CLI reads it, merges in Pulumi.yaml's declarations and hands the
program a flat map of strings. `plan`, the job verbs and the tests take their config from `merge` below, so what
they evaluate is what `pulumi up` evaluates. The rules, from pulumi/pulumi (read 2026-11-23, commit 1b59498):

- pkg/workspace/config.go `mergeConfig`: every key Pulumi.yaml declares that the stack leaves unset gets the
  declared `default` (so the program cannot tell "set by the stack" from "default"); a key of the project's
  namespace declared without a default and unset is the error "Stack 'S' is missing configuration value 'K'";
  then each stack value is checked against the declared type (`validateStackConfigValue`).
- pkg/workspace/config.go `createConfigValue`: a default that is a string, integer or boolean becomes Go's `%v`
  text ("true", "2"); anything else (lists) becomes its JSON.
- sdk/go/common/resource/config/object.go `MarshalString`: a stack file's YAML value becomes text the same way:
  strings as they are, booleans and numbers as their JSON text, lists and maps as compact JSON ("object" values);
  `{secure: ...}` is a secret.
- sdk/go/common/workspace/project.go `ValidateConfigValue`: the declared type check (a string key takes any
  scalar's text; integer: a whole number or its text; boolean: true/false or their text; array: a list whose items
  pass the items' type).
- sdk/python/cmd/pulumi-language-python(-exec): the language host passes the map as PULUMI_CONFIG
  ({"project:key": "text"}) and the secret keys as PULUMI_CONFIG_SECRET_KEYS, and the exec script hands both to
  `pulumi.runtime.set_all_config` before running __main__.py.

Not mirrored: Pulumi ESC environments (`environment:` in the stack file) and decryption of `secure:` values,
which need the stack's secrets provider; `merge` refuses both in one line. PyYAML reads YAML 1.1 (`yes`/`on`
are booleans) where Go's yaml.v3 reads them as strings; the stack files here quote or avoid such words.
"""
from __future__ import annotations

import json
import re
from decimal import Decimal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class EngineConfigError(Exception):
    """What the Pulumi CLI itself would refuse before the program runs; `str()` is its message."""


@dataclass(frozen=True)
class EngineConfig:
    """The program's config as the language host receives it."""

    values: dict[str, str]  # "project:key" -> text, every value a string
    secret_keys: frozenset[str] = frozenset()

    def of_project(self, project: str) -> dict[str, str]:
        """The project's own keys, unqualified (what `pulumi.Config()` reads)."""
        prefix = f"{project}:"
        return {key[len(prefix):]: text for key, text in self.values.items() if key.startswith(prefix)}


def _go_float(number: float) -> str:
    """encoding/json's float64 text: the shortest form, exponent only below 1e-6 or from 1e21 (as 1e-07 -> 1e-7)."""
    if number == int(number) and abs(number) < 1e21:
        return str(int(number))
    if 1e-6 <= abs(number) < 1e21:
        return format(Decimal(repr(number)), "f")  # shortest digits, no exponent: 1e-05 -> 0.00001
    mantissa, exponent = f"{number:e}".split("e")
    mantissa = repr(float(mantissa))
    return f"{mantissa[:-2] if mantissa.endswith('.0') else mantissa}e{int(exponent):+03d}".replace("e+0", "e+") \
        .replace("e-0", "e-")


def _json(value: Any) -> str:
    """Go's json.Marshal: compact, map keys sorted, UTF-8 kept, <, > and & escaped, floats as Go writes them."""
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, list):
        return "[" + ",".join(_json(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_json(str(k))}:{_json(value[k])}" for k in sorted(value, key=str)) + "}"
    text = json.dumps(value, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _is_secure(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def stack_value_text(key: str, value: Any) -> tuple[str, bool]:
    """A stack file's YAML value as the CLI passes it: (text, is_object). object.go MarshalString."""
    if _is_secure(value):
        raise EngineConfigError(f"configuration key '{key}' is a secret (secure:), which only the Pulumi CLI can "
                                "decrypt; offline evaluation takes plaintext values")
    if isinstance(value, str):
        return value, False
    if isinstance(value, bool):
        return ("true" if value else "false"), False
    if isinstance(value, (int, float)):
        return _json(value), False
    if value is None:
        return "null", True  # a YAML null is an object value "null"
    return _json(_plain(value)), True


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        if _is_secure(value):
            raise EngineConfigError("a nested secret (secure:) can only be decrypted by the Pulumi CLI")
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    return str(value)  # dates and the like: Go's unmarshalObject keeps their text


def default_text(value: Any) -> tuple[str, bool]:
    """A Pulumi.yaml default as the CLI sets it: createConfigValue (primitives via Go's %v, else JSON)."""
    if isinstance(value, bool):
        return ("true" if value else "false"), False
    if isinstance(value, (str, int)):
        return str(value), False
    return _json(_plain(value)), True


def _type_name(type_name: str, items: Mapping[str, Any] | None) -> str:
    """project.go InferFullTypeName."""
    return f"array<{_type_name(items.get('type', ''), items.get('items'))}>" if items else type_name


def _valid(type_name: str, items: Mapping[str, Any] | None, content: Any) -> bool:
    """project.go ValidateConfigValue."""
    if type_name == "string":
        return isinstance(content, str)
    if type_name == "integer":
        if isinstance(content, bool):
            return False
        if isinstance(content, int) or (isinstance(content, float) and content == int(content)):
            return True
        return isinstance(content, str) and re.fullmatch(r"[+-]?[0-9]+", content) is not None
    if type_name == "boolean":
        return isinstance(content, bool) or content in ("true", "false")
    if type_name == "object":
        return isinstance(content, dict)
    if type_name == "array":
        # An array without `items` fails, as it does in Go (project validation refuses such a schema anyway).
        return isinstance(content, list) and items is not None and all(
            _valid(items.get("type", ""), items.get("items"), item) for item in content)
    return False  # a type name Go does not know


def merge(project: Mapping[str, Any], stack: str, stack_config: Mapping[str, Any],
          secret_keys: frozenset[str] = frozenset()) -> EngineConfig:
    """The config `pulumi up` gives the program: `project` is Pulumi.yaml's document, `stack_config` the stack
    file's `config:` mapping (qualified keys, YAML values). `secret_keys`: keys whose plaintext is given here but
    which the stack holds as secrets (the language host lists them in PULUMI_CONFIG_SECRET_KEYS)."""
    name = project["name"]
    declared: Mapping[str, Mapping[str, Any]] = project.get("config") or {}
    texts: dict[str, tuple[str, bool]] = {}
    for key, value in stack_config.items():
        qualified = key if ":" in key else f"{name}:{key}"
        texts[qualified] = stack_value_text(qualified, value)

    missing = []
    for key in sorted(declared):
        spec = declared[key] if isinstance(declared[key], Mapping) else {"default": declared[key]}
        qualified = key if ":" in key else f"{name}:{key}"
        if qualified in texts:
            continue
        # A declared `value:` (non-namespaced project values) counts too; `default` wins when both are given.
        if "default" in spec and spec["default"] is not None:
            texts[qualified] = default_text(spec["default"])
        elif "value" in spec and spec["value"] is not None:
            texts[qualified] = default_text(spec["value"])
        elif qualified.startswith(f"{name}:"):
            missing.append(key)
    if missing:
        quoted = [f"'{k}'" for k in missing]
        listed = quoted[0] if len(quoted) == 1 else " ".join([", ".join(quoted[:-1]), "and", quoted[-1]])
        raise EngineConfigError(f"Stack '{stack}' is missing configuration value{'s' if len(missing) > 1 else ''} "
                                f"{listed}")

    for key in sorted(declared):
        spec = declared[key]
        if not isinstance(spec, Mapping) or "type" not in spec:
            continue
        qualified = key if ":" in key else f"{name}:{key}"
        if qualified not in texts:  # another namespace's key, unset and without default: Go skips it as well
            continue
        text, is_object = texts[qualified]
        content = json.loads(text) if is_object else text
        if not _valid(spec["type"], spec.get("items"), content):
            raise EngineConfigError(f"Stack '{stack}' with configuration key '{key}' must be of type "
                                    f"'{_type_name(spec['type'], spec.get('items'))}'")
    return EngineConfig({key: text for key, (text, _) in texts.items()}, frozenset(secret_keys))
