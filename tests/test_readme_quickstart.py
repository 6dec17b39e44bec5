"""The README's and the getting-started page's search runs as written and prints what the page shows; the
page's JSONL lines are the three accepted shapes and ingest."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from hyde_tutor.corpus.documents import record_to_document

from .conftest import DATA, ROOT
from .examples import Example, example, run


@pytest.fixture(scope="module")
def grammar_ingested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled grammar collection, ingested once for this module's blocks."""
    from typer.testing import CliRunner

    from hyde_tutor.cli import app

    data_dir = tmp_path_factory.mktemp("quickstart-data")
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith(("HYDE_", "OPENAI_"))]:
            mp.delenv(key)
        mp.chdir(data_dir)
        mp.setenv("HYDE_DATA_DIR", str(data_dir))
        ingest = CliRunner().invoke(app, ["ingest", "--collection", "grammar", "--file", str(DATA / "grammar.jsonl")])
    assert ingest.exit_code == 0, ingest.output
    return data_dir


@pytest.mark.parametrize("block", [example("readme-search"), example("search")], ids=["README", "getting-started"])
def test_the_search_block_runs_verbatim_and_prints_what_the_page_shows(
    block: Example, grammar_ingested: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch, capsys,
) -> None:
    assert len(block.code.strip().splitlines()) == 5 and block.output
    monkeypatch.setenv("HYDE_DATA_DIR", str(grammar_ingested))
    capsys.readouterr()
    namespace: dict = {}
    try:
        run(block, namespace)
    finally:
        if "hr" in namespace:
            namespace["hr"].close()  # the block leaves the store open, as a script may; the test closes it
    assert capsys.readouterr().out.strip() == block.output.strip()


def test_getting_started_jsonl_examples_are_the_three_accepted_shapes() -> None:
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    section = page.split("\n## Your own data\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```json\n(.*?)```", section, re.S)
    kinds = [record_to_document(json.loads(line)).payload["kind"]
             for block in blocks for line in block.splitlines() if line.strip()]
    assert kinds == ["grammar", "doc", "beir"]


def test_the_ingest_block_writes_the_faq_line_and_prints_what_the_page_shows(isolated_env: Path, capsys) -> None:
    """The page's BEIR line as ``faq.jsonl`` in the working directory, then the IngestRequest block, twice: the
    second run writes nothing (and would print 0 written)."""
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    beir = next(line for line in re.findall(r"```json\n(.*?)```", page, re.S) if '"_id"' in line)
    (isolated_env / "faq.jsonl").write_text(beir, encoding="utf-8")
    block = example("ingest")
    run(block)
    assert capsys.readouterr().out.strip() == block.output.strip()
    run(block)
    assert capsys.readouterr().out.strip() == "0 written, 1 in my_faq"
