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


def parse_duration(value: object) -> float:
    """'10s', '15m', '500ms', '1h' or a number of seconds → seconds; anything else is an error."""
    if isinstance(value, bool):
        raise ValueError(f"bad duration {value!r}: use a number with a unit (ms, s, m, h, d), e.g. 10s")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if match is None:
            raise ValueError(f"bad duration {value!r}: use a number with a unit (ms, s, m, h, d), e.g. 10s")
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if seconds <= 0:
        raise ValueError(f"bad duration {value!r}: must be more than zero")
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
