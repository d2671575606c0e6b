"""The whole suite: the project root is on sys.path (pytest.ini), and each tests folder runs only where what it
tests can be imported (a bare `pytest` in any environment collects without errors and says what it left out)."""
from importlib.util import find_spec

# tests folder -> (module it needs, the environment that has it)
NEEDS = {
    "infra": ("pulumi", ".venv"),
    "data_path": ("azure.storage.blob", ".venv"),
    "images": ("pulumi", ".venv"),
    "frameworks": ("yaml", "any"),
    "train_pytorch": ("torch", ".venv-torch"),
    "train_tensorflow": ("tensorflow", ".venv-tf"),
}
def _missing(module: str) -> bool:
    try:
        return find_spec(module) is None
    except ModuleNotFoundError:
        return True


LEFT_OUT = {folder: f"needs {module}, which this environment lacks (run it with {env}/bin/python -m pytest)"
            for folder, (module, env) in NEEDS.items() if _missing(module)}


def pytest_ignore_collect(collection_path, config):
    if collection_path.parent.name == "tests" and collection_path.name in LEFT_OUT:
        return True
    return None


def pytest_report_header(config):
    return [f"left out tests/{folder}: {why}" for folder, why in sorted(LEFT_OUT.items())]


def pytest_terminal_summary(terminalreporter):
    for folder, why in sorted(LEFT_OUT.items()):
        terminalreporter.write_line(f"SKIPPED tests/{folder}: {why}")
