"""The API's field names as data.

docs/control-host-api.md marks many field names [assumed]. The typed models read canonical names (the page's);
an installation whose API names a field differently maps it in the runbook's ``api.fields`` section
(``{object: {canonical: api_name}}``), and answers are renamed to the canonical names before parsing.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The canonical fields of each object the bot reads (docs/control-host-api.md's names).
KNOWN_FIELDS: dict[str, tuple[str, ...]] = {
    "session": (
        "id",
        "status",
        "admission_state",
        "revision",
        "resumable",
        "attention",
        "checkpoint",
        "execution",
        "queued_inputs",
    ),
    "attention": ("code", "reason", "failures", "retry_at"),
    "checkpoint": ("id", "committed_at", "covers_turn_id"),
    "execution": ("state", "confirmed_gone_at"),
    "turn": ("id", "status", "terminal_reason", "control_id", "started_at", "ended_at"),
    "event": ("seq", "type", "name", "reason", "failures", "at"),
}

#: Objects nested in a session, by the session's (canonical) field that holds them.
_NESTED = {"attention": "attention", "checkpoint": "checkpoint", "execution": "execution"}

FieldNames = Mapping[str, Mapping[str, str]]


def canonical(kind: str, data: object, names: FieldNames) -> object:
    """``data`` with the installation's field names renamed to the canonical ones (nested too).

    Anything that is not an object is returned unchanged: the tolerant parsers decide what it means.
    """
    if not isinstance(data, dict) or not names:
        return data
    out = dict(data)
    for canonical_name, api_name in (names.get(kind) or {}).items():
        if api_name in data:
            out[canonical_name] = data[api_name]
    if kind == "session":
        for field, nested_kind in _NESTED.items():
            out[field] = canonical(nested_kind, out.get(field), names)
    return out
