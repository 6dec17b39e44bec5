"""Plain hybrid retrieval: Korean-aware analysis, BM25, dense embedders, vector stores, the retriever."""
