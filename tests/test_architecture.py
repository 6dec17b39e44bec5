"""The layout keeps the architecture of docs/ARCHITECTURE.md: which layer may import which, and small modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "hyde_tutor"
FOUNDATION = {"config", "errors", "telemetry"}
# layer -> the layers it may import (the foundation is open to all). Kept in step with docs/ARCHITECTURE.md.
# ``assignment`` is one module, experiment/assignment.py (arms and the per-learner split): it sits below the plugin,
# which asks it for a learner's arm; the rest of experiment/ sits above the plugin and reads what the plugin records.
_SEARCH = {"retrieval", "corpus", "llm", "hyde"}
ALLOWED: dict[str, set[str]] = {
    "retrieval": set(),
    "llm": set(),
    "corpus": {"retrieval"},
    "hyde": {"retrieval", "corpus", "llm"},
    "assignment": set(),
    "plugin": _SEARCH | {"assignment"},
    "evaluation": _SEARCH | {"assignment", "plugin"},
    "experiment": _SEARCH | {"assignment", "plugin", "evaluation"},
    "tutor": _SEARCH | {"assignment", "plugin", "experiment"},
    "server": _SEARCH | {"assignment", "plugin", "evaluation", "experiment", "tutor"},
    "cli": _SEARCH | {"assignment", "plugin", "evaluation", "experiment", "tutor", "server"},
}
FOLDERS = set(ALLOWED) - {"assignment"}
ASSIGNMENT = ("experiment", "assignment")
MAX_MODULE_LINES = 350


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _layer(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    if rel.with_suffix("").parts == ASSIGNMENT:
        return "assignment"
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _layer_of(target: list[str]) -> str:
    return "assignment" if tuple(target[:2]) == ASSIGNMENT else target[0]


def _imported_layers(path: Path, source: str | None = None) -> set[str]:
    """The layers of hyde_tutor that ``path`` imports (relative and absolute imports); ``source`` stands in for
    the file's text."""
    package = list(path.relative_to(PACKAGE).parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8") if source is None else source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = [*base, *(node.module.split(".") if node.module else [])]
                if not target:  # ``from . import x`` at the top: x is the layer
                    found.update(alias.name for alias in node.names)
                elif len(target) == 1:  # ``from ..experiment import x``: x is the module
                    found.update(_layer_of([*target, alias.name]) for alias in node.names)
                else:
                    found.add(_layer_of(target))
            elif node.module and node.module.startswith("hyde_tutor."):
                found.add(_layer_of(node.module.split(".")[1:]))
        elif isinstance(node, ast.Import):
            found.update(_layer_of(a.name.split(".")[1:]) for a in node.names if a.name.startswith("hyde_tutor."))
    return found


def test_the_top_level_holds_only_the_foundation_and_the_layers() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    top = ({p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}) | (folders & FOUNDATION)  # config is a package
    assert top == FOUNDATION
    assert folders - FOUNDATION == FOLDERS


PLUGIN_MODULES = sorted((PACKAGE / "plugin").glob("*.py"))


@pytest.mark.parametrize("path", PLUGIN_MODULES, ids=lambda p: p.name)
def test_the_plugin_reaches_neither_the_experiment_record_nor_the_tutor_nor_the_server(path: Path) -> None:
    """An agent that adds the toolset must not load the event log's SQL store, the A/B statistics, the example
    tutor or the web server: of experiment/, the plugin may import the learner's arm (assignment) only."""
    forbidden = {"experiment", "tutor", "server", "evaluation", "cli"}
    reached = _imported_layers(path) & forbidden
    assert not reached, f"plugin/{path.name} imports {sorted(reached)}"


def test_the_layer_check_sees_an_import_of_the_experiment_store_from_the_plugin() -> None:
    """The check above can fail: an import of the SQL store or the statistics is seen, assignment's is allowed."""
    module = PACKAGE / "plugin" / "toolset.py"
    for line, seen in (("from ..experiment.sqlstore import SqlEventLog", {"experiment"}),
                       ("from ..experiment import abstats", {"experiment"}),
                       ("from hyde_tutor.server.app import create_app", {"server"}),
                       ("from ..experiment.assignment import decide", {"assignment"})):
        assert _imported_layers(module, source=line) == seen, line


def test_an_old_module_path_still_imports_the_moved_module_with_a_warning_naming_the_new_one() -> None:
    import importlib
    import sys

    import hyde_tutor
    from hyde_tutor.experiment import events

    for old, new in hyde_tutor.MOVED_MODULES.items():
        assert (PACKAGE.joinpath(*new.split(".")).with_suffix(".py")).exists(), new
        assert not (PACKAGE.joinpath(*old.split(".")).with_suffix(".py")).exists(), old
    sys.modules.pop("hyde_tutor.plugin.events", None)
    with pytest.warns(DeprecationWarning, match=r"hyde_tutor\.plugin\.events moved to hyde_tutor\.experiment\.events"):
        old = importlib.import_module("hyde_tutor.plugin.events")
    assert old.EventLog is events.EventLog
    with pytest.raises(ImportError):
        importlib.import_module("hyde_tutor.plugin.no_such_module")


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_layer_imports_only_the_layers_below_it(path: Path) -> None:
    layer = _layer(path)
    if path == PACKAGE / "__init__.py":
        return  # the public API re-exports every layer
    allowed = FOUNDATION | {layer} | ALLOWED.get(layer, set())
    if layer == "config":
        allowed = {"config", "errors"}
    if layer in ("errors", "telemetry"):
        allowed = {layer}
    imported = _imported_layers(path)
    assert imported <= allowed, f"{path.relative_to(PACKAGE)} imports {sorted(imported - allowed)}"


def test_no_module_is_over_350_lines() -> None:
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines()) for p in _modules()}
    over = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"


def _private_reaches(path: Path) -> list[str]:
    """``x._name`` on anything but ``self``/``cls``, ``from m import _name``, and imports of private modules
    (``pydantic_ai._utils``): what a module uses of another's internals."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            module = node.module or ""
            if any(part.startswith("_") and not part.startswith("__") for part in module.split(".")):
                found.append(f"line {node.lineno}: from {module} import ...")
            found += [f"line {node.lineno}: import {a.name} from {module or '.'}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names
                      if any(p.startswith("_") and not p.startswith("__") for p in a.name.split("."))]
    return found


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_reaches_into_private_names_of_another(path: Path) -> None:
    """Was: the recorder read a generator's ``_semaphore_size``, ``inspect`` called the store's ``_call`` on its
    client, and the chat imported ``pydantic_ai._utils``."""
    assert not _private_reaches(path), f"{path.relative_to(PACKAGE)}: {_private_reaches(path)}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_through_the_package_root(path: Path) -> None:
    """``hyde_tutor/__init__`` re-exports every layer: importing from it inside the package hides which layer a
    module really depends on from the layer test above."""
    if path == PACKAGE / "__init__.py":
        return
    depth = len(path.relative_to(PACKAGE).parts) - 1
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            root = (node.level == depth + 1 and not node.module) or (node.level == 0 and node.module == "hyde_tutor")
            layers = set(ALLOWED) | FOUNDATION
            assert not (root and any(a.name not in layers for a in node.names)), (
                f"{path.relative_to(PACKAGE)} line {node.lineno} imports {[a.name for a in node.names]} from the package root")


def test_every_module_compiles_without_warnings() -> None:
    """An invalid escape in a plain string ('\\s' in a regex) is a DeprecationWarning today and a SyntaxError
    in a later Python: compiling with warnings as errors finds it before a user's interpreter does."""
    import warnings

    for path in _modules():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compile(path.read_text(encoding="utf-8"), str(path), "exec")
