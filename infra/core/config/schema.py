"""What a stack config key is and may be: the error every check raises, the keys' types as Pulumi.yaml declares
them, their bounds and allowed values (written once), and the checks the sections and the loader share.

The floor under the config's sections (sections.py) and its loading (stack.py): it imports neither.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

# From the backends table: the `backend` key's values.
from infra.core.backend_facts import BACKENDS
from training import frameworks

# From the frameworks table (training/frameworks.py): the frameworks key lists images (one per framework, or
# shared: keras runs in the tensorflow image); trainingFramework is a row.
IMAGES = tuple(image.name for image in frameworks.images())
IMAGE_OF_LOOP = {f.name: f.image.name for f in frameworks.FRAMEWORKS.values()}  # trainingFramework -> image
SHARED_IMAGES = "; ".join(f"{f.name} runs in the {f.image.name} image" for f in frameworks.FRAMEWORKS.values()
                          if f.name != f.image.name)
# Keys a stack file may still hold under an older name: the line that says what to write instead, and why.
RENAMED_KEYS = {
    # https://github.com/Azure/Batch/issues/196 (Low-Priority compute nodes migration to Spot-based compute nodes,
    # March 2026): Batch allocates low-priority nodes as Spot VMs, and the API's low-priority properties now mean
    # Spot; Azure ML retired low priority on 2026-03-31 and its low-priority clusters run on Spot VMs
    # (MicrosoftDocs/azure-ai-docs pull 806, how-to-manage-optimize-cost).
    "lowPriority": "renamed to spot: Azure now allocates low-priority nodes as Spot VMs (variable Spot rate, "
                   "evictable) on both backends (Azure/Batch issue 196); write spot: true or spot: false",
}
# ARM principalType of whoever runs `pulumi up` (its data-plane grants): the client config cannot tell, and a
# wrong one is refused (UnmatchedPrincipalType); azure-native sends User when none is given.
DEPLOYER_PRINCIPAL_TYPES = ("User", "ServicePrincipal")


class Range(NamedTuple):
    """Inclusive bounds of a whole-number key; `unit` follows them in the error message."""
    low: int
    high: int
    unit: str = ""

    def __str__(self) -> str:
        return f"{self.low}-{self.high}"  # as the messages and Pulumi.yaml's descriptions write it


# Azure Policy's built-in "Storage SAS tokens should adhere to 7 day maximum validity" (Deny by default; github:
# Azure/azure-policy built-in-policies/policyDefinitions/Storage/EnforceStorageSasMaxExpiration7Days_Deny.json,
# /providers/Microsoft.Authorization/policyDefinitions/7aa1c9d5-3d7e-4579-8117-d85e99211757) refuses a storage
# account whose SAS expiration policy allows more than 7 days (security/sas.py checks the account against it), so
# sasExpiryHours, the SAS lifetime and the accounts' period, is bounded by the same 7 days.
ORG_SAS_POLICY_HOURS = 7 * 24

# Bounds and allowed values, written once: the sections' validators (config/sections.py) read them, and
# Pulumi.yaml's description of each key states them (its config schema cannot hold ranges);
# tests/infra/core/config/test_bounds.py checks they agree.
RANGES = {
    "team": Range(2, 12, " characters"),  # its length: it goes into storage account and registry names
    "maxNodes": Range(1, 100),  # Batch pools go higher, but beyond this a typo is likelier than a plan
    # Bounded: a leaked SAS dies on its own within 7 days, the most Azure Policy's SAS built-in lets the storage
    # accounts' expiration policy (Block) allow (ORG_SAS_POLICY_HOURS above says why).
    "sasExpiryHours": Range(1, ORG_SAS_POLICY_HOURS, " hours"),
    "logRetentionDays": Range(30, 730, " days"),  # what Log Analytics accepts on the PerGB2018 tier
    "nfsDiskCount": Range(1, 16),
    "trainingRetries": Range(0, 10),
    "trainingMaxHours": Range(1, 168, " hours"),  # Batch's task maxWallClockTime; a week at most
    "trainingDataWaitMinutes": Range(5, 1440, " minutes"),
    # How long a job waits for all its nodes (infra/backends/batch/allocation.py): above 3 evaluation intervals of
    # the pool's autoscale formula, whose give-back reads that many minutes of samples; at most 4 hours.
    "allocationTimeoutMinutes": Range(15, 240, " minutes"),
    "amlIdleMinutes": Range(1, 1440, " minutes"),
    # US dollars a month (cents allowed): at least a dollar; above a million a typo is likelier than a plan.
    "monthlyBudgetUsd": Range(1, 1_000_000, " USD"),
}
NFS_DISK_SIZE_GB = {"vm": Range(32, 4096), "azure-files": Range(100, 102400)}  # azure-files: premium share quota
ALLOWED = {
    "backend": BACKENDS,
    "deployerPrincipalType": DEPLOYER_PRINCIPAL_TYPES,
    "registrySku": ("Basic", "Standard", "Premium"),
    "frameworks": IMAGES,
    "trainingFramework": tuple(IMAGE_OF_LOOP),
    "nfsKind": ("vm", "azure-files"),
    "dataTier": ("node-local", "nfs"),
    "amlDataMode": ("download", "mount"),
    "amlWorkspaceAccess": ("private", "public"),
    "batchPoolAllocation": ("batch-service", "user-subscription"),
}
SAS_EXPIRY_HOURS = RANGES["sasExpiryHours"]  # security/sas.py checks issued SAS against its high end
MAX_NODES_LIMIT = RANGES["maxNodes"].high


class ConfigError(Exception):
    """A stack config value the program refuses; `str()` is the one line shown to the user."""

    def __init__(self, key: str | None, message: str):
        """`key`: a config key, a command-line flag standing in for one (`--args`), or None (the whole file)."""
        self.key = key
        prefix = "" if not key else f"{key}: " if key.startswith("--") else f"config key '{key}': "
        super().__init__(prefix + message)


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: str  # string | integer | boolean | array (of strings)
    default: Any
    description: str


def field_name(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def coerce(key: ConfigKey, value: Any) -> Any:
    """Pulumi hands every value over as a string (arrays as JSON); stack files give YAML types."""
    if key.type == "string":
        if not isinstance(value, str):
            raise ConfigError(key.name, f"expected a string, got {value!r}")
        return value
    if key.type == "integer":
        if isinstance(value, bool) or not isinstance(value, (int, str)) or not re.fullmatch(r"-?\d+", str(value)):
            raise ConfigError(key.name, f"expected a whole number, got {value!r}")
        return int(value)
    if key.type == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(key.name, f"expected true or false, got {value!r}")
    if key.type == "array":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ConfigError(key.name, f"expected a list such as [a, b], got {value!r}") from None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ConfigError(key.name, f"expected a list of strings, got {value!r}")
        return tuple(value)
    if key.type == "object":  # a map of names to text (tags); Pulumi hands it over as JSON
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ConfigError(key.name, f"expected a map such as {{costCenter: '1234'}}, got {value!r}") from None
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ConfigError(key.name, f"expected a map of names to text values (quote numbers: '00123'), "
                                        f"got {value!r}")
        return tuple((str(k), v) for k, v in value.items())
    raise ConfigError(key.name, f"Pulumi.yaml declares unsupported type {key.type!r}")


def check_range(key: str, value: int, bounds: Range | None = None) -> int:
    bounds = bounds or RANGES[key]
    if not bounds.low <= value <= bounds.high:
        raise ConfigError(key, f"{value} is outside {bounds}{bounds.unit}")
    return value


def check_one_of(key: str, value: str, why: str = "") -> str:
    if value not in ALLOWED[key]:
        raise ConfigError(key, f"{value!r} is not one of {', '.join(ALLOWED[key])}{why}")
    return value


def sas_expiry_hours_problem(hours: int) -> str | None:
    """Why a sasExpiryHours cannot be the stack's SAS lifetime (None when it can): the account's period, with Block,
    must stay within the built-in's 7 days, and a longer-lived SAS would be blocked by it."""
    if hours <= ORG_SAS_POLICY_HOURS:
        return None
    return (f"{hours} hours is longer than the storage accounts' SAS expiration policy allows: Azure Policy's "
            "built-in \"Storage SAS tokens should adhere to 7 day maximum validity\" (Deny) requires a period of "
            f"7 days or less with expirationAction Block, which blocks any longer SAS; set {ORG_SAS_POLICY_HOURS} or "
            "less (`pulumi up` renews the SAS)")
