"""``hyde-tutor inspect``: what a collection holds and whether hyde-tutor can search it as configured."""

from __future__ import annotations

import json
from typing import Any

from ..errors import EmbedderMismatchError
from ..retrieval.retriever import Retriever
from ..retrieval.store.base import CollectionInfo

__all__ = ["CollectionInfo", "describe_collection", "inspect_report"]


def describe_collection(retriever: Retriever, name: str) -> CollectionInfo:
    """What the retriever's store says about collection ``name`` (its own :meth:`describe_collection`)."""
    return retriever.store.describe_collection(name)


def _suggest_schema(info: CollectionInfo, dense_dim: int) -> dict[str, Any]:
    dense_name = next((n for n, (size, _) in info.dense.items() if size == dense_dim), next(iter(info.dense), "dense"))
    sparse_name = next(iter(info.sparse), None)
    strings = [k for k, v in info.sample.items() if isinstance(v, str)]
    longest = max(strings, key=lambda k: len(str(info.sample[k])), default=None)
    suggestion: dict[str, Any] = {"dense_vector": dense_name, "sparse_vector": sparse_name,
                                  "sparse_encoder": "fastembed" if sparse_name and "bm25" in sparse_name.lower() else "kiwi",
                                  "title_fields": [k for k in strings if k != longest][:2],
                                  "text_fields": [longest] if longest else []}
    return suggestion


def inspect_report(retriever: Retriever, name: str) -> tuple[str, bool]:
    """A readable report, and whether the collection is searchable with the current settings."""
    info = describe_collection(retriever, name)
    lines = [f"collection {name!r}: {info.points} points"]
    lines += [f"  dense vector {n or '(unnamed)'!r}: {size}-d, {dist}" for n, (size, dist) in info.dense.items()]
    lines += [f"  sparse vector {n!r}: modifier {mod}" for n, mod in info.sparse.items()]
    sample = json.dumps(info.sample, ensure_ascii=False)
    lines.append(f"  sample payload: {sample[:300]}{'…' if len(sample) > 300 else ''}")
    dim = retriever.dense.dim
    problems: list[str] = []
    schema = retriever.schemas.get(name)
    if info.built_by_hyde_tutor and schema is None:
        lines.append(f"  built by hyde-tutor with {info.built_by_hyde_tutor}")
        try:
            retriever.check_collection(name)
        except EmbedderMismatchError as exc:
            problems.append(str(exc))
    elif schema is not None:
        lines.append(f"  schema in settings: dense {schema.dense_vector!r}, sparse {schema.sparse_vector!r} "
                     f"({schema.sparse_encoder}), title {list(schema.title_fields)}, text {list(schema.text_fields)}")
        if schema.dense_vector not in info.dense:
            problems.append(f"the schema's dense vector {schema.dense_vector!r} is not in the collection "
                            f"(it has {sorted(info.dense)})")
        elif info.dense[schema.dense_vector][0] != dim:
            problems.append(f"the dense vector {schema.dense_vector!r} is {info.dense[schema.dense_vector][0]}-d but the "
                            f"configured embedder {retriever.dense.name} makes {dim}-d vectors (HYDE_DENSE__PROVIDER)")
        if schema.sparse_vector and schema.sparse_vector not in info.sparse:
            problems.append(f"the schema's sparse vector {schema.sparse_vector!r} is not in the collection")
        elif schema.sparse_vector and schema.sparse_encoder == "fastembed" and info.sparse[schema.sparse_vector] != "idf":
            problems.append(f"{schema.sparse_vector!r} has no IDF modifier: fastembed BM25 query vectors weight every "
                            "term 1 and rely on Qdrant's IDF")
    else:
        suggestion = {name: _suggest_schema(info, dim)}
        problems.append("hyde-tutor did not build it and no schema describes it. Add (check the fields):\n"
                        f"    HYDE_SCHEMAS='{json.dumps(suggestion, ensure_ascii=False)}'")
    if problems:
        lines.append("  NOT searchable as configured:")
        lines += [f"  - {p}" for p in problems]
    else:
        lines.append(f"  searchable as configured (dense embedder {retriever.dense.name}, "
                     f"sparse {retriever.sparse_for(name).name})")
    return "\n".join(lines), not problems
