"""Bounds written once: infra/core/config/schema.py's RANGES and ALLOWED are what the validators enforce, and
Pulumi.yaml's description of each key (its config schema cannot hold ranges) must state the same, so `pulumi config`
help and the refusals never disagree."""
import re

import pytest

from infra.core.config import stack as config, schema as config_schema

SCHEMA = config.load_schema()
# A whole-number range as the descriptions write it ("1-720"); not a date (2025-09-30) nor part of a longer run.
RANGE_TEXT = re.compile(r"(?<![\d-])(\d+)-(\d+)(?![\d-])")


def stated_ranges(key: str) -> set[tuple[int, int]]:
    return {(int(low), int(high)) for low, high in RANGE_TEXT.findall(SCHEMA[key].description)}


def enforced_ranges(key: str) -> set[tuple[int, int]]:
    if key == "nfsDiskSizeGb":  # one range per nfsKind
        return {(r.low, r.high) for r in config_schema.NFS_DISK_SIZE_GB.values()}
    return {(config_schema.RANGES[key].low, config_schema.RANGES[key].high)} if key in config_schema.RANGES else set()


@pytest.mark.parametrize("key", sorted(SCHEMA))
def test_each_description_states_exactly_the_ranges_the_validator_enforces(key):
    assert stated_ranges(key) == enforced_ranges(key), (key, SCHEMA[key].description)


@pytest.mark.parametrize("key", sorted(config_schema.ALLOWED))
def test_each_description_names_every_allowed_value(key):
    named = set(re.findall(r"[A-Za-z][\w-]*", SCHEMA[key].description))
    assert set(config_schema.ALLOWED[key]) <= named, (key, SCHEMA[key].description)


def test_every_table_key_is_declared():
    assert set(config_schema.RANGES) | set(config_schema.ALLOWED) <= set(SCHEMA)


@pytest.mark.parametrize("key", sorted(config_schema.RANGES))
def test_the_validator_refuses_just_outside_the_table_and_accepts_its_ends(key):
    """The table is what parse enforces, not a copy beside it."""
    bounds = config_schema.RANGES[key]
    base = {"allowedIpRanges": ["20.50.1.7"], "backend": "azureml" if key.startswith("aml") else "batch"}
    if key == "team":
        ok, bad = ("a" * bounds.low, "a" * bounds.high), ("a" * (bounds.low - 1), "a" * (bounds.high + 1))
    else:
        ok, bad = (bounds.low, bounds.high), (bounds.low - 1, bounds.high + 1)
    if SCHEMA[key].type == "string":  # a number the schema declares as text (monthlyBudgetUsd: cents allowed)
        ok, bad = tuple(map(str, ok)), tuple(map(str, bad))
    if key == "monthlyBudgetUsd":
        base["budgetContacts"] = ["ml-platform@example.com"]  # a budget needs its contacts
    for value in ok:
        config.parse("x", {**base, key: value})
    for value in bad:
        with pytest.raises(config_schema.ConfigError) as raised:
            config.parse("x", {**base, key: value})
        assert raised.value.key == key
