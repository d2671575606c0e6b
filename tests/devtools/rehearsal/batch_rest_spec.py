"""The Batch REST spec's response schemas, for checking what the rehearsal's Batch endpoint answers
(devtools/rehearsal/batch_endpoint.py records every answer in `responses`).

The schemas are the spec's own definitions, vendored trimmed in batch_rest_spec_2025-06-01.json (its
`_provenance`: Azure/azure-rest-api-specs, BatchService.json of api-version 2025-06-01, the version azure-batch
15.1.0 sends), turned from Swagger 2.0 into JSON Schema here:
- `$ref: #/definitions/X` stays (the definitions are the schema's own); a $ref to a definition not vendored
  becomes `false`: the emulator never sends that property, and if it ever does the check fails until it is copied;
- `readOnly` is dropped (it says who writes a property, not what a response may hold);
- every object takes only the properties its definition declares, plus `odata.metadata`, which every Batch JSON
  response carries: a misspelt or invented key fails (Swagger allows extra keys; this check is stricter on
  purpose: the emulator's JSON is ours, the spec's names are Batch's);
- formats: date-time (ISO 8601), uri (scheme and host, or a bare host as registryServer's default),
  int32 (range) are checked; others (duration, arm-id, password) are not.
"""
from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from urllib.parse import urlparse

import jsonschema

SPEC_FILE = Path(__file__).with_name("batch_rest_spec_2025-06-01.json")
ODATA_KEYS = {"odata.metadata"}


def _convert(node, vendored: set[str]):
    if isinstance(node, dict):
        if "$ref" in node:
            name = node["$ref"].removeprefix("#/definitions/")
            return {"$ref": node["$ref"]} if name in vendored else False
        out = {key: _convert(value, vendored) for key, value in node.items() if key != "readOnly"}
        if out.get("type") == "object" and "properties" in out:
            out["propertyNames"] = {"enum": sorted(set(out["properties"]) | ODATA_KEYS)}
        return out
    if isinstance(node, list):
        return [_convert(item, vendored) for item in node]
    return node


def definitions() -> dict:
    spec = json.loads(SPEC_FILE.read_text())["definitions"]
    return {name: _convert(schema, set(spec)) for name, schema in spec.items()}


_FORMATS = jsonschema.FormatChecker(formats=())


@_FORMATS.checks("date-time")
def _date_time(value) -> bool:
    return not isinstance(value, str) or (bool(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)",
                                                             value)) and bool(datetime.fromisoformat(value)))


@_FORMATS.checks("uri")
def _uri(value) -> bool:
    if not isinstance(value, str):
        return True
    # The spec's own default for a "uri" property, ContainerRegistryReference.registryServer, is "docker.io": a
    # bare host name passes too (what Batch's container docs write: myregistry.azurecr.io).
    parsed = urlparse(value)
    return bool(parsed.scheme and parsed.netloc) or bool(re.fullmatch(r"[A-Za-z0-9.-]+(:\d+)?(/\S*)?", value))


@_FORMATS.checks("int32")
def _int32(value) -> bool:
    return not isinstance(value, int) or -2**31 <= value < 2**31


def schema_for(method: str, path: str, status: int) -> str | None:
    """The definition the spec gives the answer's JSON body (None: the answer has none, e.g. a file's bytes)."""
    parts = [p for p in path.split("/") if p]
    if status >= 400:
        return "BatchError"
    if method != "GET" or status != 200:
        return None
    if parts == ["jobs"]:
        return "BatchJobListResult"
    if len(parts) == 2:
        return {"jobs": "BatchJob", "pools": "BatchPool"}.get(parts[0])
    if len(parts) == 3 and parts[0] == "pools" and parts[2] == "nodes":
        return "BatchNodeListResult"
    if len(parts) == 4 and parts[0] == "jobs" and parts[2] == "tasks":
        return "BatchTask"
    if len(parts) == 5 and parts[0] == "jobs" and parts[2] == "tasks" and parts[4] == "subtasksinfo":
        return "BatchTaskListSubtasksResult"
    return None


def violations(responses: list[tuple[str, str, int, bytes]]) -> list[str]:
    """One line per answer whose JSON body breaks its spec definition; [] when all conform."""
    defs = definitions()
    found = []
    for method, path, status, body in responses:
        name = schema_for(method, path, status)
        if name is None:
            continue
        schema = {"$ref": f"#/definitions/{name}", "definitions": defs}
        for error in jsonschema.Draft7Validator(schema, format_checker=_FORMATS).iter_errors(json.loads(body)):
            found.append(f"{method} {path} -> {status} ({name}) at /{'/'.join(map(str, error.absolute_path))}: "
                         f"{error.message}")
    return found
