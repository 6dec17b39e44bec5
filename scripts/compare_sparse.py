"""Kiwi BM25 (hyde-tutor's analyser) vs fastembed BM25 (``Qdrant/bm25``, russian and english) on the bundled sets.

Each corpus is indexed three times in qdrant-client's local mode (a temporary folder), with the same USE
dense vectors: once by ``ingest_documents`` (kiwi morphemes + Snowball, hyde-tutor's default), and twice
the reference guide's way (fastembed ``SparseTextEmbedding("Qdrant/bm25")`` document vectors, a sparse
vector with Qdrant's IDF modifier), searched through a collection schema. Plain retrieval, no HyDE.

    .venv/bin/python scripts/compare_sparse.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from qdrant_client import models

from hyde_tutor.config import RetrievalSettings
from hyde_tutor.retrieval.embedders import UseEmbedder
from hyde_tutor.evaluation.beir import load_beir
from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents, read_documents
from hyde_tutor.evaluation.metrics import ndcg_at_k, recall_at_k
from hyde_tutor.retrieval.retriever import Retriever
from hyde_tutor.retrieval.schemas import CollectionSchema, FastembedBm25
from hyde_tutor.retrieval.sparse import Bm25Encoder
from hyde_tutor.retrieval.store import QdrantClientStore

SETS = [("grammar", "data/grammar.jsonl", "data/eval/grammar"), ("docs", "data/docs.jsonl", "data/eval/docs"),
        ("holdout", "data/grammar.jsonl", "data/eval/grammar_holdout")]


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="hyde-sparse-"))
    store = QdrantClientStore.local(str(root / "qdrant"))
    dense = UseEmbedder()
    kiwi = Bm25Encoder()
    schemas: dict[str, CollectionSchema] = {}
    built: set[str] = set()
    for _, corpus, _ in SETS:
        name = Path(corpus).stem
        if name in built:
            continue
        built.add(name)
        docs, _ = read_documents(Path(corpus))
        ingest_documents(docs, IngestRequest(collection=f"{name}_kiwi", progress=False), store, dense, kiwi)
        vectors = dense.embed([d.text for d in docs])
        for lang in ("russian", "english"):
            collection = f"{name}_fastembed_{lang}"
            fe = FastembedBm25(lang, root / "fastembed")
            store.client.create_collection(collection, vectors_config={
                "dense": models.VectorParams(size=dense.dim, distance=models.Distance.COSINE)},
                sparse_vectors_config={"bm25": models.SparseVectorParams(modifier=models.Modifier.IDF)})
            sparse = fe.encode_documents([d.text for d in docs])
            store.client.upsert(collection, [models.PointStruct(id=d.point_id, payload={"doc_id": d.id}, vector={
                "dense": vectors[i].tolist(),
                "bm25": models.SparseVector(indices=list(sparse[i].indices), values=list(sparse[i].values))})
                for i, d in enumerate(docs)])
            schemas[collection] = CollectionSchema(name=collection, dense_vector="dense", sparse_vector="bm25",
                                                   sparse_encoder="fastembed", fastembed_language=lang)
    retriever = Retriever(store, dense, kiwi, RetrievalSettings(), schemas=schemas, fastembed_dir=root / "fastembed")
    print("nDCG@10 / recall@5, plain retrieval (no HyDE); fused = Qdrant DBSF of USE + the sparse leg")
    print("| sparse analyser | " + " | ".join(f"{s} alone | {s} fused with USE" for s, _, _ in SETS) + " |")
    print("|---|" + "---|---|" * len(SETS))
    for label, suffix in (("kiwi + Snowball (default)", "kiwi"), ("fastembed BM25, russian", "fastembed_russian"),
                          ("fastembed BM25, english (as the guide)", "fastembed_english")):
        cells = []
        for _, corpus, eval_dir in SETS:
            data = load_beir(Path(eval_dir))
            collection = f"{Path(corpus).stem}_{suffix}"
            texts = [q.text for q in data.queries]
            for mode in ("sparse", "hybrid"):
                runs = retriever.search_many(collection, texts, 10, mode)  # type: ignore[arg-type]
                nd = np.mean([ndcg_at_k([h.doc_id for h in r], data.qrels[q.id], 10) for q, r in zip(data.queries, runs)])
                r5 = np.mean([recall_at_k([h.doc_id for h in r], data.qrels[q.id], 5) for q, r in zip(data.queries, runs)])
                cells.append(f"{nd:.3f} / {r5:.3f}")
        print(f"| {label} | " + " | ".join(cells) + " |")
    store.close()


if __name__ == "__main__":
    main()
