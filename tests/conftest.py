"""Shared fixtures. Fakes here (HashEmbedder) are for unit tests only."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from pydantic import BaseModel

from hyde_tutor import Bm25Encoder, EdgeStore, KoreanAwareAnalyzer, QdrantClientStore, Retriever, UseEmbedder
from hyde_tutor.experiment.sqlstore import SqlDatabase
from hyde_tutor.retrieval.embedders import l2_normalise

from .pg_cluster import pg_cluster

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"


class HashEmbedder:
    """Deterministic bag-of-words embedder for fast unit tests (never used outside tests)."""

    def __init__(self, dim: int = 64, name: str = "hash-test") -> None:
        self.dim = dim
        self.name = name
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                h = int.from_bytes(hashlib.md5(word.encode()).digest()[:4], "big")
                out[row, h % self.dim] += 1.0
            out[row, 0] += 1e-3  # never a zero vector
        return l2_normalise(out)


@pytest.fixture(scope="session")
def analyzer() -> KoreanAwareAnalyzer:
    return KoreanAwareAnalyzer()


@pytest.fixture(scope="session")
def bm25(analyzer: KoreanAwareAnalyzer) -> Bm25Encoder:
    return Bm25Encoder(analyzer)


@pytest.fixture(scope="session")
def use_embedder() -> UseEmbedder:
    return UseEmbedder(threads=2)


@pytest.fixture()
def hash_embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture(params=["edge", "qdrant-client-local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    """Both store backends, so every contract test runs on qdrant-edge and qdrant-client."""
    if request.param == "edge":
        s: object = EdgeStore(tmp_path / "edge")
    else:
        s = QdrantClientStore.local(str(tmp_path / "qdrant-local"))
    yield s
    s.close()  # type: ignore[attr-defined]


@pytest.fixture()
def isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A clean working directory and data dir, with no HYDE_* or OpenAI settings leaking in."""
    import os

    for key in list(os.environ):
        if key.startswith("HYDE_") or key.startswith("OPENAI_"):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HYDE_DATA_DIR", str(tmp_path / "data-dir"))
    return tmp_path


@pytest.fixture(scope="session")
def joined_qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default local model joined from its 22 installed parts, once per test session (1.1 GB)."""
    from hyde_tutor.llm.server import qwen_path

    return qwen_path(tmp_path_factory.mktemp("shared-models"))


@pytest.fixture()
def default_model_env(isolated_env: Path, joined_qwen: Path) -> Path:
    """``isolated_env`` whose data dir already holds the joined default model, as after a first use.

    A hard link to the session's one join: three tests that each joined their own 1.1 GB copy filled a CI
    disk (pytest keeps three sessions of temporary dirs)."""
    import os

    models = isolated_env / "data-dir" / "models"
    models.mkdir(parents=True)
    try:
        os.link(joined_qwen, models / joined_qwen.name)
    except OSError:  # another filesystem: a symlink reads the same
        (models / joined_qwen.name).symlink_to(joined_qwen)
    return isolated_env


@pytest.fixture()
def long_chat_questions(default_model_env: Path) -> list[str]:
    """The bundled corpus ingested (grammar, docs) with the default model at hand, and the questions of
    data/eval/long_chat, for the long-chat tests of the chat and the served tutor."""
    import json

    from typer.testing import CliRunner

    from hyde_tutor.cli import app

    root = Path(__file__).resolve().parent.parent
    for name in ("grammar", "docs"):
        result = CliRunner().invoke(app, ["ingest", "--collection", name, "--file", str(root / "data" / f"{name}.jsonl")])
        assert result.exit_code == 0, result.output
    questions = [json.loads(line)["text"] for line in
                 (root / "data" / "eval" / "long_chat" / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
    return questions


@pytest.fixture()
def small_corpus(isolated_env: Path) -> Path:
    """Six bundled grammar entries as a JSONL file."""
    lines = (DATA / "grammar.jsonl").read_text(encoding="utf-8").splitlines()
    wanted = [line for line in lines if json.loads(line)["id"] in {"g-b01", "g-b03", "g-a07", "g-d13", "g-d14", "g-c24"}]
    path = isolated_env / "small.jsonl"
    path.write_text("\n".join(wanted) + "\n", encoding="utf-8")
    return path


@pytest.fixture()
def tiny_beir(isolated_env: Path, small_corpus: Path) -> Path:
    """A BEIR folder over ``small_corpus`` with two questions, one per query group."""
    from typer.testing import CliRunner

    from hyde_tutor.cli import app

    ds = isolated_env / "beir"
    (ds / "qrels").mkdir(parents=True)
    CliRunner().invoke(app, ["export-beir", "--file", str(small_corpus), "--out", str(ds / "corpus.jsonl")])
    (ds / "queries.jsonl").write_text(
        '{"_id": "q1", "text": "Как сказать, что я хочу есть?", "metadata": {"named": false}}\n'
        '{"_id": "q2", "text": "Что значит -지만?", "metadata": {"named": true}}\n',
        encoding="utf-8",
    )
    (ds / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tg-b01\t1\nq2\tg-a07\t1\n")
    return ds


@pytest.fixture()
def retriever(tmp_path: Path, hash_embedder: HashEmbedder, bm25: Bm25Encoder) -> Iterator[Retriever]:
    """The four test documents (``tests/test_store.DOCS``) as collection ``grammar`` in an edge store."""
    from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents
    from .test_store import DOCS

    store = EdgeStore(tmp_path / "edge")
    ingest_documents(DOCS, IngestRequest(collection="grammar", progress=False), store, hash_embedder, bm25)
    r = Retriever(store, hash_embedder, bm25)
    yield r
    r.close()


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module (scripts are not a package; a script may import its siblings, so the
    folder is on ``sys.path`` while it loads)."""
    folder = str(ROOT / "scripts")
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    finally:
        sys.path.remove(folder)
    return module


def setting_keys(model: type[BaseModel], prefix: str = "HYDE_") -> set[str]:
    """Every environment variable of a settings model, walked here independently of the code that lists them
    (``.env.example``, the generated configuration page)."""
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= setting_keys(annotation, f"{prefix}{name.upper()}__")
        else:
            keys.add(f"{prefix}{name.upper()}")
    return keys


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """One throwaway PostgreSQL cluster for the session, started only when a test asks for it."""
    with pg_cluster() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_db(request: pytest.FixtureRequest) -> Iterator[SqlDatabase]:
    """The served tutor's database on SQLite (a file) and on the session's PostgreSQL (emptied first)."""
    database = open_database(request.param, request)
    yield database
    database.close()


def open_database(kind: str, request: pytest.FixtureRequest) -> SqlDatabase:
    """A fresh ``sqlite`` database in the test's tmp_path, or the session's ``postgresql`` with its tables emptied."""
    if kind == "sqlite":
        return SqlDatabase(f"sqlite:///{request.getfixturevalue('tmp_path') / 'served.db'}")
    database = SqlDatabase(request.getfixturevalue("pg_url"))
    with database.engine.begin() as conn:
        for table in reversed(database.metadata.sorted_tables):
            conn.execute(table.delete())
    return database
