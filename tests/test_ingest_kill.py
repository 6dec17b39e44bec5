"""Ingestion killed half-way (SIGKILL), then re-run: exactly one point per document, nothing written twice.

The subprocess runs the real ``hyde-tutor ingest`` command (``cli.app``) with one substitution: the dense
embedder is the 64-d ``HashEmbedder`` (USE embeds ~100 docs/s on two cores, too slow for a unit test). A
patched ``EdgeStore.upsert`` prints a progress marker after each batch; the test kills the process once a
third of the corpus is written, checks what survived, and runs the command again to completion.

The corpus also carries malformed, oversized and non-UTF-8 lines: the command reports each with its line
number and exits 1, after ingesting every good line. (``test_documents.py`` checks each bad-line reason
on the parser; ``test_cli.py`` checks the exit code with broken JSON.)
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from hyde_tutor import EdgeStore
from hyde_tutor.corpus.documents import MAX_LINE_BYTES, point_id_for, record_to_document
from hyde_tutor.retrieval.retriever import Retriever

from .conftest import ROOT

N_DOCS = 3000
BATCH = 50
COLLECTION = "big"

_RUN = """
import sys
import hyde_tutor.retrieval.retriever
from hyde_tutor.retrieval.store.edge import EdgeStore
from tests.conftest import HashEmbedder

hyde_tutor.retrieval.retriever.make_dense_embedder = lambda settings: HashEmbedder()
_upsert = EdgeStore.upsert

def upsert(self, name, points):
    _upsert(self, name, points)
    print(f"progress {len(points)}", flush=True)

EdgeStore.upsert = upsert
from hyde_tutor.cli import app
app(["ingest", "--collection", sys.argv[1], "--file", sys.argv[2]], prog_name="hyde-tutor")
"""

_TOPICS = ["частицы 은/는", "вежливость 해요체", "прошедшее время 았/었", "желание 고 싶다", "причина 아서/어서"]


def _record(i: int) -> dict[str, str]:
    return {"_id": f"doc-{i:05d}", "title": f"Урок {i}: {_TOPICS[i % len(_TOPICS)]}",
            "text": f"Пример {i}: 학교에 가고 싶어요 {i % 97}. Короткое объяснение номер {i}."}


def _write_corpus(path: Path) -> dict[int, str]:
    """N_DOCS good lines with bad ones mixed in; returns {line number: what is wrong with it}."""
    bad: dict[int, bytes] = {
        7: b'{"_id": "broken", "title": ',  # malformed JSON
        1500: b'{"_id": "huge", "title": "t", "text": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}',  # oversized
        2222: '{"_id": "latin1", "title": "caf\u00e9"}'.encode("latin-1"),  # not UTF-8
        2900: b'{"title": "no id at all"}',  # wrong shape
    }
    lines: list[bytes] = []
    i = 0
    while i < N_DOCS:
        line_no = len(lines) + 1
        if line_no in bad:
            lines.append(bad[line_no])
        else:
            lines.append(json.dumps(_record(i), ensure_ascii=False).encode("utf-8"))
            i += 1
    path.write_bytes(b"\n".join(lines) + b"\n")
    return {7: "invalid JSON", 1500: "limit", 2222: "UTF-8", 2900: "unknown record shape"}


def _start(corpus: Path, data_dir: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDE_", "OPENAI_"))}
    env.update(HYDE_DATA_DIR=str(data_dir), HYDE_INDEX__BATCH_SIZE=str(BATCH), PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", _RUN, COLLECTION, str(corpus)], cwd=data_dir.parent, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _state(data_dir: Path) -> tuple[int, dict[str, str]]:
    """(point count, point id -> stored content hash) for every document id of the corpus."""
    with EdgeStore(data_dir / "edge") as store:
        ids = [point_id_for(f"doc-{i:05d}") for i in range(N_DOCS)]
        return store.count(COLLECTION), store.stored_hashes(COLLECTION, ids)


def test_ingest_killed_halfway_then_rerun_writes_each_document_once(tmp_path: Path, hash_embedder, bm25) -> None:
    corpus = tmp_path / "corpus.jsonl"
    bad_lines = _write_corpus(corpus)
    data_dir = tmp_path / "data"

    # 1. start, kill -9 once a third of the corpus is in
    proc = _start(corpus, data_dir)
    assert proc.stdout is not None
    written = 0
    deadline = time.monotonic() + 240
    for line in proc.stdout:
        if line.startswith("progress "):
            written += int(line.split()[1])
        if written >= N_DOCS // 3 or time.monotonic() > deadline:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()[-2000:] if proc.stderr else ""
    assert N_DOCS // 3 <= written < N_DOCS  # really half-way: the run was cut short

    count, stored = _state(data_dir)  # the killed process's lock went with it
    assert written <= count < N_DOCS  # every batch it reported survived the kill (WAL), the rest is missing
    assert len(stored) == count
    print(f"killed after {written} reported, {count} points survived")

    # 2. re-run to completion
    proc = _start(corpus, data_dir)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-2000:]  # completed, but the corpus has bad lines
    summary = next(line for line in out.splitlines() if line.startswith(f"{COLLECTION}:"))
    assert f"{N_DOCS} documents read" in summary and f"{N_DOCS} points in collection" in summary
    assert f"{N_DOCS - count} written, {count} unchanged" in summary  # only the missing part was written
    for line_no, reason in bad_lines.items():
        assert re.search(rf"skipped line {line_no}: .*{re.escape(reason)}", out), (line_no, out[-3000:])
    assert f"{len(bad_lines)} bad lines" in summary

    # 3. exactly one point per document, each with the right content
    count, stored = _state(data_dir)
    assert count == N_DOCS == len(stored)
    expected = {point_id_for(f"doc-{i:05d}"): record_to_document(_record(i)).content_hash for i in range(N_DOCS)}
    assert stored == expected
    with EdgeStore(data_dir / "edge") as store:
        hits = Retriever(store, hash_embedder, bm25).search(COLLECTION, "Урок 1234", top_k=50)
    ids = [h.doc_id for h in hits]
    assert len(ids) == len(set(ids)) and "doc-01234" in ids  # no duplicate points behind one document
