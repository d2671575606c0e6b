"""The floors of infra/, read from the code's own imports: every import of one project module by another counts,
at the top, inside a function and under TYPE_CHECKING alike, so no import can hide an upward one.

  core < components < backends < the stack's wiring (infra/stack.py, run by the root __main__.py) and the job SDK
  (infra/jobs.py) < preview < cli < `python -m infra` (infra/__main__.py)

A floor imports only its own floor and those below; no files import each other in a circle; a backend's folder
never imports another backend's. Beside infra: training (the runtime shipped to the cluster) imports neither infra
nor devtools, so infra may use training's modules; devtools (the developer's machine) builds on both and nothing
imports it.
"""
import ast

from infra import REPO_ROOT

# The floors from the ground up; a file takes the floor of its longest matching prefix (folder or file).
FLOORS = {
    "infra/__init__.py": 0,  # the package's face: REPO_ROOT
    "infra/core/": 1,
    "infra/components/": 2,
    "infra/backends/": 3,
    "__main__.py": 4,  # the Pulumi program: runs the stack
    "infra/stack.py": 4,  # the stack's wiring: components, then the stack's backend
    "infra/jobs.py": 4,  # the job SDK: the job and data verbs over typed inputs, for the CLI, tests and tools
    "infra/policy/": 4,  # the CrossGuard pack: a program of its own over core/security/resources.py
    "infra/preview/": 5,
    "infra/cli/": 6,
    "infra/__main__.py": 7,
}
BACKEND_FOLDERS = ("infra/backends/batch/", "infra/backends/azureml/")


def project_files() -> list[str]:
    files = ["__main__.py"] + [p.relative_to(REPO_ROOT).as_posix() for top in ("infra", "training", "devtools")
                               for p in sorted((REPO_ROOT / top).rglob("*.py"))]
    return files


def module_file(module: str) -> str | None:
    """The project file a dotted module name loads, or None (not the project's)."""
    base = REPO_ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate.relative_to(REPO_ROOT).as_posix()
    return None


def imports_of(path: str) -> list[tuple[str, int, bool]]:
    """(file imported, line, inside a function) for every import of a project file, wherever it stands."""
    tree = ast.parse((REPO_ROOT / path).read_text(), path)
    package = path.rsplit("/", 1)[0].replace("/", ".") if "/" in path else ""
    if path.endswith("__init__.py"):
        package = path[: -len("/__init__.py")].replace("/", ".")
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    parent = ".".join(parts[: len(parts) - child.level + 1])
                    base = f"{parent}.{base}" if base else parent
                # `from pkg import mod` imports the module pkg/mod.py; `from pkg import name`, pkg itself.
                names = [f"{base}.{alias.name}" if module_file(f"{base}.{alias.name}") else base
                         for alias in child.names]
            for name in dict.fromkeys(names):
                target = module_file(name)
                if target and target != path:
                    found.append((target, child.lineno, in_function))
            visit(child, inner)

    visit(tree, False)
    return found


def floor(path: str) -> int | None:
    matches = [prefix for prefix in FLOORS if path == prefix or (prefix.endswith("/") and path.startswith(prefix))]
    return FLOORS[max(matches, key=len)] if matches else None


def infra_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in project_files():
        if floor(path) is not None:
            graph[path] = {target for target, _, _ in imports_of(path) if floor(target) is not None}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one file (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def upward_imports() -> list[str]:
    found = []
    for path in project_files():
        own = floor(path)
        if own is None:
            continue
        for target, line, in_function in imports_of(path):
            if floor(target) is not None and floor(target) > own:
                found.append(f"{path} imports {target}")
    return found


def test_every_infra_file_has_a_floor():
    assert not [p for p in project_files() if p.startswith("infra/") and floor(p) is None]


def test_no_import_runs_upward():
    found = upward_imports()
    assert not found, "\n".join(found)


def test_no_circle_among_infra_files():
    found = circles(infra_graph())
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_a_backend_never_imports_another():
    found = []
    for path in project_files():
        own = next((f for f in BACKEND_FOLDERS if path.startswith(f)), None)
        if own:
            found += [f"{path}:{line} imports {target}" for target, line, _ in imports_of(path)
                      if target.startswith(BACKEND_FOLDERS) and not target.startswith(own)]
    assert not found, found


def test_training_imports_neither_infra_nor_devtools():
    found = [f"{path}:{line} imports {target}" for path in project_files() if path.startswith("training/")
             for target, line, _ in imports_of(path) if target.startswith(("infra/", "devtools/", "__main__"))]
    assert not found, found


def test_nothing_imports_devtools_but_devtools():
    found = [f"{path}:{line} imports {target}" for path in project_files() if not path.startswith("devtools/")
             for target, line, _ in imports_of(path) if target.startswith("devtools/")]
    assert not found, found


def test_the_reader_sees_imports_everywhere():
    """The counting itself: top level, inside functions and under TYPE_CHECKING."""
    found = {(target, in_function) for target, _, in_function in imports_of("infra/backends/__init__.py")}
    assert ("infra/backends/batch/backend.py", False) in found
    assert any(target.startswith("infra/core/") for target, _ in found)  # TYPE_CHECKING's StackConfig
    assert any(in_function for path in project_files() if path.startswith("infra/cli/")
               for _, _, in_function in imports_of(path))
    assert floor("infra/backends/batch/spec.py") == 3 and floor("infra/__main__.py") == 7


def test_every_import_of_the_project_names_a_module_it_has():
    """An import of a module that is gone (one under TYPE_CHECKING never fails at run time) would hide an arrow."""
    found = []
    for path in project_files():
        for node in ast.walk(ast.parse((REPO_ROOT / path).read_text(), path)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            found += [f"{path}:{node.lineno} imports {name}" for name in names
                      if name.split(".")[0] in ("infra", "training", "devtools") and not module_file(name)]
    assert not found, found


def test_argparse_never_reaches_a_backend():
    """The command line parses; the backends take the job verbs' typed inputs (infra/backends/verbs.py), so argparse
    is named nowhere under infra/backends: no import of it, no name or attribute `argparse` or `Namespace`, in code
    or in a quoted annotation."""
    found = []
    for path in project_files():
        if not path.startswith("infra/backends/"):
            continue
        tree = ast.parse((REPO_ROOT / path).read_text(), path)
        quoted = [ast.parse(node.value, mode="eval") for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and "Namespace" in node.value
                  and node.value.replace(".", "").replace("_", "").isalnum()]
        for node in [n for t in (tree, *quoted) for n in ast.walk(t)]:
            named = []
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                named = [node.module or "", *(alias.name for alias in node.names)]
            elif isinstance(node, ast.Name):
                named = [node.id]
            elif isinstance(node, ast.Attribute):
                named = [node.attr]
            found += [f"{path}:{getattr(node, 'lineno', '?')} names {name}" for name in named
                      if name.split(".")[0] in ("argparse", "Namespace")]
    assert not found, found
