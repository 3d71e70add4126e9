"""The resolution rules, the one function that owns them: --install, the ids, the channel, the only one."""

from __future__ import annotations

import pytest

from bot.installations import InstallationSpec
from bot.installations.resolve import InstallationRefused, id_installation, resolve_installation


def _spec(name: str, *channels: str, watch: str | None = None) -> InstallationSpec:
    return InstallationSpec(
        name=name, control_host_url=f"https://{name}.example", api_key=None, channels=channels, watch_channel=watch
    )


SPECS = [_spec("eu-1", "C0EU1", watch="C0EU1W"), _spec("us-1", "C0US1"), _spec("staging")]


@pytest.mark.parametrize(
    ("kw", "chosen"),
    [
        ({"flag": "us-1", "channel": "C0EU1"}, "us-1"),  # --install first (a read; acts keep their channel check)
        ({"flag": None, "channel": "C0EU1", "ids": ["req_00ff.eu-1"]}, "eu-1"),
        ({"flag": None, "channel": None, "ids": ["bat_0a1b2c.us-1"]}, "us-1"),  # the id alone says it
        ({"flag": None, "channel": None, "ids": ["t7.g1.staging"]}, "staging"),
        ({"flag": None, "channel": "C0US1"}, "us-1"),
        ({"flag": None, "channel": "C0EU1W"}, "eu-1"),  # the watch channel binds too
        ({"flag": None, "channel": "C0US1", "ids": ["ses_1.eu-1", "ses_2"]}, "us-1"),  # session ids say nothing
    ],
)
def test_the_order(kw: dict, chosen: str) -> None:
    assert resolve_installation(SPECS, **kw) == chosen


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"flag": None, "channel": "C0NONE"}, "Which installation?"),
        ({"flag": None, "channel": None}, "Which installation?"),
        ({"flag": "xx-9", "channel": "C0EU1"}, "no installation `xx-9`"),
        ({"flag": None, "channel": "C0US1", "ids": ["req_00ff.eu-1"]}, "bound to `us-1`"),
        ({"flag": "us-1", "channel": None, "ids": ["req_00ff.eu-1"]}, "not `us-1`"),
        ({"flag": None, "channel": None, "ids": ["req_00ff.eu-1", "dry_0a.us-1"]}, "two installations"),
        ({"flag": None, "channel": None, "ids": ["req_00ff.zz-1"]}, "no installation `zz-1`"),
        ({"flag": None, "channel": "C0US1", "made_by": "eu-1"}, "bound to `us-1`"),  # a replayed button
    ],
)
def test_refusals_list_the_installations(kw: dict, says: str) -> None:
    with pytest.raises(InstallationRefused) as refused:
        resolve_installation(SPECS, **kw)
    assert says in str(refused.value)
    if "Which" in says or "xx-9" in says:
        assert all(name in str(refused.value) for name in ("eu-1", "us-1", "staging"))


def test_one_installation_needs_no_choice_and_default_ids_stay_unsuffixed() -> None:
    only = [_spec("default")]
    assert resolve_installation(only, flag=None, channel=None, ids=["req_00ff"]) == "default"
    assert id_installation("req_00ff") == "default"
    assert id_installation("ses_01J9ZK3") is None


def test_an_unsuffixed_id_is_the_defaults_and_refused_by_name_when_default_is_not_served() -> None:
    # Never handed to the channel's or the only installation's core: a lookup there is not the default's.
    for specs, channel in (([_spec("eu-1")], None), (SPECS, "C0EU1")):
        with pytest.raises(InstallationRefused) as refused:
            resolve_installation(specs, flag=None, channel=channel, ids=["req_00ff"])
        said = str(refused.value)
        assert "`req_00ff`" in said and "installation `default`'s" in said and "before the installations file" in said
