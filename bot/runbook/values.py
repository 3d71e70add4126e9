"""The value types runbook YAML fields are written in: durations, sizes, regular expressions,
non-empty text and raw conditions, and the strict base model every runbook section uses.

They live apart from the sections so the schema reads as a list of sections and each unit is
parsed one way everywhere (a limit, an expiry and a wait all read ``15m`` alike).
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from typing_extensions import TypeAliasType

#: A value as safe YAML reads it; a condition (``when:``, ``require:``) is kept as written and compiled
#: by the loader, which reports a bad one with its line.
YamlValue = TypeAliasType(
    "YamlValue",
    "str | bool | int | float | datetime | date | None | list[YamlValue] | dict[str, YamlValue]",
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_BYTES = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|KiB|MiB|GiB)?\s*$")
_BYTE_UNITS = {
    None: 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
}
#: In an argument or flag pattern, stands for the runbook's id pattern (``ids: pattern:``).
IDS_PLACEHOLDER = "{ids}"
RULE_ID = re.compile(r"^R\d+\.\d+$")
COMMAND_NAME = re.compile(r"^[a-z][a-z0-9-]*( [a-z][a-z0-9-]*)*$")


#: The longest duration accepted anywhere a duration is parsed: 366 days (a leap year). Every duration
#: ends up as a ``timedelta`` added to now (an expiry, a window's start), a wait handed to the standard
#: library (``threading`` waits stop at ``threading.TIMEOUT_MAX``, about 292 years here) or a time stored
#: in SQLite; ``timedelta`` itself overflows a C int past 999,999,999 days, which is how a runbook with
#: ``999999999999d`` used to pass its check and then fail at the first request. A year is far inside all
#: of these and longer than any wait, expiry or window a recovery runbook has reason to name.
MAX_DURATION_SECONDS = 366 * 86400.0
MAX_DURATION_TEXT = "366d"


def parse_duration(value: object) -> float:
    """'10s', '15m', '500ms', '1h' or a number of seconds → seconds; anything else is an error.

    Bounded to more than zero and at most :data:`MAX_DURATION_SECONDS` (366 days, why above), so what a
    runbook check accepts the bot can also schedule; NaN and infinities are refused with the rest.
    """
    if isinstance(value, bool):
        raise ValueError(f"bad duration {value!r}: use a number with a unit (ms, s, m, h, d), e.g. 10s")
    try:
        if isinstance(value, int | float):
            seconds = float(value)
        else:
            match = _DURATION.match(str(value))
            if match is None:
                raise ValueError(f"bad duration {value!r}: use a number with a unit (ms, s, m, h, d), e.g. 10s")
            seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    except OverflowError:
        seconds = float("inf")  # an integer too large for a float: refused below as too long
    if seconds <= 0:
        raise ValueError(f"bad duration {value!r}: must be more than zero")
    if not seconds <= MAX_DURATION_SECONDS:  # written so that NaN is refused too
        raise ValueError(
            f"bad duration {value!r}: must be at most {MAX_DURATION_TEXT} (the longest the bot can schedule)"
        )
    return seconds


def parse_bytes(value: object) -> int:
    """'64MiB', '1GB', '4096' → bytes."""
    match = _BYTES.match(str(value)) if not isinstance(value, bool) else None
    if match is None:
        raise ValueError(f"bad size {value!r}: use a number with B, KB, MB, GB, KiB, MiB or GiB, e.g. 64MiB")
    size = int(float(match.group(1)) * _BYTE_UNITS[match.group(2)])
    if size <= 0:
        raise ValueError(f"bad size {value!r}: must be more than zero")
    return size


def _check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"bad regular expression {value!r}: {exc}") from exc
    return value


Duration = Annotated[float, BeforeValidator(parse_duration)]
Bytes = Annotated[int, BeforeValidator(parse_bytes)]
Regex = Annotated[str, BeforeValidator(lambda v: _check_regex(v) if isinstance(v, str) else v)]
Text = Annotated[str, Field(min_length=1)]


class Model(BaseModel):
    """Unknown fields are errors: a misspelt key must not be silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=False, str_strip_whitespace=False)
