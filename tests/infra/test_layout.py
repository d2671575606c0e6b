"""The layout's promises: pure modules import no Pulumi and no Azure client, the runtime runner no framework."""
import pkgutil
import subprocess
import sys

import pytest

import infra.core
from infra import REPO_ROOT

CORE = sorted(f"infra.core.{m.name}" for m in pkgutil.iter_modules(infra.core.__path__))
HEAVY = ("pulumi", "pulumi_azure_native", "pulumi_docker_build", "azure", "infra.components", "infra.cli", "torch",
         "tensorflow")


def imported_by(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return set(result.stdout.split())


@pytest.mark.parametrize("module", [*CORE, "training.runner", "training.config", "training.report"])
def test_pure_modules_import_nothing_heavy(module):
    loaded = imported_by(module)
    assert not {name for name in loaded if name.split(".")[0] in HEAVY or name.startswith(HEAVY[4:6])}, module


def test_core_covers_the_pure_logic():
    assert {"infra.core.config", "infra.core.batch_spec", "infra.core.security", "infra.core.nfs_user_data",
            "infra.core.containers", "infra.core.cost", "infra.core.skus"} <= set(CORE)
