"""The one id grammar (bot/ids.py): what each of the bot's ids says about its kind and installation."""

from __future__ import annotations

import pytest

from bot.ids import (
    DRYRUN_ID,
    IdKind,
    ScopedId,
    group_id,
    installation_of_id,
    is_batch_id,
    is_request_id,
    new_id,
    parse_own_id,
    split_tag,
    tagged,
    triage_id,
    triage_number,
)


@pytest.mark.parametrize(
    ("text", "kind", "installation"),
    [
        ("req_00ff", IdKind.REQUEST, "default"),
        ("req_00ff.eu-1", IdKind.REQUEST, "eu-1"),
        ("bat_0a1b2c.us-1", IdKind.BATCH, "us-1"),
        ("dry_3f9a1c2b7e10", IdKind.DRYRUN, "default"),
        ("t7", IdKind.TRIAGE, "default"),
        ("t7.eu-1", IdKind.TRIAGE, "eu-1"),
        ("t7.g2", IdKind.GROUP, "default"),  # a group of the default's triage, not installation ``g2``
        ("t7.g2.eu-1", IdKind.GROUP, "eu-1"),
    ],
)
def test_each_id_says_its_kind_and_installation(text: str, kind: IdKind, installation: str) -> None:
    parsed = parse_own_id(text)
    assert parsed is not None and parsed.kind == kind and parsed.installation == installation
    assert installation_of_id(text) == installation


@pytest.mark.parametrize("text", ["ses_1", "ses_1@eu-1", "req_", "req_XYZ", "bat_1@eu-1", "t", "t7.", ""])
def test_what_is_not_a_bot_id_parses_to_none(text: str) -> None:
    assert parse_own_id(text) is None


def test_minted_ids_parse_back_to_their_kind_and_installation() -> None:
    for kind in (IdKind.REQUEST, IdKind.BATCH, IdKind.DRYRUN):
        for installation in ("default", "eu-1"):
            minted = new_id(kind, installation)
            parsed = parse_own_id(minted)
            assert parsed is not None and (parsed.kind, parsed.installation) == (kind, installation), minted
    assert DRYRUN_ID.match(new_id(IdKind.DRYRUN, "eu-1"))
    assert is_request_id(new_id(IdKind.REQUEST)) and not is_request_id(new_id(IdKind.BATCH))
    assert is_batch_id(new_id(IdKind.BATCH, "eu-1")) and not is_batch_id(None)


def test_a_triage_group_keeps_the_installation_last() -> None:
    assert triage_id(7) == "t7" and triage_id(7, "eu-1") == "t7.eu-1"
    assert group_id("t7", 2) == "t7.g2" and group_id("t7.eu-1", 2) == "t7.g2.eu-1"
    assert triage_number("t7.eu-1") == 7
    parsed = parse_own_id("t7.g2.eu-1")
    assert parsed is not None and parsed.triage_id == "t7.eu-1"
    with pytest.raises(ValueError):
        group_id("req_00ff", 1)


def test_tags_and_scoped_ids_share_one_text_form() -> None:
    assert tagged("ses_1", "eu-1") == "ses_1@eu-1" == ScopedId("eu-1", "ses_1").key
    assert split_tag("ses_1|restart@eu-1") == ("ses_1|restart", "eu-1")
    assert split_tag("ses_1@Not A Name") == ("ses_1@Not A Name", None)
    assert ScopedId.of("ses_1", None).key == "ses_1"


def test_the_console_offers_a_named_installations_group_id_whole() -> None:
    from bot.console._shell import SeenIds
    from bot.messages import Message

    seen = SeenIds()
    seen.note(Message(headline="Triage t1.eu-1"), "*t1.g2.eu-1* 3 sessions; t1.g3. then req_00ff.eu-1")
    assert seen.all() == ["req_00ff.eu-1", "t1.g3", "t1.g2.eu-1"]  # newest first, each as typed back
