"""notebooks/prompt_tuning.ipynb: committed without outputs, and runs headless on a small slice.

The run uses the real stack: USE embedder, qdrant-edge, and SmolLM2 through the embedded llama.cpp server
(SmolLM2 writes no Korean, so the Hangul guard is off). The kernel is this interpreter (a kernelspec written
to a temporary JUPYTER_PATH), so the test needs nothing installed by hand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from typer.testing import CliRunner

from hyde_tutor.cli import app
from hyde_tutor.llm.prompts import load_prompt

from .conftest import DATA, ROOT

NOTEBOOK = ROOT / "notebooks" / "prompt_tuning.ipynb"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# One unnamed and one named grammar question, each with its relevant entries in the small collection.
QUERY_IDS = ("gq-a01", "gq-a03")


def test_committed_notebook_has_no_outputs() -> None:
    raw = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    nb = nbformat.reads(json.dumps(raw), as_version=4)
    nbformat.validate(nb)
    code = [c for c in raw["cells"] if c["cell_type"] == "code"]
    assert code, "the notebook has no code cells"
    for c in code:
        assert c["outputs"] == [] and c["execution_count"] is None, f"outputs not stripped: {''.join(c['source'])[:80]}"
        assert "execution" not in c.get("metadata", {})
    assert "widgets" not in raw["metadata"]
    assert raw["metadata"]["kernelspec"]["name"] == "python3"


def _mini_eval_set(root: Path) -> Path:
    """data/eval/grammar cut down to QUERY_IDS, their relevant entries and a few distractors."""
    src = DATA / "eval" / "grammar"
    out = root / "eval" / "grammar"
    (out / "qrels").mkdir(parents=True)
    qrels = [line.split("\t") for line in (src / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    qrels = [row for row in qrels if row[0] in QUERY_IDS]
    relevant = {row[1] for row in qrels}
    (out / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join("\t".join(row) + "\n" for row in qrels), encoding="utf-8"
    )
    queries = [line for line in (src / "queries.jsonl").read_text(encoding="utf-8").splitlines()
               if line.strip() and json.loads(line)["_id"] in QUERY_IDS]
    (out / "queries.jsonl").write_text("\n".join(queries) + "\n", encoding="utf-8")
    corpus = [line for line in (src / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    keep = [line for i, line in enumerate(corpus) if json.loads(line)["_id"] in relevant or i % 16 == 5]
    (out / "corpus.jsonl").write_text("\n".join(keep) + "\n", encoding="utf-8")
    return out


def _kernelspec(root: Path) -> Path:
    """A ``python3`` kernelspec running THIS interpreter; JUPYTER_PATH puts it before any other."""
    spec = root / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (hyde-tutor tests)",
        "language": "python",
    }), encoding="utf-8")
    return root / "jupyter"


def _outputs(nb, kind: str) -> list[dict]:  # type: ignore[no-untyped-def]
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == kind]


def _run_notebook(root: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]):  # type: ignore[no-untyped-def]
    """Execute the notebook headless in ``root`` with this interpreter's kernel and ``env``; no cell may fail."""
    for key, value in {
        "JUPYTER_PATH": str(_kernelspec(root)),
        "JUPYTER_RUNTIME_DIR": str(root / "jupyter-runtime"),
        "IPYTHONDIR": str(root / "ipython"),
        **env,
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.delenv("HYDE_PROMPTS_DIR", raising=False)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # Raises CellExecutionError (with the cell and traceback) if any cell fails.
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(root)}}).execute()
    assert not _outputs(nb, "error")
    return nb


def test_notebook_runs_on_a_small_slice(isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    eval_set = _mini_eval_set(isolated_env)
    ingest = CliRunner().invoke(app, ["ingest", "--collection", "mini_grammar", "--file", str(eval_set / "corpus.jsonl")])
    assert ingest.exit_code == 0, ingest.output
    saved_dir, out_dir = isolated_env / "saved-prompts", isolated_env / "out"
    repo_prompts = sorted(p.name for p in (ROOT / "prompts").glob("hypothesis_*.md"))
    nb = _run_notebook(isolated_env, monkeypatch, {
        "HYDE_LLM__LOCAL_MODEL": "smollm2-135m",
        "HYDE_LLM__MAX_TOKENS": "32",
        # One llama.cpp thread: with two on a 2-core machine that is busy elsewhere, the threads spin at
        # every barrier and one hypothesis took ~2 minutes instead of ~10 s.
        "HYDE_LLM__THREADS": "1",
        "HYDE_HYDE__MIN_HANGUL_CHARS": "0",
        "HYDE_HYDE__TIMEOUT_S": "300",  # a busy 2-core machine must not turn generation into a fallback
        "TUNE_EVAL_DIR": str(isolated_env / "eval"),
        "TUNE_SETS": "grammar=mini_grammar",
        "TUNE_QUERIES": "2",
        "TUNE_HYPOTHESES": "1",
        "TUNE_SHOW": "1",
        "TUNE_SAVE": "always",
        "TUNE_SAVE_DIR": str(saved_dir),
        "TUNE_OUT_DIR": str(out_dir),
    })

    # A scores table with the raw reference and both prompt candidates.
    scores = json.loads((out_dir / "scores.json").read_text(encoding="utf-8"))
    assert [(r["set"], r["candidate"]) for r in scores] == [("grammar", "raw"), ("grammar", "current"), ("grammar", "strict")]
    for row in scores:
        assert row["queries"] == 2
        assert 0.0 <= row["ndcg@10"] <= 1.0 and 0.0 <= row["recall@5"] <= 1.0
        assert {"ndcg@10 named", "ndcg@10 unnamed"} <= set(row)
        assert row["latency_ms_p50"] > 0
    hyde_rows = [r for r in scores if r["candidate"] != "raw"]
    assert all(r["fallback_rate"] < 1.0 for r in hyde_rows), hyde_rows  # guard off: HyDE was used
    assert hyde_rows[0]["prompt"] == "hypothesis_grammar@v1" and hyde_rows[1]["prompt"].startswith("hypothesis_grammar.strict.")
    html = "".join(o["data"].get("text/html", "") for o in _outputs(nb, "display_data"))
    assert "<th>strict</th>" in html and "<th>ndcg@10</th>" in html and "Пусан" in html

    # Hypotheses side by side: one question, one entry per candidate.
    side = json.loads((out_dir / "hypotheses.json").read_text(encoding="utf-8"))
    assert [r["domain"] for r in side] == ["grammar"]
    assert all(r["current"][0]["text"] and r["strict"][0]["text"] for r in side)

    # Plots: the PNG on disk and inline images (summary + the per-group chart).
    png = out_dir / "prompt_tuning.png"
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 10_000
    images = [o for o in _outputs(nb, "display_data") if "image/png" in o["data"]]
    assert len(images) >= 2

    # The winner saved as the next version in the temp dir; the repository's prompts/ untouched.
    saved = json.loads((out_dir / "saved.json").read_text(encoding="utf-8"))
    assert set(saved) == {"grammar"} and saved["grammar"]["ref"] == "hypothesis_grammar@v2"
    path = Path(saved["grammar"]["path"])
    assert path == saved_dir / "hypothesis_grammar.v2.md" and path.is_file()
    new = load_prompt("hypothesis_grammar", directory=saved_dir)
    assert new.version == 2 and new.text != load_prompt("hypothesis_grammar", directory=ROOT / "prompts").text
    assert (saved_dir / "hypothesis_request.v1.md").is_file()  # seeded: a complete prompts folder
    assert sorted(p.name for p in (ROOT / "prompts").glob("hypothesis_*.md")) == repo_prompts


def test_notebook_scores_recorded_capable_model_hypotheses_with_replay(default_model_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HYDE_LLM__PROVIDER=replay: the current prompt is served the bundled recordings; a variant was never
    recorded, so it falls back (not_recorded) instead of failing."""
    ingest = CliRunner().invoke(app, ["ingest", "--collection", "grammar", "--file", str(ROOT / "data" / "grammar.jsonl")])
    assert ingest.exit_code == 0, ingest.output
    out_dir = default_model_env / "out"
    _run_notebook(default_model_env, monkeypatch, {
        "HYDE_LLM__PROVIDER": "replay",
        "HYDE_LLM__RECORDINGS": str(ROOT / "data" / "recordings"),
        "TUNE_EVAL_DIR": str(ROOT / "data" / "eval"),
        "TUNE_SETS": "grammar_holdout=grammar",
        "TUNE_QUERIES": "6",
        "TUNE_HYPOTHESES": "4",
        "TUNE_SHOW": "1",
        "TUNE_SAVE": "never",
        "TUNE_OUT_DIR": str(out_dir),
    })
    scores = {r["candidate"]: r for r in json.loads((out_dir / "scores.json").read_text(encoding="utf-8"))}
    assert scores["current"]["fallback_rate"] == 0.0  # every hold-out query was recorded, 4 perspectives
    assert scores["strict"]["fallback_rate"] == 1.0  # the variant prompt was not: not_recorded, plain results
    assert scores["current"]["ndcg@10"] > scores["raw"]["ndcg@10"]
    # quality against cost: the current prompt's searches made LLM calls and spent counted tokens, raw none
    assert scores["current"]["llm_calls"] >= 1 and scores["current"]["tokens"] > 0
    assert scores["raw"]["llm_calls"] == 0
    assert (out_dir / "quality_vs_cost.png").read_bytes()[:8] == PNG_MAGIC
