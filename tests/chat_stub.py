"""A tiny OpenAI-compatible chat-completions server on 127.0.0.1 (a transport-level test double).

Requests WITH tools (the tutor agent): first turn answers with a ``grammar_search`` tool call, the turn
after a tool result answers in text quoting the first result id. Requests WITHOUT tools (hypothesis
generation) get a grammar-entry-shaped hypothesis.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

def completion(message: dict, model: str = "stub", finish_reason: str = "stop") -> dict:
    """An OpenAI chat-completion body around one assistant ``message``."""
    return {
        "id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def send_json(handler: BaseHTTPRequestHandler, data: bytes | dict) -> None:
    """Write a 200 response with a JSON body (``bytes`` are sent as they are)."""
    body = data if isinstance(data, bytes) else json.dumps(data, ensure_ascii=False).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


HYPOTHESIS = "Конструкция: -고 싶다\nНазвание: желание «хотеть»\nОбъяснение: желание говорящего. Пример: 가고 싶어요. — Хочу пойти."


class _Handler(BaseHTTPRequestHandler):
    log: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.log.append(body)
        messages = body["messages"]
        if not body.get("tools"):
            message = {"role": "assistant", "content": HYPOTHESIS}
        elif messages[-1]["role"] == "tool":
            result = json.loads(messages[-1]["content"])
            first = result["results"][0]["id"] if result.get("results") else "ничего"
            message = {"role": "assistant", "content": f"Используйте конструкцию из статьи {first}: 가고 싶어요."}
        else:
            question = next(m["content"] for m in messages if m["role"] == "user")
            args = json.dumps({"query": question, "use_hyde": True}, ensure_ascii=False)
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{len(_Handler.log)}", "type": "function", "function": {"name": "grammar_search", "arguments": args}}
            ]}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        send_json(self, completion(message, body.get("model", "stub"), finish))

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Run ``handler`` on a free port of 127.0.0.1 in a thread; yield the ``/v1`` base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def chat_stub() -> Iterator[tuple[str, list[dict]]]:
    _Handler.log = []
    with serve(_Handler) as url:
        yield url, _Handler.log
