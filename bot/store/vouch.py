"""What a command that blesses the chain checks it against (``audit adopt-key``, ``audit rebind``).

Blessing a chain (adopting the audit key, rebinding a store to a moved host) turns what is in the file
into what the bot will act on. A published head (``SEQ:HASH`` from ``audit export``) vouches for the
steps up to it and nothing after: anyone who can write the file can append plain steps anyone can hash.
So these commands require the head, verify the chain and the tables beside it against it first, and
refuse while any step follows it that the operator did not read and accept one by one (recorded with
the blessing step)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from bot.store import audit
from bot.store.audit import CacheCheck, adoption_refusal
from bot.store.chain import HEAD_FORM, parse_head


def head_argument(text: str) -> str:
    """``--head``'s type: a published head in its one form, else a usage error (exit 2) naming it."""
    try:
        parse_head(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {HEAD_FORM}, not {text[:40]!r}") from None
    return text.strip().lower()


def accept_after_argument(text: str) -> int:
    """``--accept-after``'s type: one step number."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a step number (SEQ), not {text[:20]!r}")
    return int(text)


def add_vouching(parser: argparse.ArgumentParser) -> None:
    """``--head`` (required) and ``--accept-after``: what a command that blesses the chain checks it against."""
    parser.add_argument(
        "--head",
        required=True,
        type=head_argument,
        metavar="SEQ:HASH",
        help="the head you last published (`audit export`): the chain must verify up to it",
    )
    parser.add_argument(
        "--accept-after",
        action="append",
        default=[],
        type=accept_after_argument,
        metavar="SEQ",
        help="a step after that head you read and vouch for (once per step)",
    )


def vouched_report(
    db: str | Path, args: argparse.Namespace, key: bytes | None, checks: Iterable[CacheCheck]
) -> tuple[audit.AuditReport, dict[str, object] | None]:
    """Verify the chain and its tables against ``--head``: the report, and what the operator vouches for
    (to record with the blessing step), or None after printing why it may not be blessed."""
    report = audit.verify(db, head=args.head, key=key, checks=checks)
    why = adoption_refusal(report, args.accept_after)
    if why is not None:
        print(report.summary())
        print(f"error: {why}; nothing recorded", file=sys.stderr)
        return report, None
    return report, {"published_head": args.head, "accepted_after_head": sorted(set(args.accept_after))}
