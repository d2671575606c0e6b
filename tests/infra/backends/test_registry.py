"""The backends behind one protocol: every backend the config accepts has its entry, and the typed stack outputs
carry exactly what the program exports (the camelCase names of `pulumi stack output`)."""
import dataclasses

import pytest

from infra.backends import BACKENDS, Backend, Declares, Describes, RunsJobs, backend
from infra.backends.shared import JobError, StackOutputs
from infra.core import backend_facts


@pytest.mark.parametrize("name", backend_facts.BACKENDS)
def test_every_backend_the_config_accepts_is_one_lookup_away(name):
    found = backend(name)
    assert found.name == name and isinstance(found, Backend)
    assert all(isinstance(found, face) for face in (Declares, RunsJobs, Describes))  # what Backend is made of
    assert set(BACKENDS) == set(backend_facts.BACKENDS)


def test_the_typed_outputs_carry_every_export_and_the_verbs_find_theirs(ev):
    field_of = {next(iter(StackOutputs().exports((f.name,)))): f.name for f in dataclasses.fields(StackOutputs)}
    assert set(ev.outputs) <= set(field_of)  # nothing exported that the verbs cannot read
    typed = StackOutputs.from_json(ev.outputs)
    assert typed.exports(tuple(field_of[name] for name in ev.outputs)) == ev.outputs  # and nothing lost on the way
    StackOutputs.require(backend(ev.config.backend).required_outputs, ev.outputs)


def test_outputs_of_an_older_project_are_refused_by_their_camel_case_names():
    with pytest.raises(JobError, match="stack outputs lack poolId, imageRefs: run `pulumi up`"):
        StackOutputs.require(("pool_id", "image_refs"), {"batchAccountEndpoint": "x"})
