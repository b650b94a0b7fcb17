"""A cap on the size of a reply, enforced while it is read, for the SDKs that read through httpx or httpx2.

The OpenAI and Anthropic SDKs read through httpx2, google-genai through httpx. Both libraries call
*response hooks* once the headers are in and before the body is read; `install_reply_cap` adds one to an
`AsyncClient` (the SDK's default one, or one the user passed as ``http_client``) that

- refuses at once a reply whose ``Content-Length`` is over the cap;
- swaps the body stream for one that counts the bytes as they come and stops reading past the cap;
- decodes gzip and deflate itself, counting the decoded bytes (a small compressed body may inflate to
  gigabytes), after a request hook asked for no other encoding; any other encoding is refused.

What stops the read is `ReplyTooLarge`, which no SDK wraps (it is not one of the HTTP library's errors); the
client's `_retry.call_with_retries` turns it into a `ModelError` that is not retried. Memory for a refused
reply is bounded by the cap plus one read chunk, instead of a few times the reply's size.
"""

from __future__ import annotations

import functools
import importlib
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from rlm_adapters.core.lm._reply import shown
from rlm_adapters.errors import ConfigurationError

DEFAULT_MAX_REPLY_BYTES = 32 * 2**20  # far above any model's reply (a 128k-token reply is about 0.5 MiB of JSON)
ACCEPTED_ENCODINGS = "gzip, deflate"
_MARK = "_rlm_reply_cap"


class ReplyTooLarge(Exception):
    """A reply passed the client's ``max_reply_bytes``; raised while reading it."""

    def __init__(self, limit: int, *, declared: int | None = None, encoding: str | None = None) -> None:
        if encoding is not None:
            detail = f"the reply is encoded as {encoding!r}, which was not asked for (only {ACCEPTED_ENCODINGS})"
        elif declared is not None:
            detail = f"the reply declares {declared:,} bytes (Content-Length), over max_reply_bytes={limit:,}"
        else:
            detail = f"the reply passed max_reply_bytes={limit:,} bytes; reading stopped there"
        super().__init__(f"{detail} (raise max_reply_bytes in backend_kwargs if such replies are expected)")
        self.limit = limit


def too_large_in(exc: BaseException) -> ReplyTooLarge | None:
    """The `ReplyTooLarge` behind `exc` (itself, or a cause an SDK wrapped), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ReplyTooLarge):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def max_reply_bytes(backend: str, kwargs: dict[str, Any]) -> int:
    """Pop and check ``max_reply_bytes`` from a backend's settings (default `DEFAULT_MAX_REPLY_BYTES`)."""
    value = kwargs.pop("max_reply_bytes", DEFAULT_MAX_REPLY_BYTES)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1024:
        raise ConfigurationError(
            f"backend {backend!r}: max_reply_bytes={value!r} must be a whole number of bytes >= 1024 "
            f"(default {DEFAULT_MAX_REPLY_BYTES:,})"
        )
    return value


class _Counter:
    """Counts bytes against the cap (the raw ones and the decoded ones separately)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen = 0

    def add(self, size: int) -> None:
        self.seen += size
        if self.seen > self.limit:
            raise ReplyTooLarge(self.limit)


async def _capped(chunks: AsyncIterator[bytes], limit: int, encoding: str | None) -> AsyncIterator[bytes]:
    """The body's bytes, decoded when `encoding` is gzip or deflate, never more than `limit` of either kind."""
    raw, decoded = _Counter(limit), _Counter(limit)
    decoder = None if encoding is None else _decoder(encoding)
    async for chunk in chunks:
        raw.add(len(chunk))
        if decoder is None:
            yield chunk
            continue
        # max_length bounds what one call may inflate: a bomb stops at the cap, not after filling memory.
        data = chunk
        while data:
            out = decoder.decompress(data, limit - decoded.seen + 1)
            decoded.add(len(out))
            if out:
                yield out
            data = decoder.unconsumed_tail
    if decoder is not None:
        tail = decoder.flush()
        decoded.add(len(tail))
        if tail:
            yield tail


def _decoder(encoding: str) -> Any:
    if encoding == "gzip":
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    return zlib.decompressobj()  # deflate (zlib-wrapped, as HTTP's "deflate" is)


@functools.cache
def _stream_class(module: Any) -> type:
    """An `AsyncByteStream` of `module` (httpx or httpx2) over an async iterator of bytes."""

    class CappedStream(module.AsyncByteStream):  # type: ignore[misc]
        def __init__(self, inner: Any, chunks: AsyncIterator[bytes]) -> None:
            self._inner = inner
            self._chunks = chunks

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self._chunks:
                yield chunk

        async def aclose(self) -> None:
            await self._inner.aclose()

    return CappedStream


def _hooks(module: Any, limit: int) -> tuple[Callable[[Any], Awaitable[None]], Callable[[Any], Awaitable[None]]]:
    async def on_request(request: Any) -> None:
        request.headers["accept-encoding"] = ACCEPTED_ENCODINGS

    async def on_response(response: Any) -> None:
        declared = response.headers.get("content-length", "")
        if declared.strip().isdigit() and int(declared) > limit:
            raise ReplyTooLarge(limit, declared=int(declared))
        encodings = [
            e.strip().lower() for e in response.headers.get_list("content-encoding", split_commas=True) if e.strip()
        ]
        encodings = [e for e in encodings if e != "identity"]
        if len(encodings) > 1 or (encodings and encodings[0] not in ("gzip", "deflate")):
            raise ReplyTooLarge(limit, encoding=", ".join(encodings))
        encoding = encodings[0] if encodings else None
        if encoding is not None:
            del response.headers["content-encoding"]  # decoded here, under the cap; the library must not again
        inner = response.stream
        response.stream = _stream_class(module)(inner, _capped(inner.__aiter__(), limit, encoding))

    setattr(on_request, _MARK, limit)
    setattr(on_response, _MARK, limit)
    return on_request, on_response


def install_reply_cap(client: Any, limit: int) -> Any:
    """Add the cap's hooks to an httpx or httpx2 `AsyncClient` (first, so that no other hook reads the body
    before it); a client that already has a cap keeps the smaller one. Returns `client`."""
    module = _module_of(client)
    hooks = client.event_hooks
    existing = [getattr(h, _MARK) for h in hooks.get("response", []) if hasattr(h, _MARK)]
    if existing and min(existing) <= limit:
        return client
    on_request, on_response = _hooks(module, limit)
    rest = {kind: [h for h in hooks.get(kind, []) if not hasattr(h, _MARK)] for kind in ("request", "response")}
    client.event_hooks = {"request": [*rest["request"], on_request], "response": [on_response, *rest["response"]]}
    return client


def reply_cap_hooks(module: Any, limit: int) -> dict[str, list[Callable[[Any], Awaitable[None]]]]:
    """The cap's hooks as an ``event_hooks`` argument for a new `AsyncClient` of `module` (httpx or httpx2)."""
    on_request, on_response = _hooks(module, limit)
    return {"request": [on_request], "response": [on_response]}


def _module_of(client: Any) -> Any:
    for name in ("httpx2", "httpx"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if isinstance(client, module.AsyncClient):
            return module
    raise ConfigurationError(
        f"http_client must be an httpx2 or httpx AsyncClient (the reply size cap hooks into it), got {shown(client)}"
    )
