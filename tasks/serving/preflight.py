"""Check an endpoint before any batch starts: the server answers, serves the configured model name,
and completes a 1-token request. A wrong URL, key or model name then fails the run in seconds with
one line naming the field to fix, instead of failing every rollout of every batch."""

from __future__ import annotations

import httpx
import openai

from errors import EvalflowError
from tasks.serving.clients import sync_client
from tasks.serving.server import Endpoint

# Short on purpose: a server that needs longer to answer a model list is not ready for a run.
CONNECT_TIMEOUT_S = 3.0
REQUEST_TIMEOUT_S = 8.0


class EndpointError(EvalflowError, ValueError):
    """The endpoint cannot serve this run; the message says which field to fix."""

    kind = "server"


def _client(endpoint: Endpoint, timeout_s: float) -> openai.OpenAI:
    # the SDK's own Timeout: the SDK may send through its own httpx (httpx2), whose clients misread an httpx.Timeout
    return sync_client(endpoint.base_url, endpoint.api_key, openai.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S))


def _reason(exc: Exception) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return "no answer in time"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        return f"unreachable ({cause})" if cause else "unreachable"
    if isinstance(exc, openai.APIStatusError):
        hint = {401: "the API key is wrong or missing (server.api_key)", 403: "the API key may not use it"}
        text = hint.get(exc.status_code, " ".join(str(exc.message).split())[:300])
        return f"HTTP {exc.status_code}: {text}"
    return f"{type(exc).__name__}: {exc}"


def check_endpoint(endpoint: Endpoint, *, url_field: str, name_field: str, chat: bool, plain: bool) -> None:
    """Raise EndpointError unless `GET /models` lists `endpoint.model` and a 1-token request (chat
    and/or plain completion, as the run's benchmarks use) succeeds. `url_field` and `name_field` are
    the config fields an operator would fix (e.g. server.base_url, model.served_name)."""
    with _client(endpoint, REQUEST_TIMEOUT_S) as client:  # closed: no connection left open
        where = f"{url_field} {endpoint.base_url}"
        try:
            served = [m.id for m in client.models.list()]
        except (openai.APIError, httpx.HTTPError) as exc:
            raise EndpointError(f"{where}: {_reason(exc)}; start the server or fix {url_field}") from None
        if endpoint.model not in served:
            offered = ", ".join(repr(name) for name in served) or "nothing"
            raise EndpointError(
                f"{name_field} {endpoint.model!r} is not served by {endpoint.base_url} (it serves {offered}); "
                f"set {name_field} to one of those or point {url_field} at the right server"
            )
        requests = {
            "chat completion": lambda: client.chat.completions.create(
                model=endpoint.model, messages=[{"role": "user", "content": "Say OK."}], max_tokens=1
            ),
            "completion": lambda: client.completions.create(model=endpoint.model, prompt="OK", max_tokens=1),
        }
        for kind, wanted in (("chat completion", chat), ("completion", plain)):
            if not wanted:
                continue
            try:
                requests[kind]()
            except (openai.APIError, httpx.HTTPError) as exc:
                raise EndpointError(f"{where}: a 1-token {kind} of {endpoint.model!r} failed: {_reason(exc)}") from None
