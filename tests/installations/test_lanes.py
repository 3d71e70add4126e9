"""Which installation a queued delivery acts on, read before it is claimed (the serve worker's lanes):
the fleet router's own resolution over two real sandboxes, from each kind of item as it is stored."""

from __future__ import annotations

from collections.abc import Callable

from bot.app.fleet_router import FleetRouter
from bot.slack import blocks as kit
from bot.slack import queued
from bot.slack.inbox import Item
from bot.vocab import Action


def _command(text: str, channel: str) -> Item:
    return Item(1, queued.COMMAND, "k", queued.command({"text": text, "channel_id": channel, "user_id": "UALICE"}))


def _click(action: str, value: str, channel: str) -> Item:
    body = {"channel": {"id": channel}, "user": {"id": "UBOB"}}
    return Item(2, queued.ACTION, "k", queued.action(body, action, value))


def test_each_kind_of_item_is_laned_by_the_routers_own_resolution(make_fleet: Callable[..., FleetRouter]) -> None:
    router = make_fleet("eu-1", "us-1")

    def lane(item: Item) -> str | None:
        return queued.installation_of(item, router)

    # Commands: the channel's binding, --install, the id's suffix; the fleet's own and unresolved: none.
    assert lane(_command("diagnose ses_a", "C0EU1")) == "eu-1"
    assert lane(_command("diagnose ses_a --install us-1", "C0NONE")) == "us-1"
    assert lane(_command("approve req_0a1b2c.us-1", "C0NONE")) == "us-1"
    assert lane(_command("diagnose ses_a", "C0NONE")) is None  # refused when run: "Which installation?"
    assert lane(_command("approve req_0a1b2c.us-1", "C0EU1")) is None  # contradicts the channel: refused
    for fleet_wide in ("help", "installations", "triage --all", "handoff", "dignose ses_a"):
        assert lane(_command(fleet_wide, "C0EU1")) is None, fleet_wide
    # Clicks and decide forms: the button's tag.
    assert lane(_click(Action.APPROVE, "req_0a1b2c.eu-1@eu-1", "C0NONE")) == "eu-1"
    assert lane(_click(Action.DECIDE, "ses_a@us-1|abandon", "C0NONE")) == "us-1"
    form = kit.DecideForm(session_id="ses_a@eu-1", decision="abandon", channel="C0NONE")
    assert lane(Item(3, queued.DECIDE, "k", queued.decide("UALICE", form, {"reason": "r"}))) == "eu-1"
    # App Home opens and rows that are not deliveries belong to no installation.
    assert lane(Item(4, queued.HOME, "k", queued.home("Ev1", "UALICE"))) is None
    assert lane(Item(5, queued.COMMAND, "k", {}, damage="its payload is not JSON")) is None
