"""The four wings and their one-way imports, checked by walking every module with `ast`.

core <- search, core <- leaderboard, and cli on top of all three; nothing imports cli;
command modules import the common helpers, never the app; `__init__.py` files import nothing.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "arithsweep"
WINGS = ("core", "search", "leaderboard", "cli")
ALLOWED = {"core": {"core"}, "search": {"core", "search"},
           "leaderboard": {"core", "leaderboard"}, "cli": set(WINGS)}


def _imports(path: Path) -> list[str]:
    """Every absolute module an arithsweep file imports (function-level imports included)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return [m for m in out if m == "arithsweep" or m.startswith("arithsweep.")]


def _modules() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def test_every_module_sits_in_a_wing():
    loose = [p.name for p in PKG.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert not loose, f"modules outside the wings: {loose}"
    assert {p.name for p in PKG.iterdir() if p.is_dir() and p.name != "__pycache__"} >= set(WINGS)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_imports_run_one_way(path):
    parts = path.relative_to(PKG).parts
    wing = parts[0] if len(parts) > 1 else None
    for mod in _imports(path):
        target = mod.split(".")[1] if "." in mod else None
        if target not in WINGS:
            continue  # the package root (__version__) is fine from anywhere
        if wing is None:
            assert path.name == "__main__.py" and target == "cli", (path, mod)
            continue
        assert target in ALLOWED[wing], f"{path.relative_to(PKG)}: {wing} imports {mod}"


def test_nothing_imports_the_app_but_its_entry_points():
    for path in _modules():
        if path.parent.name == "cli" and path.name == "app.py":
            continue
        bad = [m for m in _imports(path) if m.startswith("arithsweep.cli.app")]
        assert not bad or path.name == "__main__.py", f"{path}: imports {bad}"


def test_init_files_import_nothing():
    for path in PKG.rglob("__init__.py"):
        tree = ast.parse(path.read_text())
        imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert not imports, f"{path} imports at package load"


def test_fast_paths_load_no_heavy_library(tmp_path):
    """`arithsweep --help` and `arithsweep leaderboard` import neither torch, ray nor mlflow."""
    code = (
        "import sys\n"
        "from arithsweep.cli.app import main\n"
        "sys.argv = ['arithsweep', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = {'torch', 'ray', 'mlflow'} & set(sys.modules)\n"
        "print('HEAVY', sorted(heavy), file=sys.stderr)\n"
    )
    for argv in (["--help"], ["leaderboard", "--db", str(tmp_path / "none.db")]):
        r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
        assert "HEAVY []" in r.stderr, (argv, r.stderr[-2000:])


def _module_graph() -> dict[str, set[str]]:
    """arithsweep module -> the arithsweep modules it imports (any level, any wing)."""
    names = {".".join(p.relative_to(PKG.parent).with_suffix("").parts): p for p in _modules()}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        # `from arithsweep.core import weights` names a module too, not only a package
        graph[name] = {m for m in _imports(path) if m in names and m != name}
    return graph


def test_no_import_circles_inside_the_wings():
    """No module reaches itself through imports, function-level ones included: each wing's
    modules stand in layers (core: population -> step -> train, leaderboard: publish ->
    projects), so a newcomer can read them bottom-up."""
    graph = _module_graph()
    done: set[str] = set()

    def visit(node: str, stack: list[str]) -> None:
        if node in stack:
            cycle = stack[stack.index(node):] + [node]
            raise AssertionError("import circle: " + " -> ".join(cycle))
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            if not nxt.endswith("__init__"):
                visit(nxt, [*stack, node])
        done.add(node)

    for module in sorted(graph):
        visit(module, [])
