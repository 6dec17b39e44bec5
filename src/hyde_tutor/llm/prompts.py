"""Versioned prompt files under ``prompts/``: ``<name>.v<N>.md``.

``load_prompt("hypothesis_grammar")`` returns the highest version; pass
``version=`` to pin one. ``save_prompt`` writes the next version, never
overwriting an existing file (prompt tuning keeps its history).
"""

from __future__ import annotations

import os
import sys
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import HydeTutorError

_FILE = re.compile(r"^(?P<name>[a-z0-9_]+)\.v(?P<version>\d+)\.md$")


def default_prompts_dir() -> Path:
    """``HYDE_PROMPTS_DIR``; else ``./prompts``; else the checkout's ``prompts/`` (editable install);
    else ``<prefix>/share/hyde-tutor/prompts`` where a wheel installs them."""
    env = os.environ.get("HYDE_PROMPTS_DIR")
    if env:
        return Path(env)
    candidates = [
        Path("prompts"),
        Path(__file__).resolve().parents[3] / "prompts",
        Path(sys.prefix) / "share" / "hyde-tutor" / "prompts",
    ]
    for directory in candidates:
        if directory.is_dir() and any(directory.glob("*.v*.md")):
            return directory
    return candidates[1]  # the error for a missing prompt then names the checkout's folder


@dataclass(frozen=True, slots=True)
class Prompt:
    name: str
    version: int
    text: str

    @property
    def ref(self) -> str:
        """``name@vN``: goes into cache keys and metrics."""
        return f"{self.name}@v{self.version}"

    def fill(self, values: Mapping[str, str]) -> str:
        """The text with each ``{name}`` of ``values`` replaced, in ONE pass: a value that itself holds
        ``{name}`` (a learner typing ``{perspective}``) stays text and is never filled in turn; other braces
        are left as they are."""
        if not values:
            return self.text
        pattern = re.compile("\\{(" + "|".join(re.escape(k) for k in values) + ")\\}")
        return pattern.sub(lambda m: values[m.group(1)], self.text)


def prompt_versions(name: str, directory: Path | None = None) -> list[int]:
    directory = directory or default_prompts_dir()
    found = []
    for path in directory.glob(f"{name}.v*.md"):
        m = _FILE.match(path.name)
        if m and m["name"] == name:
            found.append(int(m["version"]))
    return sorted(found)


def load_prompt(name: str, version: int | None = None, directory: Path | None = None) -> Prompt:
    directory = directory or default_prompts_dir()
    versions = prompt_versions(name, directory)
    if not versions:
        raise HydeTutorError(f"No prompt file {name}.v<N>.md in {directory}.")
    chosen = versions[-1] if version is None else version
    path = directory / f"{name}.v{chosen}.md"
    if not path.is_file():
        raise HydeTutorError(f"Prompt {name} v{chosen} not found in {directory} (have: {versions}).")
    return Prompt(name, chosen, path.read_text(encoding="utf-8").strip())


def save_prompt(name: str, text: str, directory: Path | None = None) -> Prompt:
    """Write ``text`` as the next version of ``name`` and return it."""
    directory = directory or default_prompts_dir()
    if not _FILE.match(f"{name}.v1.md"):
        raise HydeTutorError(f"Prompt name {name!r} must be lower-case letters, digits and underscores.")
    versions = prompt_versions(name, directory)
    version = (versions[-1] + 1) if versions else 1
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.v{version}.md").write_text(text.strip() + "\n", encoding="utf-8")
    return Prompt(name, version, text.strip())


@dataclass(frozen=True, slots=True)
class Perspective:
    name: str
    instruction: str


def parse_perspectives(text: str) -> list[Perspective]:
    """``## name`` sections -> perspectives, in file order (lines before the first section are comments)."""
    out: list[Perspective] = []
    name: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if line.startswith("## "):
            if name:
                out.append(Perspective(name, "\n".join(body).strip()))
            name, body = line[3:].strip(), []
        elif name is not None:
            body.append(line)
    if name:
        out.append(Perspective(name, "\n".join(body).strip()))
    return out
