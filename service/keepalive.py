"""Keep-alive: when a silent stream is answered, and why it gets idle ticks.

``Serving.events`` yields ``Idle`` whenever a stream has been silent for the
keep-alive interval; the gateway frames it as an SSE comment (``gateway/sse.py``).

Proxies and load balancers close connections that carry no bytes for a
while (nginx ``proxy_read_timeout`` and AWS ALB default to 60 s). A stream
can be silent that long for good reasons: a long prefill, a full batch, an
engine step stalled behind others on a shared device. An SSE comment
(``: keep-alive``) is bytes on the wire that every SSE client, the ``openai``
SDK included, ignores.

Headers first: the gateway pulls a stream's first engine event before it
sends 200, so that an engine refusing the request becomes a real 4xx/5xx
(STYLE.md). Before the headers nothing, not even a comment, can be sent; so a
stream whose first event has not come within one keep-alive interval (a
request queued behind a full batch, or prefilling a long prompt) is answered
200 at that point and kept alive from then on. Refusals come at once, long
before an interval passes; an error that arrives later is reported in the
stream (an error event, then ``[DONE]``), like any mid-stream failure.
Non-streaming requests cannot be kept alive: proxies in front of them need an
idle timeout above ``request_timeout_s``.
"""

from __future__ import annotations


def first_event_wait(stream: bool, interval_s: float) -> float:
    """How long to wait for a first event before answering; 0 = as long as it takes."""
    return interval_s if stream else 0.0
