"""The socket-proxy allowlist (deploy/socket-proxy/allowlist.yaml): load, match, render.

The bot never gets the raw Docker socket (root-equivalent): it talks to a socket proxy that allows
only the calls listed per HTTP method. This module is the one reading of that file, used by the tests
(every call the bot really made must match; container create and image pull must not) and to render
the proxy's settings for one installation:

    python -m bot.dockerops.allowlist --project prod --format env   > socket-proxy.env
    python -m bot.dockerops.allowlist --project prod --format args  # -allowGET=… lines
    python -m bot.dockerops.allowlist --format compose   # deploy/docker-compose.yml's flags

The compose flags keep ``${RECOVER_INSTALLATION}`` for compose to fill in; tests/docker/test_allowlist.py
checks that the file's flags are exactly this rendering, and both ways against the recorded calls.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from bot.dockerops._config import PROJECT_NAME

DEFAULT_FILE = Path(__file__).resolve().parents[2] / "deploy" / "socket-proxy" / "allowlist.yaml"
COMPOSE_PROJECT = "${RECOVER_INSTALLATION}"  # compose interpolates it (a compose project name: no regex metacharacters)
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE")


class AllowlistError(ValueError):
    """The allowlist file is malformed."""


@dataclass(frozen=True)
class Allowlist:
    """Per-method patterns for one installation, anchored like socket-proxy anchors them (^…$)."""

    project: str
    patterns: dict[str, tuple[str, ...]]

    def allows(self, method: str, path: str) -> bool:
        """Would the proxy let ``method path`` through? The query string is not part of the match."""
        path = path.split("?", 1)[0]
        return any(re.fullmatch(p, path) for p in self.patterns.get(method.upper(), ()))

    def combined(self, method: str) -> str | None:
        """One alternation per method (works with every socket-proxy version)."""
        pats = self.patterns.get(method, ())
        if not pats:
            return None
        return pats[0] if len(pats) == 1 else "(" + "|".join(pats) + ")"

    def render_env(self) -> str:
        lines = [f"# socket-proxy allowlist for compose project {self.project} (from allowlist.yaml)"]
        for method in METHODS:
            pattern = self.combined(method)
            if pattern is not None:
                lines.append(f"SP_ALLOW_{method}='{pattern}'")
        return "\n".join(lines) + "\n"

    def render_args(self) -> list[str]:
        return [f"-allow{m}={p}" for m in METHODS if (p := self.combined(m)) is not None]


def load_allowlist(project: str, path: str | Path = DEFAULT_FILE) -> Allowlist:
    """Read the file and fill in ``{project}``, ``{v}`` and ``{name}``."""
    if not PROJECT_NAME.match(project):
        raise AllowlistError(f"{project!r} is not a compose project name")
    return _read(project, path)


def compose_flags(path: str | Path = DEFAULT_FILE) -> list[str]:
    """The socket proxy's ``-allow<METHOD>=`` flags as deploy/docker-compose.yml writes them."""
    return _read(COMPOSE_PROJECT, path).render_args()


def _read(project: str, path: str | Path) -> Allowlist:
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("allow"), dict):
        raise AllowlistError(f"{path}: expected a mapping with an 'allow' mapping")
    holders = data.get("placeholders") or {}
    if not isinstance(holders, dict):
        raise AllowlistError(f"{path}: 'placeholders' must be a mapping")
    values = {str(k): str(v) for k, v in holders.items()}
    values["project"] = project  # compose names are [a-z0-9_-]: nothing to escape
    patterns: dict[str, tuple[str, ...]] = {}
    for method, items in data["allow"].items():
        if str(method).upper() not in METHODS:
            raise AllowlistError(f"{path}: unknown HTTP method {method!r}")
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise AllowlistError(f"{path}: allow.{method} must be a list of patterns")
        filled = tuple(_fill(item, values) for item in items)
        for p in filled:
            try:
                re.compile(p)
            except re.error as exc:
                raise AllowlistError(f"{path}: allow.{method}: invalid pattern {p!r}: {exc}") from exc
        patterns[str(method).upper()] = filled
    return Allowlist(project=project, patterns=patterns)


def _fill(pattern: str, values: dict[str, str]) -> str:
    # Only {word} placeholders that are defined are replaced: regex counts like {64} stay.
    return re.sub(r"\{([a-z]+)\}", lambda m: values.get(m.group(1), m.group(0)), pattern)


def denied(allowlist: Allowlist, calls: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The calls the proxy would refuse."""
    return [(m, p) for m, p in calls if not allowlist.allows(m, p)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render the socket-proxy allowlist for one installation.")
    parser.add_argument("--project", help="the compose project (RECOVER_INSTALLATION); not for --format compose")
    parser.add_argument("--format", choices=("env", "args", "compose"), default="env")
    parser.add_argument("--file", default=str(DEFAULT_FILE))
    args = parser.parse_args(argv)
    if args.format == "compose":
        try:
            flags = compose_flags(args.file)
        except (AllowlistError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        sys.stdout.write("".join(f"      - '{f}'\n" for f in flags))
        return 0
    if not args.project:
        parser.error("--project is required for --format env and args")
    try:
        allowlist = load_allowlist(args.project, args.file)
    except (AllowlistError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.format == "env":
        sys.stdout.write(allowlist.render_env())
    else:
        sys.stdout.write("\n".join(allowlist.render_args()) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
