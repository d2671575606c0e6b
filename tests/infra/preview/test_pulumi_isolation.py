"""Pulumi's private runtime names stay behind infra/preview/pulumi_private.py: no other module of the project's code
imports a Pulumi runtime submodule or names an attribute outside `pulumi.runtime.__all__`, so a Pulumi upgrade has
one module to check (test_pulumi_private.py checks its names against the pinned version)."""
import ast

import pulumi.runtime

from infra import REPO_ROOT

WRAPPER = REPO_ROOT / "infra" / "preview" / "pulumi_private.py"
PUBLIC = set(pulumi.runtime.__all__)
CODE_DIRS = ("infra", "training", "devtools")  # the project's code; tests may reach further on purpose


def _private_uses(path):
    """(line, what) for each private Pulumi runtime name the module's code names."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("pulumi.runtime."):  # a submodule: its names are not the public API
                found.append((node.lineno, f"from {node.module} import ..."))
            elif node.module == "pulumi.runtime":
                found += [(node.lineno, f"pulumi.runtime.{a.name}") for a in node.names if a.name not in PUBLIC]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name.startswith("pulumi.runtime.")]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
              and node.value.attr == "runtime" and isinstance(node.value.value, ast.Name)
              and node.value.value.id == "pulumi" and node.attr not in PUBLIC):
            found.append((node.lineno, f"pulumi.runtime.{node.attr}"))
    return found


def test_only_pulumi_private_names_private_pulumi_runtime_names():
    offenders = [f"{path.relative_to(REPO_ROOT)}:{line}: {what}"
                 for folder in CODE_DIRS for path in sorted((REPO_ROOT / folder).rglob("*.py"))
                 if path != WRAPPER for line, what in _private_uses(path)]
    assert not offenders, ("private Pulumi runtime names outside infra/preview/pulumi_private.py (move them there, "
                           "with a check in tests/infra/preview/test_pulumi_private.py): " + "; ".join(offenders))


def test_the_check_sees_a_private_use(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import pulumi\nfrom pulumi.runtime.settings import SETTINGS\n"
                      "from pulumi.runtime import mocks, set_mocks\nx = pulumi.runtime._sync_await\n"
                      "y = pulumi.runtime.set_all_config\n")
    assert _private_uses(sample) == [(2, "from pulumi.runtime.settings import ..."), (3, "pulumi.runtime.mocks"),
                                     (4, "pulumi.runtime._sync_await")]
    assert _private_uses(WRAPPER), "pulumi_private.py itself names private ones: the check must see them"
