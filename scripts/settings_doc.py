"""The configuration reference, generated from ``Settings``: every ``HYDE_*`` variable with its type, default
and description, one table per settings group.

    python scripts/settings_doc.py            # prints the Markdown
    mkdocs build                              # the docs site's hook: docs/configuration.md gets the tables

A field's description is its ``Field(description=...)``, else the string literal under it in the class body
(an attribute docstring). A new setting therefore needs only a description and its line in ``.env.example``;
``tests/test_docs.py`` fails when either is missing.
"""

from __future__ import annotations

import ast
import inspect
import json
import sys
import textwrap
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- settings-reference -->"
"""Where the hook puts the tables in ``docs/configuration.md``."""


def _settings() -> type:
    if str(ROOT / "src") not in sys.path:  # this checkout's package, not another install of it
        sys.path.insert(0, str(ROOT / "src"))
    from hyde_tutor.config import Settings

    return Settings


def attribute_docstrings(model: type) -> dict[str, str]:
    """``{field: docstring}`` for the string literals written under fields in ``model``'s class body."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(model)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    found: dict[str, str] = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            found[node.target.id] = inspect.cleandoc(after.value.value)
    return found


def type_text(annotation: Any) -> str:
    """A reader's name for a field's type: ``int``, ``float or unset``, one of ``a``, ``b``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        text = " or ".join(type_text(a) for a in kept)
        return f"{text}, optional" if len(kept) < len(args) else text
    if origin is dict:
        return "JSON object"
    if origin is list:
        return "JSON list"
    if isinstance(annotation, type):
        if annotation.__name__ == "SecretStr":
            return "secret"
        if issubclass(annotation, Path):
            return "path"
        if issubclass(annotation, Enum):
            return "one of " + ", ".join(f"`{m.value}`" for m in annotation)
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def bounds_text(metadata: list[Any]) -> str:
    """``1 ≤ x ≤ 100`` from a field's ``ge``/``gt``/``le``/``lt`` constraints ('' without any)."""
    low = high = ""
    for item in metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">")):
            if getattr(item, attr, None) is not None:
                low = f"{sign} {getattr(item, attr):g}"
        for attr, sign in (("le", "≤"), ("lt", "<")):
            if getattr(item, attr, None) is not None:
                high = f"{sign} {getattr(item, attr):g}"
    return ", ".join(p for p in (low, high) if p)


def default_text(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.is_required():
        return "required"
    else:
        value = field.default
    if value is None:
        return "unset"
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, (dict, list)):
        return f"`{json.dumps(value, ensure_ascii=False)}`" if value else ("`{}`" if isinstance(value, dict) else "`[]`")
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, Path):
        return f"`{value}`"
    return f"`{value}`" if value != "" else '`""` (empty)'


def rows(model: type, prefix: str = "HYDE_") -> list[tuple[str, str, str, str]]:
    """``(variable, type, default, description)`` of every leaf field of ``model``; nested models become
    their own section (see :func:`sections`)."""
    docs = attribute_docstrings(model)
    out = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
            continue
        kind = type_text(annotation)
        bounds = bounds_text(field.metadata)
        description = (field.description or docs.get(name) or "").strip()
        out.append((f"{prefix}{name.upper()}", kind + (f", {bounds}" if bounds else ""), default_text(field),
                    " ".join(description.split())))
    return out


def sections(settings: type | None = None) -> list[tuple[str, str, list[tuple[str, str, str, str]]]]:
    """``(title, intro, rows)``: the top-level fields first, then one section per nested settings model."""
    settings = settings or _settings()
    found = [("General", inspect.cleandoc(settings.__doc__ or ""), rows(settings))]
    for name, field in settings.model_fields.items():
        model = field.annotation
        if isinstance(model, type) and hasattr(model, "model_fields"):
            found.append((f"`HYDE_{name.upper()}__*`", inspect.cleandoc(model.__doc__ or ""),
                          rows(model, f"HYDE_{name.upper()}__")))
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(settings: type | None = None) -> str:
    """The whole reference as Markdown: one table per section."""
    parts = []
    for title, intro, table in sections(settings):
        parts += [f"### {title}", "", intro, "", "| variable | type | default | description |", "|---|---|---|---|"]
        parts += [f"| `{var}` | {_cell(kind)} | {_cell(default)} | {_cell(desc)} |" for var, kind, default, desc in table]
        parts.append("")
    return "\n".join(parts)


def on_page_markdown(markdown_text: str, page: Any, **_: Any) -> str:
    """MkDocs hook: the configuration page's marker becomes the generated tables."""
    if MARKER not in markdown_text:
        return markdown_text
    return markdown_text.replace(MARKER, markdown())


if __name__ == "__main__":
    print(markdown())
