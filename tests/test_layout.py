"""The four wings and their one-way imports, checked by walking every module with `ast`.

core <- search, core <- leaderboard, and cli on top of all three; nothing imports cli;
command modules import the common helpers, never the app; `__init__.py` files import nothing.
Inside core, four rooms stand in layers: basics <- data <- model <- evaluation <- training <-
orchestrators (api, bench, overrides); inside search, four rooms between its basics and its
run: basics <- space <- trials <- propose <- report <- run (driver, tuner, plan); and no
module reaches itself through imports.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "arithsweep"
WINGS = ("core", "search", "leaderboard", "cli")
ALLOWED = {"core": {"core"}, "search": {"core", "search"},
           "leaderboard": {"core", "leaderboard"}, "cli": set(WINGS)}

CORE = PKG / "core"
ROOMS = ("data", "model", "evaluation", "training")  # in import order: each uses those before
# torch-free, shared by every room
BASICS = {"errors", "numbers", "yaml_loader", "hashing", "native", "config", "config_base",
          "model_config", "train_config", "config_checks", "path_checks", "arithmetic"}
ORCHESTRATORS = {"api", "bench", "bench_tiny", "overrides"}  # above all rooms: what the CLI calls
LEVEL = {"basics": 0, **{r: i + 1 for i, r in enumerate(ROOMS)}, "orchestrators": len(ROOMS) + 1}

SEARCH = PKG / "search"
SEARCH_ROOMS = ("space", "trials", "propose", "report")  # in import order, as core's ROOMS
SEARCH_BASICS = {"options", "run_settings", "snapshots", "cluster"}  # below every room
SEARCH_RUN = {"driver", "tuner", "plan"}  # above every room: what the CLI calls
SEARCH_LEVEL = {"basics": 0, **{r: i + 1 for i, r in enumerate(SEARCH_ROOMS)},
                "run": len(SEARCH_ROOMS) + 1}
SEARCH_TOP_MAX = 12  # entries at the search wing's top, files and folders, __init__.py counted


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


def test_every_module_is_installed():
    """Each package (a wing, a room) is listed in pyproject.toml, else a wheel leaves it out."""
    text = (PKG.parent / "pyproject.toml").read_text()
    listed = set(re.findall(r'"([\w.]+)"', re.search(r"^packages = \[(.*?)\]", text,
                                                     re.M | re.S)[1]))
    packages = {".".join(p.parent.relative_to(PKG.parent).parts) for p in PKG.rglob("__init__.py")}
    assert packages <= listed, f"packages missing from pyproject.toml: {sorted(packages - listed)}"


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


def _room_in(parts, rooms, basics, top: set[str], top_name: str) -> str | None:
    """The room of a module or name from its path below its wing: one of `rooms`, "basics",
    `top_name` (the modules above the rooms), or None: no such module."""
    if parts and parts[0] in rooms:
        return parts[0]
    if parts and parts[0] in basics:
        return "basics"
    return top_name if parts and parts[0] in top else None


def _room(parts: tuple[str, ...] | list[str]) -> str | None:
    """A core module's or name's room: ("data", "tasks", "Task") -> "data", ("config",) ->
    "basics", ("api",) -> "orchestrators"; None: none of them."""
    return _room_in(parts, ROOMS, BASICS, ORCHESTRATORS, "orchestrators")


def test_every_core_module_sits_in_a_room():
    """core's top level holds only the shared basics and the orchestrators above the rooms;
    every other module sits one level down in one of the four rooms, so a newcomer sees the
    layers from the file tree."""
    _rooms_only(CORE, ROOMS, BASICS | ORCHESTRATORS)


def _rooms_only(wing: Path, rooms, top: set[str]) -> None:
    """`wing`'s top holds only `top` and `rooms`; every room is a package one level deep."""
    name = wing.name
    loose = sorted(p.stem for p in wing.glob("*.py") if p.stem not in top | {"__init__"})
    assert not loose, f"{name} modules outside the rooms: {loose}"
    dirs = {p.name for p in wing.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert dirs == set(rooms), f"{name}'s packages {sorted(dirs)}, expected the rooms {rooms}"
    for room in rooms:
        assert (wing / room / "__init__.py").is_file(), f"{name}/{room} has no __init__.py"
        deeper = [str(p.relative_to(wing)) for p in (wing / room).rglob("*.py")
                  if p.parent != wing / room]
        assert not deeper, f"{name}/{room} nests further: {deeper}"


@pytest.mark.parametrize("path", sorted(CORE.rglob("*.py")), ids=lambda p: str(p.relative_to(CORE)))
def test_core_rooms_import_one_way(path):
    """A core module imports the basics, its own room and the rooms before its own only, so
    data never needs a model, the model never needs training, and so on: each room can be read
    (and tested) without the ones above it. Moved functions, not hidden imports, keep it so."""
    room = _room(path.relative_to(CORE).with_suffix("").parts)
    if room is None:
        return  # core/__init__.py: a docstring
    for mod in _imports(path):
        parts = mod.split(".")
        if parts[1:2] != ["core"]:
            continue  # other wings: test_imports_run_one_way
        if len(parts) == 2:
            continue  # `from arithsweep.core import x`: x is checked as arithsweep.core.x
        target = _room(parts[2:])
        assert target is not None, f"core/{path.relative_to(CORE)} imports {mod}: no such room"
        assert LEVEL[target] <= LEVEL[room], (
            f"core/{path.relative_to(CORE)} ({room}) imports {mod} ({target}): "
            f"rooms run basics <- {' <- '.join(ROOMS)} <- orchestrators")


def _search_room(parts: tuple[str, ...] | list[str]) -> str | None:
    """The room of a search module or name, from its path below search: ("trials", "packs")
    -> "trials", ("options", "SearchOptions") -> "basics", ("driver",) -> "run"; None: no
    such module (an old, moved name: inside the package only the new names are imported)."""
    return _room_in(parts, SEARCH_ROOMS, SEARCH_BASICS, SEARCH_RUN, "run")


def test_every_search_module_sits_in_a_room():
    """The search wing's top holds at most 12 entries: the run (driver, tuner, plan), the
    basics every room stands on, and the four rooms, each one level deep with an `__init__`
    whose docstring says its job (what test_package_docstrings_name_every_module checks
    names its modules)."""
    top = sorted(p.name for p in SEARCH.iterdir() if p.name != "__pycache__")
    assert len(top) <= SEARCH_TOP_MAX, f"search/ holds {len(top)} entries: {top}"
    _rooms_only(SEARCH, SEARCH_ROOMS, SEARCH_BASICS | SEARCH_RUN)
    for room in SEARCH_ROOMS:
        init = SEARCH / room / "__init__.py"
        assert len(ast.get_docstring(ast.parse(init.read_text())) or "") > 80, (
            f"search/{room}/__init__.py does not say its job")


@pytest.mark.parametrize("path", sorted(SEARCH.rglob("*.py")),
                         ids=lambda p: str(p.relative_to(SEARCH)))
def test_search_rooms_import_one_way(path):
    """A search module imports the wing's basics, its own room and the rooms below its own
    only: a space is read without trials, a trial runs without the searcher, the searcher
    proposes without the report, and only the run (driver, tuner, plan) wires them all."""
    room = _search_room(path.relative_to(SEARCH).with_suffix("").parts)
    if room is None:
        return  # search/__init__.py: a docstring (and the moved-module table)
    for mod in _imports(path):
        parts = mod.split(".")
        if parts[1:2] != ["search"] or len(parts) == 2:
            continue  # other wings: test_imports_run_one_way; the package: its names below
        target = _search_room(parts[2:])
        assert target is not None, f"search/{path.relative_to(SEARCH)} imports {mod}: no such room"
        assert SEARCH_LEVEL[target] <= SEARCH_LEVEL[room], (
            f"search/{path.relative_to(SEARCH)} ({room}) imports {mod} ({target}): rooms run "
            f"basics <- {' <- '.join(SEARCH_ROOMS)} <- run")


def test_nothing_imports_the_app_but_its_entry_points():
    for path in _modules():
        if path.parent.name == "cli" and path.name == "app.py":
            continue
        bad = [m for m in _imports(path) if m.startswith("arithsweep.cli.app")]
        assert not bad or path.name == "__main__.py", f"{path}: imports {bad}"


# What the search wing's __init__ may import: the standard library its moved-module table needs
# (old module names a search made before the rooms pickled), nothing of ours, nothing heavy.
INIT_IMPORTS = {SEARCH / "__init__.py": {"importlib", "importlib.machinery", "sys"}}


def test_init_files_import_nothing():
    for path in PKG.rglob("__init__.py"):
        tree = ast.parse(path.read_text())
        imports = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imports |= {n.module or "." for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        extra = imports - INIT_IMPORTS.get(path, set())
        assert not extra, f"{path} imports {sorted(extra)} at package load"


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


def test_no_import_circles():
    """No arithsweep module reaches itself through imports, function-level ones included (a DFS
    over the `ast` graph of the whole package): inside each wing and each core room the modules
    stand in layers (core.training: population -> step -> train -> recipe, leaderboard:
    publish -> projects), so a newcomer can read them bottom-up."""
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


@pytest.mark.parametrize("init", sorted(PKG.rglob("__init__.py")),
                         ids=lambda p: str(p.parent.relative_to(PKG.parent)))
def test_package_docstrings_name_every_module(init):
    """Each package's docstring names every module and subpackage in it, so that the map a
    newcomer reads first is the house as it is (a module added without a line there fails)."""
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    here = [p.stem for p in init.parent.glob("*.py")
            if p.name not in ("__init__.py", "__main__.py")]
    here += [p.name for p in init.parent.iterdir() if (p / "__init__.py").is_file()]
    missing = sorted(n for n in here if not re.search(rf"\b{re.escape(n)}\b", doc))
    assert not missing, f"{init.relative_to(PKG.parent)}'s docstring does not name {missing}"
