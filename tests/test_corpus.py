"""The bundled corpus and eval sets meet the spec and stay consistent."""

import json

from hyde_tutor.corpus.documents import to_beir_record
from hyde_tutor.evaluation.beir import load_beir
from hyde_tutor.corpus.ingest import read_documents

from .conftest import DATA

LEVELS = {"TOPIK 1", "TOPIK 2", "TOPIK 3", "TOPIK 4"}


def _lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_grammar_entries_have_required_fields() -> None:
    entries = _lines(DATA / "grammar.jsonl")
    assert len(entries) >= 150
    assert len({e["id"] for e in entries}) == len(entries)
    assert len({e["pattern"] for e in entries}) == len(entries)
    for e in entries:
        assert e["level"] in LEVELS, e["id"]
        assert e["name_ru"] and len(e["explanation_ru"]) > 80, e["id"]
        assert 1 <= len(e["examples"]) <= 3 and all(x["ko"] and x["ru"] for x in e["examples"]), e["id"]
    levels = {e["level"] for e in entries}
    assert levels == LEVELS


def test_documents_cover_the_topics() -> None:
    docs = _lines(DATA / "docs.jsonl")
    assert len(docs) >= 40
    topics = {d["topic"] for d in docs}
    assert {"Частицы", "Стили вежливости", "Спряжение", "Гоноратив", "Произношение", "Методы изучения"} <= topics
    assert all(len(d["content"]) >= 500 for d in docs)


def test_eval_sets_are_consistent_and_mostly_unnamed() -> None:
    total = unnamed = 0
    for name in ("grammar", "docs"):
        ds = load_beir(DATA / "eval" / name)
        corpus_ids = {r["_id"] for r in _lines(DATA / "eval" / name / "corpus.jsonl")}
        assert all(doc in corpus_ids for rel in ds.qrels.values() for doc in rel)
        all_queries = _lines(DATA / "eval" / name / "queries.jsonl")
        assert len(ds.queries) == len(all_queries)  # every query has labels
        total += len(ds.queries)
        unnamed += sum(q.group == "unnamed" for q in ds.queries)
    assert total >= 120
    assert unnamed * 2 >= total


def test_beir_corpus_files_are_in_sync_with_the_data_files() -> None:
    for name in ("grammar", "docs"):
        docs, errors = read_documents(DATA / f"{name}.jsonl")
        assert not errors
        expected = [to_beir_record(d) for d in docs]
        assert _lines(DATA / "eval" / name / "corpus.jsonl") == expected, f"run: hyde-tutor export-beir for {name}"


def test_grammar_holdout_is_labelled_against_the_grammar_corpus_and_new() -> None:
    """data/eval/grammar_holdout: questions written after the HyDE policy was chosen, to check it."""
    holdout = load_beir(DATA / "eval" / "grammar_holdout")
    corpus_ids = {r["_id"] for r in _lines(DATA / "eval" / "grammar" / "corpus.jsonl")}
    assert len(holdout.queries) == len(_lines(DATA / "eval" / "grammar_holdout" / "queries.jsonl")) >= 25
    assert all(doc in corpus_ids for rel in holdout.qrels.values() for doc in rel)
    tuned_on = {q.text for q in load_beir(DATA / "eval" / "grammar").queries}
    assert not tuned_on & {q.text for q in holdout.queries}
    assert sum(q.group == "unnamed" for q in holdout.queries) * 2 >= len(holdout.queries)


def test_the_conversation_sets_label_entries_of_the_grammar_corpus_they_carry() -> None:
    """The follow-up sets carry a copy of the grammar corpus (BEIR layout); the replays search the project's own
    corpus, so a copy that fell behind it, or a label naming an entry it lacks, would score a different corpus."""
    grammar = _lines(DATA / "eval" / "grammar" / "corpus.jsonl")
    ids = {r["_id"] for r in grammar}
    for name in ("conversations", "followups", "fresh_followups", "fresh_followups2", "fresh_followups3",
                 "fresh_followups4", "fresh_followups5", "fresh_followups6", "fresh_followups7",
                 "fresh_followups8", "fresh_followups9", "fresh_followups10",
                 "fresh_followups11", "fresh_followups12", "fresh_followups13", "fresh_followups14",
                 "fresh_followups15", "fresh_followups16", "fresh_followups17"):
        ds = load_beir(DATA / "eval" / name)
        assert _lines(DATA / "eval" / name / "corpus.jsonl") == grammar, name
        assert ds.queries and all(doc in ids for rel in ds.qrels.values() for doc in rel), name
        assert all(q["history"] for q in _lines(DATA / "eval" / name / "queries.jsonl")), name
