"""What the public and the admin API share: the answer (:class:`Response`), routing by method and
path, and the readers of query and body values that answer a bad value with a 400."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from bot.sandbox._faults import Fault
from bot.sandbox._wire import AdminError, ApiError

#: A route: method, path pattern (named groups become the handler's params), handler name.
Route = tuple[str, re.Pattern[str], str]
SID = r"(?P<sid>[^/]+)"


@dataclass
class Response:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False  # commit, then close the connection without answering
    shape: Fault | None = None  # dribble / huge_body: how the answer goes out


def err(
    status: int, code: str, message: str, *, retryable: bool = False, headers: dict[str, str] | None = None
) -> Response:
    return Response(status, ApiError(status, code, message, retryable=retryable).body(), headers or {})


def match(routes: list[Route], method: str, path: str) -> tuple[str, dict[str, str]] | Response:
    """The handler name and path params, or the 405 (with ``Allow``) / 404 answer."""
    allowed: list[str] = []
    for route_method, pattern, name in routes:
        found = pattern.match(path)
        if not found:
            continue
        if route_method == method:
            return name, {k: unquote(v) for k, v in found.groupdict().items()}
        allowed.append(route_method)
    if allowed:
        return err(
            405,
            "METHOD_NOT_ALLOWED",
            f"{method} is not allowed on {path}.",
            headers={"Allow": ", ".join(sorted(set(allowed)))},
        )
    return err(404, "NOT_FOUND", f"No route {path}.")


def int_param(query: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    text = query.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, "BAD_REQUEST", f"{name} must be an integer.") from None
    if not low <= value <= high:
        raise ApiError(400, "BAD_REQUEST", f"{name} must be between {low} and {high}.")
    return value


def body_bool(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if not isinstance(value, bool):
        raise AdminError(400, "BAD_REQUEST", f"{name} must be true or false")
    return value


def json_or_text(raw: bytes) -> Any:
    """A request body as the request log shows it: JSON, else the start of its text."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return raw.decode("utf-8", "replace")[:2000]
