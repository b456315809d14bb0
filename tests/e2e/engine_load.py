"""A closed-loop load on an OpenAI-compatible server, run as its own process (stdlib only).

    python engine_load.py URL REQUESTS CONCURRENCY MAX_TOKENS

``REQUESTS`` completions, ``CONCURRENCY`` at a time, greedy, ``ignore_eos`` (so every request
generates ``MAX_TOKENS``), streamed. Prints one JSON line: the wall seconds, the tokens, the sum of the
requests' own latencies (sent to answered), and the sum of their decode times (first token to
last, over the tokens after the first): the client's view of what the server's
``inter_token_latency_seconds`` adds up, leaving out the first token (queue and prefill, which a
server waking from idle can take a long time over) and any time between requests.

It runs in a session of its own (``tests/e2e/engine.py`` starts it so): with Linux's autogroup
scheduling, busy processes in the test's session would otherwise take this client's turns, so it
sent its next request late and the server ran one request where the load asked for two.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.request

TIMEOUT = 900


def complete(url: str, prompt: list[int], max_tokens: int) -> tuple[float, float]:
    """One streamed completion: (seconds to its first token, seconds from its first token to its
    last), the second being what the server's inter-token latencies add up to."""
    body = json.dumps(
        {
            "model": "tiny",
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    request = urllib.request.Request(
        f"{url}/v1/completions", body, {"Content-Type": "application/json"}
    )
    sent = time.monotonic()
    first = last = None
    tokens = 0
    with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
        for raw in answer:  # server-sent events, one output step of this request each
            line = raw.decode("utf-8").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: ") :])
            if chunk.get("choices"):
                last = time.monotonic()
                first = first or last
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    if tokens != max_tokens or first is None or last is None:
        raise RuntimeError(f"asked for {max_tokens} tokens, got {tokens}")
    return first - sent, last - first


def main(url: str, requests: int, concurrency: int, max_tokens: int) -> None:
    todo = iter(range(requests))
    lock = threading.Lock()
    errors: list[BaseException] = []
    latencies: list[float] = []
    decodes: list[float] = []

    def worker() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            sent = time.monotonic()
            try:
                _, decode = complete(
                    url, [3 + (17 * i) % 500, 40 + i % 400, 100 + (3 * i) % 300], max_tokens
                )
            except BaseException as exc:  # reported after the join
                errors.append(exc)
                return
            with lock:
                latencies.append(time.monotonic() - sent)
                decodes.append(decode)

    started = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    print(
        json.dumps(
            {
                "seconds": time.monotonic() - started,
                "tokens": requests * max_tokens,
                "latency_s": sum(latencies),
                "decode_s": sum(decodes),
                "decode_tokens": requests * (max_tokens - 1),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
