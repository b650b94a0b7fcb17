"""The HTTP app of `rlm serve`: ``POST /v1/chat/completions`` and ``GET /v1/models``, as OpenAI serves them.

A request is admitted before its body is read: at most ``max_runs`` run and ``max_waiting`` more are read,
checked or wait for a slot (beyond, 429 at once), so what the server holds is bounded by the body limit
times that count. Its body is read (bounded), then parsed and checked on a worker thread, at most
`CHECKS_AT_ONCE` at a time (a parsed body is many times its bytes): every field, the tools' and the answer's
schemas (cheap size bounds first), the run's options and its `RLM`. A checked request that waits for a slot
keeps its body's bytes, not the parsed tree; its run parses the conversation again on its own thread
(`RunHandle`), with its own loop, so the server's loop does nothing but move bytes. Non-streaming requests
get one ``chat.completion``;
streaming ones get the opening chunk at once, the run's progress as ``reasoning_content`` deltas and SSE
comments while it works, then the answer's chunks and ``data: [DONE]``. A client that disconnects stops
its run: the sandbox is closed, and with a call cache a retry replays every call that had come back.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rlm_adapters.core import RLM, AnswerDelta, Event, OutputSchema, RLMLogger, RLMResult, RunHandle, RunStarted
from rlm_adapters.core.adapter_kit import DEFAULTS, EventTally, close_shielded, offer_tools, tokens_for_chars
from rlm_adapters.core.cache import CallCache
from rlm_adapters.errors import ConfigurationError, MissingExtraError, RLMError, ToolSchemaError
from rlm_adapters.hosting import conversation_input
from rlm_adapters.http_guard import BearerToken, host_allowed, is_loopback, origin_allowed
from rlm_adapters.serve.errors import OpenAIError, invalid
from rlm_adapters.serve.keys import bearer_keys, key_of, key_refusal, unpaid
from rlm_adapters.serve.request import ChatRequest, conversation_of, parse_request
from rlm_adapters.serve.response import Chunks, answer_of, completion
from rlm_adapters.serve.runner import start_run, stop
from rlm_adapters.serve.served_models import SERVER_CEILINGS, Ceilings, ServedModel

if TYPE_CHECKING:
    from rlm_adapters.core.cache import KeyAccount, KeyStore

logger = logging.getLogger("rlm_adapters.serve")
JSON_HEADERS = [(b"content-type", b"application/json")]
FINDING = "finding sources"  # the progress once the answer exists, while its sources are found
# Bodies parsed and checked at once: a parsed body holds up to ~12 times its bytes (short strings in a
# long array), so this, times the body limit, bounds that part of the server's memory (docs/serve.md).
CHECKS_AT_ONCE = 2
SHUTTING_DOWN = "server_shutting_down"  # the error code of a request the stopping server cancelled
NO_RETRY = ((b"x-should-retry", b"false"),)  # the openai SDK's header: this error is not worth a retry


@dataclass(frozen=True)
class ServeConfig:
    """What `rlm serve` serves, and the limits every request and run stays under.

    Attributes:
        models: The served models (the first one is not a default: a client always names its model).
        ceilings: The most any run may use (the limits a model leaves out).
        environment: The sandbox kind of every run (the default sandbox unless the operator picks another).
        environment_kwargs: Its options.
        cache: The call cache every run shares (a retried request replays the calls that came back).
        logger: Writes each run's trajectory.
        token: The bearer token every request must carry (required off loopback).
        host: The address the server listens on (loopback: Host headers must name a loopback address).
        max_runs: Runs at once, over all clients.
        max_waiting: Requests that may be read, checked or wait for a run slot besides the runs; one more is
            refused with 429 before its body is read (docs/serve.md sizes the memory this bounds).
        max_body_bytes: The largest request body.
        heartbeat: Seconds without an event after which a stream gets an SSE comment (clients' read timeouts).
        progress: Stream the run's progress as ``reasoning_content`` deltas (else only SSE comments).
        sources_timeout: Seconds a run's sources may take once its answer exists (what is not finished then is
            named in the response's ``rlm.sources_note``); None: no bound.
        send_timeout: Seconds one write to a client may wait (its socket full: it reads nothing); past it, the
            client is treated as gone (its run stopped, its slot freed).
        request_timeout: Seconds a client has to send a request's headers (`rlm_adapters.serve.http`), and
            then its body (else 408).
        keys: The store's keys (``--store postgresql://...``), accepted as bearer tokens beside `token`, each
            with its budget and models (`serve/keys.py`); None without such a store.
    """

    models: Sequence[ServedModel]
    ceilings: Ceilings = SERVER_CEILINGS
    environment: str = DEFAULTS.environment
    environment_kwargs: Mapping[str, Any] = field(default_factory=dict)
    cache: CallCache | None = None
    logger: RLMLogger | None = None
    token: str | None = field(default=None, repr=False)
    host: str = "127.0.0.1"
    max_runs: int = 4
    max_waiting: int = 8
    max_body_bytes: int = 64 * 1024 * 1024
    heartbeat: float = 10.0
    progress: bool = True
    sources_timeout: float | None = DEFAULTS.sources_timeout
    send_timeout: float = 60.0
    request_timeout: float = 120.0
    keys: KeyStore | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        names = [model.name for model in self.models]
        if not names:
            raise ConfigurationError("no model to serve: give --model NAME=ROOT_MODEL at least once")
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ConfigurationError(f"--model {twice[0]!r} is given twice: each served name once")
        if self.sources_timeout is not None and not self.sources_timeout > 0:
            raise ConfigurationError(
                f"--sources-timeout {self.sources_timeout!r} must be 0 (no bound) or a positive number of seconds"
            )
        if not self.token and self.keys is None and not is_loopback(self.host):
            raise ConfigurationError(
                f"--host {self.host!r} is not loopback: set a token (--token-file FILE or RLM_SERVE_TOKEN), or every "
                "machine that reaches the port can spend your model budget"
            )
        for name in ("max_runs", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"--{name.replace('_', '-')} must be at least 1")
        if self.max_waiting < 0 or not self.heartbeat > 0 or not self.send_timeout > 0 or not self.request_timeout > 0:
            raise ConfigurationError(
                "--max-waiting must be >= 0; the heartbeat, --send-timeout and --request-timeout > 0 seconds"
            )


class ClientGone(Exception):
    """A write to the client waited past ``send_timeout``: it reads nothing, so it is treated as gone."""


def bounded(send: Send, timeout: float) -> Send:
    """`send`, each call of which raises `ClientGone` when it waits more than `timeout` seconds (a client that
    stopped reading would otherwise hold its handler, its run and its slot for as long as it keeps the socket)."""

    async def send_within(message: Message) -> None:
        try:
            await asyncio.wait_for(send(message), timeout)
        except TimeoutError:
            raise ClientGone from None

    return send_within


def error_response(error: OpenAIError) -> Response:
    """An OpenAI-style error response."""
    return JSONResponse(error.body(), status_code=error.status)


async def send_error(send: Send, error: OpenAIError, extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
    """Write an OpenAI-style error as a whole response (raw ASGI)."""
    await send({"type": "http.response.start", "status": error.status, "headers": [*JSON_HEADERS, *extra]})
    await send({"type": "http.response.body", "body": json.dumps(error.body()).encode()})


class Guard:
    """ASGI middleware: on loopback, a loopback ``Host``; from a browser, a loopback ``Origin``; with a token,
    ``Authorization: Bearer <token>`` (OpenAI clients send their API key so: `BearerToken`, as ``rlm-mcp``'s,
    refusing in OpenAI's shape). Checked before any route."""

    def __init__(self, app: ASGIApp, config: ServeConfig) -> None:
        # On loopback without a token every request passes, as before; a key is still its own principal there.
        anonymous = config.token is None and is_loopback(config.host)
        keys = None if config.keys is None else bearer_keys(config.keys, anonymous=anonymous)
        checked = config.token is not None or keys is not None
        self.app: ASGIApp = BearerToken(app, config.token, _no_api_key, keys=keys) if checked else app
        self.loopback = is_loopback(config.host)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for key, value in scope.get("headers") or []:
            headers.setdefault(key, value)
        host = headers.get(b"host", b"").decode("latin-1")
        origin = headers.get(b"origin")
        if self.loopback and not host_allowed(host):
            await send_error(
                send,
                OpenAIError(
                    421,
                    f"Host {host[:80]!r} is not this server's loopback address",
                    "permission_error",
                    code="invalid_host",
                ),
            )
            return
        if not origin_allowed(None if origin is None else origin.decode("latin-1")):
            await send_error(
                send,
                OpenAIError(
                    403, "requests from web pages of other sites are refused", "permission_error", code="invalid_origin"
                ),
            )
            return
        await self.app(scope, receive, send)


async def _no_api_key(send: Send, presented: bool) -> None:
    """OpenAI's 401 for a request without the server's token (`presented`: with another one)."""
    message = (
        "Incorrect API key provided: send the server's token as the API key (Authorization: Bearer ...)"
        if presented
        else "You didn't provide an API key: send the server's token as the API key (Authorization: Bearer ...)"
    )
    await send_error(
        send,
        OpenAIError(401, message, "invalid_request_error", code="invalid_api_key"),
        [(b"www-authenticate", b'Bearer realm="rlm-serve"')],
    )


@dataclass
class Prepared:
    """A checked request waiting for its run: its fields and engine, and its body's bytes (not the parsed
    conversation, which is many times bigger: the run parses it again, on its own thread).

    Attributes:
        request: The checked fields (``entries`` left empty).
        rlm: The request's engine.
        body: The request's body, until its run takes it (`take_input`).
    """

    request: ChatRequest
    rlm: RLM
    body: bytes | None
    account: KeyAccount | None = None

    def take_input(self) -> tuple[Any, str, dict[str, Any]]:
        """The run's context and question, and its conversation for the direct route, from the body (then
        dropped); called on the run's thread."""
        body, self.body = self.body, None
        if body is None:
            raise RuntimeError("a request's input is taken once")
        try:
            entries = conversation_of(body)
            context, query = conversation_input(entries)
        except ValueError as exc:
            raise invalid(str(exc), "messages") from None
        return context, query, {"chat": entries}


class Server:
    """The served models and the runs in flight (one per app).

    Args:
        config: What to serve.
    """

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.models = {model.name: model for model in config.models}
        self.runs: set[RunHandle] = set()
        self.waiting = 0
        # Requests being read, checked, waiting for a slot or running: counted before their body is read,
        # with no await between the check and the count, so that a burst of requests cannot all pass the
        # check before any of them is counted, and a body in flight is held against the same capacity.
        self.admitted = 0
        self._slots: asyncio.Semaphore | None = None
        self._checks: asyncio.Semaphore | None = None
        self._stopped: asyncio.Future[None] | None = None

    @property
    def stopped(self) -> asyncio.Future[None]:
        """Done once `stop_runs` was called: the server stops, and no run may go on."""
        if self._stopped is None:  # made in the server's loop
            self._stopped = asyncio.get_running_loop().create_future()
        return self._stopped

    def stop_runs(self) -> None:
        """Cancel every run in flight and refuse the requests still to run (a second Ctrl-C, or the grace period
        over): each client gets the `shutting_down` error, each run's paid calls are counted as cut."""
        if not self.stopped.done():
            self.stopped.set_result(None)
        for run in self.runs:
            run.cancel()

    @property
    def slots(self) -> asyncio.Semaphore:
        if self._slots is None:  # made in the server's loop
            self._slots = asyncio.Semaphore(self.config.max_runs)
        return self._slots

    def load(self) -> None:
        """Import what every request uses: build (and close) each served model's engine, load jsonschema.

        Nothing here may fail the start: a model without a key is the first request's 500, as before.
        """
        with contextlib.suppress(ImportError):  # jsonschema is optional (the tools extra)
            offer_tools([{"name": "warm", "parameters": {"type": "object"}}])
        for model in self.config.models:
            with contextlib.suppress(Exception):
                RLM(**model.rlm_options(self.config.ceilings), environment=self.config.environment).close()

    @property
    def checks(self) -> asyncio.Semaphore:
        """The bodies parsed and checked at once (`CHECKS_AT_ONCE`)."""
        if self._checks is None:  # made in the server's loop
            self._checks = asyncio.Semaphore(CHECKS_AT_ONCE)
        return self._checks

    # -- GET /v1/models ---------------------------------------------------------------------------
    async def list_models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [m.described() for m in self.config.models]})

    async def get_model(self, request: Request) -> Response:
        name = request.path_params["name"]
        model = self.models.get(name)
        if model is None:
            return error_response(not_found(name))
        return JSONResponse(model.described())

    # -- POST /v1/chat/completions (raw ASGI: the disconnect must be watched while the run works) -----
    async def chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await send_error(
                send,
                OpenAIError(
                    405, f"{scope['method']} is not allowed: POST a chat completion", code="method_not_allowed"
                ),
                [(b"allow", b"POST")],
            )
            return
        if self.stopped.done():
            await send_error(send, shutting_down(), NO_RETRY)
            return
        if self.admitted >= self.config.max_runs + self.config.max_waiting:
            busy = OpenAIError(
                429,
                f"the server is running {self.config.max_runs} runs and "
                f"{self.config.max_waiting} more requests are being read or waiting: retry later",
                "rate_limit_error",
                code="server_busy",
            )
            await send_error(send, busy, [(b"retry-after", b"5")])
            return
        self.admitted += 1
        try:
            await self._admitted(scope, receive, send)
        finally:
            self.admitted -= 1

    async def _admitted(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body = await self._body_within(scope, receive)
            async with self.checks:
                prepared = await asyncio.to_thread(self.prepare, body)
            del body  # the prepared request holds it until its run starts
        except OpenAIError as error:
            await send_error(send, error)
            return
        request = prepared.request
        key = key_of(scope)
        if key is not None:
            refusal = key_refusal(key, request.model)
            if refusal is not None:
                await prepared.rlm.aclose()
                await send_error(send, refusal)
                return
            from rlm_adapters.core.cache import KeyAccount  # psycopg: loaded with a PostgreSQL store only

            assert self.config.keys is not None
            prepared.account = KeyAccount(self.config.keys, key)
        logger.info("chat.completions model=%s stream=%s labels=%s", request.model, request.stream, request.labels)
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            if request.stream:
                await self._stream(bounded(send, self.config.send_timeout), prepared, gone)
            else:
                await self._complete(bounded(send, self.config.send_timeout), prepared, gone)
        except ClientGone:
            logger.warning("a client read nothing for %s s: its request is dropped", self.config.send_timeout)
        finally:
            gone.cancel()

    def prepare(self, body: bytes) -> Prepared:
        """Parse and check a request body and make its `RLM` (on a worker thread: this is seconds of work for
        a big body or big tool schemas, and the server's loop serves every other client meanwhile).

        Raises:
            OpenAIError: The first field at fault (400, naming it), an unknown model (404).
        """
        request = parse_request(body)
        model = self.models.get(request.model)
        if model is None:
            raise not_found(request.model)
        rlm = self._engine(model, request)
        return Prepared(replace(request, entries=[]), rlm, body)

    async def _body_within(self, scope: Scope, receive: Receive) -> bytes:
        """The request's body, which must arrive within ``request_timeout`` (a trickled body holds nothing)."""
        timeout = self.config.request_timeout
        try:
            return await asyncio.wait_for(self._body(scope, receive), timeout)
        except TimeoutError:
            raise OpenAIError(
                408, f"the request body did not arrive within {timeout:g} s (--request-timeout)", code="request_timeout"
            ) from None

    async def _body(self, scope: Scope, receive: Receive) -> bytes:
        headers = dict(scope.get("headers") or [])
        kind = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if kind != b"application/json":
            raise invalid("send the request body as JSON (Content-Type: application/json)")
        declared = headers.get(b"content-length")
        limit = self.config.max_body_bytes
        too_big = OpenAIError(
            413, f"the request body is larger than this server's --max-body-bytes {limit:,}", code="request_too_large"
        )
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_big
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise OpenAIError(400, "the client went away before sending its request")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise too_big
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)

    def _engine(self, model: ServedModel, request: ChatRequest) -> RLM:
        """The `RLM` of one request; its tools and schema checked now, so a bad one is a 400, not a failed run."""
        config = self.config
        # The answer's schema first: it is bounded by characters (`MAX_SCHEMA_CHARS`) before any other work,
        # and the tools' schemas are refused on their size bounds before jsonschema reads any of them.
        where = "response_format.json_schema.schema"
        if request.output_schema is not None:
            try:
                OutputSchema.of(request.output_schema, where)
            except ConfigurationError as exc:
                raise invalid(str(exc), where) from None
        try:
            options = model.rlm_options(config.ceilings)
            for kwargs in (options["backend_kwargs"], *options.get("other_backend_kwargs", [])):
                kwargs.update(request.sampling)
            if request.tools or request.tool_choice not in (None, "auto", "none"):
                offer_tools(request.tools, request.tool_choice, request.parallel_tool_calls)
        except MissingExtraError as exc:
            raise OpenAIError(500, str(exc), "server_error") from None
        except ToolSchemaError as exc:
            raise invalid(str(exc), f"tools[{exc.index}].function.{exc.part}") from None
        except ConfigurationError as exc:
            raise invalid(str(exc), "tools" if request.tools else None) from None
        try:
            return RLM(
                **options,
                environment=config.environment,
                environment_kwargs=dict(config.environment_kwargs),
                sources_timeout=config.sources_timeout,
                cache=config.cache,
                logger=config.logger,
                instructions=request.instructions,
                raise_on_error=False,  # a failed run is an OpenAI-shaped error built from its result
            )
        except ConfigurationError as exc:
            param = next((name for name in request.sampling if name in str(exc)), None)
            raise invalid(str(exc), param) from None

    async def _slot(self, gone: asyncio.Future[Any], tick: Callable[[], Awaitable[None]] | None = None) -> bool:
        """Wait for a run slot (`tick` each heartbeat meanwhile); False when the client left (or the server stopped
        its runs) first."""
        self.waiting += 1
        acquire = asyncio.ensure_future(self.slots.acquire())
        got = False
        try:
            while not acquire.done():
                await _first(acquire, gone, self.stopped, timeout=self.config.heartbeat)
                if gone.done() or self.stopped.done():
                    return False
                if not acquire.done() and tick is not None:
                    await tick()  # may raise (a client that reads nothing): the slot is not taken then
            got = not gone.done() and not self.stopped.done()
            return got
        finally:
            self.waiting -= 1
            if not got:  # the client left, or this handler was interrupted: no slot held
                if acquire.done() and not acquire.cancelled():
                    self.slots.release()
                else:
                    acquire.cancel()

    def _start(self, prepared: Prepared) -> RunHandle:
        """Start the run on its own thread (a slot taken)."""
        request = prepared.request
        try:
            run = start_run(
                prepared.rlm,
                prepared.take_input,
                output_schema=request.output_schema,
                tools=request.tools,
                tool_choice=request.tool_choice,
                parallel_tool_calls=request.parallel_tool_calls,
                account=prepared.account,
            )
        except BaseException:
            self.slots.release()
            raise
        self.runs.add(run)
        return run

    def _finished(self, run: RunHandle) -> None:
        if run in self.runs:
            self.runs.discard(run)
            self.slots.release()

    async def _complete(self, send: Send, prepared: Prepared, gone: asyncio.Future[Any]) -> None:
        if not await self._slot(gone):  # the client left while waiting for a slot, or the server stops
            await prepared.rlm.aclose()
            if not gone.done():
                await send_error(send, shutting_down(), NO_RETRY)
            return
        run = self._start(prepared)
        try:
            outcome = asyncio.ensure_future(run.result())
            await _first(outcome, gone)
            if not outcome.done():
                await stop(run)  # the client left: the run stops and closes its sandbox
                return
            self._finished(run)  # the run has ended: its slot is free while the answer is written
            try:
                result = outcome.result()
                self._check_not_stopped(result)
                self._check_paid(prepared)
                answer = answer_of(result, prepared.request)
            except OpenAIError as error:
                await send_error(send, error, self._retry_headers(error))
                return
            except Exception as exc:
                await send_error(send, failed(exc), self._retry_headers(failed(exc)))
                return
            body = completion(answer, completion_id(result), prepared.request.model)
            await send({"type": "http.response.start", "status": 200, "headers": JSON_HEADERS})
            await send({"type": "http.response.body", "body": json.dumps(body, ensure_ascii=False).encode()})
        except BaseException:
            await stop(run)  # interrupted (the server stops): the run's sandbox is closed
            raise
        finally:
            self._finished(run)

    def _retry_headers(self, error: OpenAIError) -> list[tuple[bytes, bytes]]:
        """``x-should-retry: false`` on a failed run without a call cache: the openai SDK (and every client
        built on it) retries a 500 twice by default, and each retry would pay for the whole run again. With
        the cache a retry replays what came back, so the client's own policy decides. A server stopping is
        gone by the time a retry would come: the client is told so at once."""
        if (error.status >= 500 and self.config.cache is None) or error.code == SHUTTING_DOWN:
            return [*NO_RETRY]
        return []

    def _check_not_stopped(self, result: RLMResult) -> None:
        """Raise `shutting_down` for a run the server cancelled as it stopped (its cancelled result is no answer)."""
        if self.stopped.done() and result.finish_reason == "cancelled":
            raise shutting_down()

    def _check_paid(self, prepared: Prepared) -> None:
        """Raise the 429 ``insufficient_quota`` for a run its key could not pay one call of."""
        error = unpaid(prepared.account)
        if error is not None:
            raise error

    async def _stream(self, send: Send, prepared: Prepared, gone: asyncio.Future[Any]) -> None:
        request, rlm = prepared.request, prepared.rlm
        chunks = Chunks(f"chatcmpl-{uuid.uuid4().hex}", request.model, int(time.time()), request.include_usage)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )

        async def write(data: dict[str, Any] | str) -> None:
            text = f": {data}\n\n" if isinstance(data, str) else f"data: {json.dumps(data, ensure_ascii=False)}\n\n"
            await send({"type": "http.response.body", "body": text.encode(), "more_body": True})

        async def say(line: str) -> None:  # a progress line: reasoning_content, or a comment without progress
            await write(chunks.progress(line) if self.config.progress else line.strip())

        try:
            await write(chunks.first())
            if not await self._slot(gone, lambda: write("waiting for a free run slot")):
                await rlm.aclose()
                if not gone.done():  # the server stops: an error event, then the stream's end
                    await write(shutting_down().body())
                    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
                return
        except BaseException:
            await close_shielded(rlm.aclose())
            raise
        run = self._start(prepared)
        streamed = Streamed(request)
        try:
            progress = Progress(rlm.max_iterations)
            events = run.events().__aiter__()
            while True:
                step = asyncio.ensure_future(_next(events))
                await _first(step, gone, timeout=self.config.heartbeat)
                if gone.done():
                    step.cancel()
                    await stop(run)
                    return
                if not step.done():
                    step.cancel()
                    await write(f"working {progress.tally.elapsed:.0f} s")
                    continue
                event = step.result()
                if event is None:
                    break
                if isinstance(event, AnswerDelta):
                    if streamed.take(event.text):
                        await write(chunks.chunk({"content": event.text}))
                    continue
                line = progress.line(event)
                if line is not None:
                    await write(chunks.progress(line) if self.config.progress else line.strip())
            if not await self._sources(run, gone, say):
                return
            try:
                result = await run.result()
                self._finished(run)  # the run has ended: its slot is free while the answer is written
                self._check_not_stopped(result)
                self._check_paid(prepared)
                answer = answer_of(result, request)
            except OpenAIError as error:
                await write(error.body())
            except Exception as exc:
                await write(failed(exc).body())
            else:
                for chunk in chunks.answer(answer, streamed.text):
                    await write(chunk)
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
        except BaseException:
            await stop(run)  # the client reads nothing (or the server stops): the run's sandbox is closed
            raise
        finally:
            self._finished(run)

    async def _sources(self, run: RunHandle, gone: asyncio.Future[Any], say: Callable[[str], Awaitable[None]]) -> bool:
        """The run's events have ended: say "finding sources" (its observers' phase, within its sources_timeout)
        and keep the stream alive until the result is in; False when the client left first."""
        await say(f"{FINDING}\n")
        result = asyncio.ensure_future(run.result())
        started = time.perf_counter()
        while not result.done():
            await _first(result, gone, timeout=self.config.heartbeat)
            if gone.done():
                result.cancel()
                await stop(run)
                return False
            if not result.done():
                await say(f"{FINDING} · {time.perf_counter() - started:.0f} s\n")
        return True

    async def close(self) -> None:
        """Stop every run in flight and wait until their sandboxes are closed (the server is stopping)."""
        runs = list(self.runs)
        await asyncio.gather(*(stop(run) for run in runs))


async def _first(*futures: asyncio.Future[Any], timeout: float | None = None) -> None:
    """Wait until one of `futures` is done (or `timeout` seconds)."""
    await asyncio.wait(set(futures), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)


async def _next(events: AsyncIterator[Event]) -> Event | None:
    try:
        return await events.__anext__()
    except StopAsyncIteration:
        return None


async def _disconnected(receive: Receive) -> None:
    """Return when the client has gone (the body is read by then: what comes next is the disconnect)."""
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            return


class Streamed:
    """What of the answer a stream has sent as the model wrote it (the direct route's pieces).

    A piece goes out while the answer cannot be cut before it: never with ``stop`` sequences (one may span
    pieces), and only up to the client's ``max_tokens`` (the answer is cut there, `answer_of`).
    """

    def __init__(self, request: ChatRequest) -> None:
        self.live = not request.stop
        self.limit = request.max_answer_tokens
        self.pieces: list[str] = []  # joined once at the end: a reply is thousands of pieces
        self.chars = 0

    @property
    def text(self) -> str:
        """What was sent."""
        return "".join(self.pieces)

    def take(self, piece: str) -> bool:
        """Whether `piece` goes out now (then it is counted as sent)."""
        if not self.live or (self.limit is not None and tokens_for_chars(self.chars + len(piece)) > self.limit):
            self.live = False
            return False
        self.pieces.append(piece)
        self.chars += len(piece)
        return True


class Progress:
    """The run's progress as short lines for the client: iterations, sub-calls, tokens, cost (`EventTally`)."""

    def __init__(self, max_iterations: int) -> None:
        self.tally = EventTally()
        self.max_iterations = max_iterations

    def line(self, event: Event) -> str | None:
        """The line `event` is worth showing (None for most events)."""
        milestone = self.tally.add(event)
        if isinstance(event, RunStarted) and event.depth == 0:
            if event.route == "direct":
                return f"direct call to root model {event.root_model}: {event.route_reason}\n"
            # The level only: the limits that follow it in `isolation` are some 900 characters a chat UI
            # would show as the model's "thinking"; the log and the result keep them.
            line = f"RLM run started: root model {event.root_model}, sandbox {event.sandbox} ({event.isolation_level})"
            fell_back = event.route_reason is not None and "refused" in event.route_reason
            return f"{line}; {event.route_reason}\n" if fell_back else f"{line}\n"
        if milestone is None:
            return None
        return self.tally.progress_line(self.max_iterations) + "\n"  # the CLI's and MCP's words


def completion_id(result: RLMResult) -> str:
    """The completion's id, from the run's."""
    return f"chatcmpl-{result.run_id}"


def not_found(name: str) -> OpenAIError:
    """OpenAI's 404 for an unknown model."""
    return OpenAIError(
        404,
        f"The model {name[:200]!r} does not exist on this server; GET /v1/models lists the served models",
        "invalid_request_error",
        "model",
        "model_not_found",
    )


def shutting_down() -> OpenAIError:
    """OpenAI's shape for a request the stopping server cancelled (503; clients are told not to retry)."""
    return OpenAIError(
        503,
        "rlm serve was stopped while this request was in flight: its run was cancelled before an answer; "
        "send the request again once the server is back",
        "server_error",
        code=SHUTTING_DOWN,
    )


def failed(exc: BaseException) -> OpenAIError:
    """A run that raised, as a 500."""
    message = str(exc) if isinstance(exc, RLMError) else f"{type(exc).__name__}: {exc}"
    return OpenAIError(500, f"the RLM run failed: {message[:2000]}", "server_error", code="rlm_run_failed")


class RawEndpoint:
    """An ASGI callable for a route (Starlette hands a plain function a `Request`; this gets the raw ASGI)."""

    def __init__(self, handler: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.handler(scope, receive, send)


def build_app(config: ServeConfig) -> Starlette:
    """The ASGI app serving `config` (Starlette; run it with uvicorn, as `rlm serve` does).

    Raises:
        ConfigurationError: No model, a name served twice, or no token off loopback.
    """
    server = Server(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # What every request needs loads now (the engine, the models' SDKs, jsonschema), and what exists then
        # (the modules, their classes and schemas: 200,000 objects and more) lives as long as the server:
        # frozen out of the collector, a full collection walks only what requests made since, instead of
        # holding the loop (and every thread) 0.2-0.3 s on a busy machine.
        await asyncio.to_thread(server.load)
        gc.freeze()
        try:
            yield
        finally:
            gc.unfreeze()
            await server.close()

    async def unknown(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        return error_response(
            OpenAIError(
                status,
                f"Invalid URL ({request.method} {request.url.path[:200]}): this server serves "
                "POST /v1/chat/completions and GET /v1/models",
                code="unknown_url",
            )
        )

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", RawEndpoint(server.chat), methods=None),
            Route("/v1/models", server.list_models, methods=["GET"]),
            Route("/v1/models/{name:path}", server.get_model, methods=["GET"]),
        ],
        exception_handlers={404: unknown, 405: unknown},
        lifespan=lifespan,
    )
    app.state.server = server
    return app_with_guard(app, config)


def app_with_guard(app: Starlette, config: ServeConfig) -> Starlette:
    """`app` behind the `Guard` (Host, Origin, bearer token)."""
    app.add_middleware(Guard, config=config)
    return app
