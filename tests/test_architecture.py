"""The package's shape: no import cycles, no private names across modules, registries that reject duplicates."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tour_pyserini.errors import UserError
from tour_pyserini.registry import Registry

PACKAGE = Path(__file__).resolve().parents[1] / "tour_pyserini"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[tuple[str, str | None]]:
    """(module, imported name or None) for every import statement anywhere in the file, within the package."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {(a.name, None) for a in node.names if a.name.startswith("tour_pyserini")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tour_pyserini"):
            for alias in node.names:  # `from pkg import module` imports the module itself
                sub = f"{node.module}.{alias.name}"
                found.add((sub, None) if sub in modules else (node.module, alias.name))
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[tuple[str, str | None]]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imports(path, set(files)) for name, path in files.items()}


def test_no_import_cycles(graph):
    edges = {m: {target for target, _ in targets if target in graph and target != m} for m, targets in graph.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                cycle = path[path.index(target) :] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def room(module: str) -> str:
    """The room a module belongs to: its subpackage, or a top-level module on its own. A subpackage's
    ``__main__`` (``python -m tour_pyserini.index``) is a command's entry point, so it is in ``commands``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "tour_pyserini"  # the package's own __init__: the facade over every room
    return "commands" if parts[-1] == "__main__" else parts[1]


def test_rooms_import_each_other_without_a_cycle(graph):
    """No arrow runs back up between rooms, function-local imports counted (``imports`` reads every one)."""
    edges: dict[str, set[str]] = {}
    for module, targets in graph.items():
        for target, _ in targets:
            if target in graph and room(target) != room(module):
                edges.setdefault(room(module), set()).add(room(target))
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                pytest.fail("rooms import in a circle: " + " -> ".join(path[path.index(target) :] + [target]))
            if target not in state:
                visit(target, path + [target])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


BASE = {"errors", "numbers", "registry", "results", "devices", "_java"}  # the plain modules every room may use
# the layers, bottom up: a room imports only rooms of its own layer or below (docs/architecture.md draws them)
LAYERS = [
    ("base", BASE),
    ("files", {"files"}),
    ("backends", {"runtime", "encoders", "index"}),
    ("scoring", {"teachers", "eval", "answer"}),
    ("methods", {"ttt", "rewriters"}),
    ("search", {"search"}),
    ("composition", {"pipeline"}),
    ("faces", {"serve", "pyterrier", "training", "experiments"}),
    ("commands", {"commands", "tour_pyserini"}),
]
LAYER = {room: i for i, (_, rooms) in enumerate(LAYERS) for room in rooms}


def test_every_room_imports_only_its_layer_and_the_layers_below(graph):
    rooms = {room(m) for m in graph}
    assert rooms <= set(LAYER), f"rooms no layer holds: {sorted(rooms - set(LAYER))}"
    upward = sorted(
        f"{m} ({LAYERS[LAYER[room(m)]][0]}) imports {t} ({LAYERS[LAYER[room(t)]][0]})"
        for m, targets in graph.items()
        for t, _ in targets
        if t in graph and LAYER[room(t)] > LAYER[room(m)]
    )
    assert not upward


# what makes a search system's parts; outside their own rooms only the composition root may call them
ASSEMBLERS = {"get_teacher", "TeacherContext", "get_rewriter", "ScoreStore", "StoredTeacher"}


def test_only_the_composition_root_assembles_teachers_rewriters_and_stores():
    makers = {"teachers", "rewriters", "pipeline"}
    calls = sorted(
        f"{path.relative_to(PACKAGE)}:{node.lineno} calls {name}"
        for path in PACKAGE.rglob("*.py")
        if room(module_name(path)) not in makers
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and (name := getattr(node.func, "id", getattr(node.func, "attr", None))) in ASSEMBLERS
    )
    assert not calls


# benchmarks that still assemble their searches by hand, each to become a configuration of the experiment runner;
# the list only shrinks: a benchmark assembles through the composition root, as tour_pyserini/experiments does
BENCH_BY_HAND = {
    "ttt.py",
}


def test_benchmarks_assemble_searches_through_the_composition_root():
    from tour_pyserini.rewriters import available_rewriters

    rewriter_classes = {cls.__name__ for cls in available_rewriters().values()}
    by_hand = set()
    for path in (PACKAGE.parent / "bench").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            called = isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None))
            imported = isinstance(node, ast.ImportFrom) and {a.name for a in node.names} & rewriter_classes
            if called in ASSEMBLERS or imported:
                by_hand.add(path.name)
    assert by_hand == BENCH_BY_HAND


def test_no_function_is_longer_than_80_lines():
    long = sorted(
        f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > 80
    )
    assert not long


def test_the_top_level_holds_at_most_six_plain_modules_and_no_command():
    plain = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(plain) <= 6, plain
    assert not [name for name in plain if "def main(" in (PACKAGE / name).read_text()]


def test_only_commands_parse_flags():
    """Library code takes typed options: argparse appears in commands/ and the ``__main__`` entry points only."""
    library = [p for p in PACKAGE.rglob("*.py") if room(module_name(p)) != "commands"]
    assert not sorted(str(p.relative_to(PACKAGE)) for p in library if "argparse" in p.read_text())


def test_no_private_names_imported_across_modules(graph):
    private = sorted(
        f"{m} imports {t}.{name}"
        for m, targets in graph.items()
        for t, name in targets
        if name and name.startswith("_")
    )
    assert not private


def test_rewriters_do_not_import_the_searcher(graph):
    rewriters = [m for m in graph if m.startswith("tour_pyserini.rewriters")]
    assert not [(m, t) for m in rewriters for t, _ in graph[m] if t.startswith("tour_pyserini.search")]
    bm25 = {t for t, _ in graph["tour_pyserini.search.bm25"]}
    assert not [t for t in bm25 if t.startswith(("tour_pyserini.rewriters", "tour_pyserini.search.searcher"))]


def test_registry_rejects_a_second_class_under_one_name():
    registry = Registry("widget", "tour_pyserini.rewriters")

    @registry.register
    class First:
        name = "same"

    registry.register(First)  # the same class again (a re-imported module) is fine

    class Second:
        name = "same"

    with pytest.raises(ValueError, match="widget 'same' is registered twice"):
        registry.register(Second)


def test_unknown_names_are_user_errors():
    from tour_pyserini.rewriters import get_rewriter
    from tour_pyserini.teachers import get_teacher

    with pytest.raises(UserError, match="unknown rewriter 'tuor'; choose one of: avg-prf, dart, none, refit, rerank"):
        get_rewriter("tuor")
    with pytest.raises(UserError, match="unknown teacher 'colbert'"):
        get_teacher("colbert")


def test_an_internal_key_error_keeps_its_traceback():
    """Only user errors become one line and exit 2; a bug (here a KeyError) propagates with its traceback."""
    from tour_pyserini.commands.runner import run_cli

    def buggy(argv):
        return {}["missing"]

    def bad_input(argv):
        raise UserError("bad flag")

    with pytest.raises(KeyError):
        run_cli(buggy, [])
    with pytest.raises(SystemExit) as exit_info:
        run_cli(bad_input, [])
    assert exit_info.value.code == 2
