"""The documentation: the site builds with ``mkdocs build --strict`` offline, the configuration page and
``.env.example`` name every setting, and every Python block of the README and the docs is run by a test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from hyde_tutor import Settings

from .conftest import DATA, ROOT, load_script, setting_keys
from .examples import all_examples, example, run


def _settings_doc():
    return load_script("settings_doc")


def undocumented(settings: type[BaseModel], page: str, env_example: str) -> dict[str, list[str]]:
    """Settings missing from the configuration page (or listed there without a description) and from
    ``.env.example``."""
    described = {m.group(1) for m in re.finditer(r"^\| `(HYDE_[A-Z0-9_]+)` \|.*\| *[^|\s][^|]* *\|$", page, re.M)}
    listed = set(re.findall(r"^#?\s*(HYDE_[A-Z0-9_]+)=", env_example, re.M))
    keys = setting_keys(settings)
    return {"configuration page": sorted(keys - described), ".env.example": sorted(keys - listed)}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``mkdocs build --strict`` of this checkout into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def test_the_site_builds_strict_and_offline(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= 15
    for page in pages:
        html = page.read_text(encoding="utf-8")
        external = re.findall(r'<(?:script|link)\b[^>]*\b(?:src|href)="((?:https?:)?//[^"]+)"', html)
        assert not external, f"{page.relative_to(site)} loads {external}"  # no fonts, scripts or styles from a CDN
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("HydeRetriever", "SearchRequest", "HydeSearchToolset", "HydeTutor", "RetrieveFirst", "Monitor",
                 "Experiment", "UseEmbedder", "EdgeStore", "QdrantClientStore", "Settings", "IngestRequest"):
        assert f'id="hyde_tutor.' in api and re.search(rf'id="hyde_tutor\.[\w.]*\.{name}"', api), name


def test_the_built_configuration_page_shows_every_setting(site: Path) -> None:
    html = (site / "configuration" / "index.html").read_text(encoding="utf-8")
    shown = set(re.findall(r"<code>(HYDE_[A-Z0-9_]+)</code>", html))
    assert setting_keys(Settings) <= shown, sorted(setting_keys(Settings) - shown)


def test_the_readme_stays_on_one_screen_and_its_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 120
    links = re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", readme)
    assert links and all((ROOT / link).is_file() for link in links), [l for l in links if not (ROOT / l).is_file()]
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = [link for link in links if link.startswith("docs/") and link.endswith(".md")]
    assert all(link[len("docs/"):] in nav for link in pages)  # each is a site page (images only need to exist)


def test_every_setting_is_on_the_configuration_page_and_in_env_example() -> None:
    page = _settings_doc().markdown()
    env_example = (ROOT / ".env.example").read_text(encoding="utf-8")
    assert undocumented(Settings, page, env_example) == {"configuration page": [], ".env.example": []}


def test_a_new_setting_without_description_or_env_example_line_is_caught() -> None:
    """What another branch's new field meets: listed with its description, and flagged until it has one and
    a line in ``.env.example``."""
    from pydantic import Field

    from hyde_tutor.config import QuestionSettings

    class Wider(QuestionSettings):
        fresh: int = Field(3, ge=1, description="A setting added by another branch.")
        bare: bool = False

    class WiderSettings(Settings):
        questions: Wider = Field(default_factory=Wider)

    page = _settings_doc().markdown(WiderSettings)
    assert "| `HYDE_QUESTIONS__FRESH` | int, ≥ 1 | `3` | A setting added by another branch. |" in page
    env_example = (ROOT / ".env.example").read_text(encoding="utf-8")
    assert undocumented(WiderSettings, page, env_example) == {
        "configuration page": ["HYDE_QUESTIONS__BARE"],
        ".env.example": ["HYDE_QUESTIONS__BARE", "HYDE_QUESTIONS__FRESH"],
    }


def test_every_python_block_is_named_and_run_by_a_test() -> None:
    examples = all_examples()
    unnamed = [e.where for e in examples if e.name is None]
    assert not unnamed, f"name these blocks (<!-- example: NAME --> above them): {unnamed}"
    names = [e.name for e in examples]
    assert len(names) == len(set(names)), names
    tests = {p: p.read_text(encoding="utf-8") for p in (ROOT / "tests").glob("test_*.py") if p.name != "test_docs.py"}
    tests[Path(__file__)] = Path(__file__).read_text(encoding="utf-8").split("# -- blocks run here", 1)[1]
    orphans = [e.where + f" ({e.name})" for e in examples if e.not_run is None
               and not any(f'example("{e.name}")' in text for text in tests.values())]
    assert not orphans, f"no test runs these blocks: {orphans}"
    run_count = sum(e.not_run is None for e in examples)
    print(f"\ndocs examples: {len(examples)} Python blocks, {run_count} run by tests, "
          f"{len(examples) - run_count} marked not run")
    assert run_count >= 7


# -- blocks run here (the others: test_readme_quickstart, test_toolset, test_schemas) ---------------------------

def test_the_search_request_block_prints_what_the_page_shows(isolated_env: Path, capsys) -> None:
    """A hold-out question that does not name the pattern, with the replayed capable-model hypotheses."""
    from typer.testing import CliRunner

    from hyde_tutor.cli import app

    ingest = CliRunner().invoke(app, ["ingest", "--collection", "grammar", "--file", str(DATA / "grammar.jsonl")])
    assert ingest.exit_code == 0, ingest.output
    capsys.readouterr()
    block = example("search-request")
    run(block)
    assert capsys.readouterr().out.strip() == block.output.strip()  # type: ignore[union-attr]
