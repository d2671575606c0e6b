"""The layout's promises: pure modules import no Pulumi and no Azure client, the runtime runner no framework."""
import pkgutil
import subprocess
import sys

import pytest

import infra.core
from infra import REPO_ROOT

CORE = sorted(m.name for m in pkgutil.walk_packages(infra.core.__path__, "infra.core."))
# The backends' pure parts: the jobs as data and the NFS server's user data, built without Pulumi or an Azure client.
PURE_BACKEND = ["infra.backends", "infra.backends.declared", "infra.backends.shared", "infra.backends.batch.spec",
                "infra.backends.batch.nfs_user_data", "infra.backends.azureml.job"]
HEAVY = ("pulumi", "pulumi_azure_native", "pulumi_docker_build", "azure", "infra.components", "infra.cli", "torch",
         "tensorflow")


def imported_by(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return set(result.stdout.split())


@pytest.mark.parametrize("module", [*CORE, *PURE_BACKEND, "training.runner", "training.config", "training.report"])
def test_pure_modules_import_nothing_heavy(module):
    loaded = imported_by(module)
    assert not {name for name in loaded if name.split(".")[0] in HEAVY or name.startswith(HEAVY[4:6])}, module


def test_core_covers_the_pure_logic():
    assert {"infra.core.config.stack", "infra.core.security.resources", "infra.core.containers", "infra.core.cost",
            "infra.core.skus"} <= set(CORE)


def test_every_repository_path_a_file_cites_exists():
    """Comments, Dockerfiles, requirements and README name files by path; a move must carry them along."""
    import re

    tracked = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    cited = re.compile(r"\b((?:infra|training|devtools|images|tests)/[\w/.-]+\.(?:py|txt|sh|yaml|Dockerfile))\b")
    missing = set()
    for name in tracked:
        if not name.endswith((".py", ".txt", ".md", ".sh", ".Dockerfile", ".yaml", "Makefile")):
            continue
        for path in cited.findall((REPO_ROOT / name).read_text(errors="replace")):
            if not (REPO_ROOT / path).exists():
                missing.add(f"{name} cites {path}")
    assert not missing, sorted(missing)


def test_infra_imports_nothing_from_devtools():
    """The layout's one direction: devtools (the rehearsal among them) builds on infra, never the reverse, lazy
    imports inside functions included; `python -m infra rehearse` runs `python -m devtools rehearse` as a program."""
    import ast

    found = []
    for path in sorted((REPO_ROOT / "infra").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(REPO_ROOT)}:{node.lineno} imports {n}" for n in names
                      if n.split(".")[0] == "devtools"]
    assert not found, found


def test_infra_rehearse_runs_devtools_rehearse():
    result = subprocess.run([sys.executable, "-m", "infra", "rehearse", "--help"], cwd="/", capture_output=True,
                            text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)})
    assert result.returncode == 0 and result.stdout.startswith("usage: python -m devtools rehearse"), result
