"""Start-up failures a person can cause or meet, as one line naming what to fix (never a traceback).

The front ends (bot/cli.py, bot/slack/server.py) translate the low-level error here: a port that is
busy or not ours to bind, Slack unreachable or refusing the token at ``auth.test``. Every function
returns a :class:`bot.errors.StartupError` whose message is one line and holds no secret.
"""

from __future__ import annotations

import errno
import os
import socket
import urllib.error
import urllib.parse

from bot.errors import StartupError
from bot.redact import redact

_TOKEN_ERRORS = {"invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive"}


_LISTEN_ERRNOS = {errno.EADDRINUSE, errno.EACCES, errno.EPERM, errno.EADDRNOTAVAIL}


def is_listen_error(exc: OSError) -> bool:
    """Whether ``exc`` is what binding a listening socket raises for a person's choice of address."""
    return exc.errno in _LISTEN_ERRNOS or isinstance(exc, socket.gaierror)


def listen_error(host: str, port: int, exc: OSError, *, host_name: str, port_name: str) -> StartupError:
    """Binding ``host:port`` failed; ``host_name``/``port_name`` are the setting or flag to change."""
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        why = f"the port is already in use; choose another {port_name} (0 = any free port)"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        why = f"permission denied; choose a {port_name} of 1024 or more (or 0 = any free port)"
    elif exc.errno == errno.EADDRNOTAVAIL:
        why = f"{host} is not an address of this machine; set {host_name} to one (127.0.0.1, 0.0.0.0…)"
    elif isinstance(exc, socket.gaierror):
        why = f"{host} is not a known host name; set {host_name} to an address of this machine (127.0.0.1, 0.0.0.0…)"
    else:
        why = f"{exc.strerror or type(exc).__name__}; check {host_name} and {port_name}"
    return StartupError(f"cannot listen on {where}: {why}")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        inner = exc.reason
        return getattr(inner, "strerror", None) or str(inner)
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__


def slack_start_error(api_url: str, exc: BaseException) -> StartupError:
    """``auth.test`` at start failed: Slack unreachable, or it refused the bot token."""
    url = f"{api_url}auth.test"
    # The front end may wrap Slack's error (e.g. "cannot tell which workspace to serve"): judge the cause.
    root = exc
    while root.__cause__ is not None:
        root = root.__cause__
    text = f"{exc} {root}"
    code = next((c for c in _TOKEN_ERRORS if c in text), None)
    if code is not None:
        return StartupError(
            f"Slack refused SLACK_BOT_TOKEN at auth.test ({code}): a wrong or revoked token; copy the app's "
            "Bot User OAuth Token (xoxb-…) again"
        )
    if isinstance(root, (OSError, urllib.error.URLError, TimeoutError)):
        return StartupError(
            f"cannot reach Slack: calling auth.test at {url} failed ({_reason(root)}); check SLACK_API_URL "
            "and this host's network or proxy"
        )
    first = redact(str(exc)).splitlines()[0] if str(exc) else type(exc).__name__
    return StartupError(f"Slack's auth.test at {url} failed: {first}; check SLACK_API_URL and SLACK_BOT_TOKEN")


def check_reachable(url: str, *, timeout: float = 5.0) -> None:
    """Open (and close) a TCP connection to the control host so an unreachable host is one line at
    start. No HTTP request is sent: a console start sends nothing unasked. Skipped behind a proxy
    (``HTTP(S)_PROXY``/``ALL_PROXY``), where only the proxy could say."""
    if any(
        os.environ.get(n) for n in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy")
    ):
        return
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except (OSError, ValueError) as exc:
        if isinstance(exc, socket.gaierror):
            why = f"{host} is not a known host name"
        elif isinstance(exc, TimeoutError | socket.timeout):
            why = f"no answer within {timeout:g} s"
        else:
            why = (exc.strerror if isinstance(exc, OSError) else None) or str(exc) or type(exc).__name__
        raise StartupError(
            f"cannot reach the control host at {url} ({why}); check CONTROL_HOST_URL and the network"
        ) from None
