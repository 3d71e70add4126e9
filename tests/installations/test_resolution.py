"""Resolution: --install, else the command's ids, else the channel's binding, else the only one;
anything else refused with the list (never a silent default). Real sandboxes over HTTP, real stores."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from bot.app.compose import FrontPorts, compose
from bot.app.fleet_router import FleetRouter
from bot.messages import ListReporter
from bot.sandbox import SandboxHandle
from bot.settings import load_settings
from tests.installations.conftest import posts, spec_for, text_of

SESSION = "ses_unknown_ckpt_unavailable"


def _say(router: FleetRouter, line: str, channel: str | None) -> object:
    return router.handle_text(line, actor="alice", channel=channel, reporter=ListReporter())


def test_the_channel_binding_picks_the_installation_and_the_answer_names_it(
    make_fleet: Callable[..., FleetRouter], sandboxes: Callable[..., object]
) -> None:
    router = make_fleet("eu-1", "us-1")
    reply = _say(router, f"/recover diagnose {SESSION}", "C0EU1")
    assert reply.ok, text_of(reply)
    assert reply.messages[0].headline.startswith("[eu-1] ")
    eu, us = sandboxes("eu-1"), sandboxes("us-1")
    assert any(SESSION in r["path"] for r in eu.admin.requests())
    assert not us.admin.requests()  # the same session id exists there: it was never asked


def test_an_unbound_channel_with_several_installations_is_refused_with_the_list(
    make_fleet: Callable[..., FleetRouter], sandboxes: Callable[..., object]
) -> None:
    router = make_fleet("eu-1", "us-1")
    for line in (f"/recover diagnose {SESSION}", "/recover cases", "/recover triage"):
        reply = _say(router, line, "C0NONE")
        assert not reply.ok
        text = text_of(reply)
        assert "Which installation?" in text and "eu-1" in text and "us-1" in text and "--install" in text
    assert not sandboxes("eu-1").admin.requests() and not sandboxes("us-1").admin.requests()


def test_install_flag_chooses_and_an_unknown_name_is_refused(make_fleet: Callable[..., FleetRouter]) -> None:
    router = make_fleet("eu-1", "us-1")
    reply = _say(router, f"/recover diagnose {SESSION} --install us-1", "C0NONE")
    assert reply.ok and reply.messages[0].headline.startswith("[us-1] ")
    unknown = _say(router, f"/recover diagnose {SESSION} --install xx-9", "C0EU1")
    assert not unknown.ok
    assert "no installation `xx-9`" in text_of(unknown) and "eu-1" in text_of(unknown)


def test_an_id_of_another_installation_is_refused(make_fleet: Callable[..., FleetRouter]) -> None:
    router = make_fleet("eu-1", "us-1")
    in_channel = _say(router, "/recover approve req_0123456789abcdef.eu-1", "C0US1")
    assert not in_channel.ok and "belongs to installation `eu-1`" in text_of(in_channel)
    by_flag = _say(router, "/recover approve req_0123456789abcdef.eu-1 --install us-1", "C0NONE")
    assert not by_flag.ok and "not `us-1`" in text_of(by_flag)
    unserved = _say(router, "/recover details req_0123456789abcdef.zz-1", "C0EU1")
    assert not unserved.ok and "no installation `zz-1`" in text_of(unserved)


def test_installations_lists_bindings_and_marks_the_channel_never_the_key(
    make_fleet: Callable[..., FleetRouter], sandboxes: Callable[..., object]
) -> None:
    router = make_fleet("eu-1", "us-1")
    reply = _say(router, "/recover installations", "C0US1")
    text = text_of(reply)
    assert "resolves to us-1" in text
    assert [line for line in reply.messages[0].lines if "this channel" in line][0].startswith("us-1:")
    assert sandboxes("eu-1").url in text
    assert sandboxes("eu-1").api_key not in text and sandboxes("us-1").api_key not in text


def test_triage_all_reads_every_installation_grouped_by_installation(
    make_fleet: Callable[..., FleetRouter], sandboxes: Callable[..., object]
) -> None:
    router = make_fleet("eu-1", "us-1")
    reply = _say(router, "/recover triage --all", "C0NONE")
    assert reply.ok, text_of(reply)
    # One message for the fleet, grouped by installation first (not one summary per installation).
    (message,) = reply.messages
    assert message.kind == "triage_all"
    leads = [line for line in message.lines if line.startswith("*")]
    assert [lead.split(" · ", 1)[0] for lead in leads] == ["*eu-1*", "*us-1*"]
    assert all("Triage t" in lead for lead in leads)
    eu_part = message.lines[message.lines.index(leads[0]) + 1 : message.lines.index(leads[1])]
    assert any(line.strip().startswith("*t1.g") for line in eu_part)  # its groups, under its name
    # The rest is one click away: each installation's Details button, tagged with its installation.
    assert {b.value.rsplit("@", 1)[1] for b in message.buttons if b.value.startswith("details ")} == {"eu-1", "us-1"}
    assert sandboxes("eu-1").admin.requests() and sandboxes("us-1").admin.requests()


def test_each_installation_has_its_own_store_file(make_fleet: Callable[..., FleetRouter], tmp_path: Path) -> None:
    router = make_fleet("eu-1", "us-1")
    assert router.fleet.core("eu-1").store.path == tmp_path / "recover-eu-1.db"
    assert router.fleet.core("us-1").store.path == tmp_path / "recover-us-1.db"
    assert router.fleet.core("eu-1").client is not router.fleet.core("us-1").client


def test_one_default_installation_answers_exactly_as_before(
    make_fleet: Callable[..., FleetRouter], tmp_path: Path
) -> None:
    from bot.app.compose import FrontPorts, compose
    from bot.settings import load_settings

    settings = load_settings({}, dotenv=None).model_copy(update={"db_path": tmp_path / "one.db"})
    from bot.sandbox import start_sandbox

    with start_sandbox() as sbx:
        router = compose(settings, sandboxes={"default": sbx}, startup=False, ports=FrontPorts()).router
        reply = _say(router, f"/recover diagnose {SESSION}", "C0NONE")
        assert reply.ok and not reply.messages[0].headline.startswith("[")
        assert _say(router, f"/recover diagnose {SESSION} --install default", None).ok
        assert "no installation `eu-1`" in text_of(_say(router, "/recover cases --install eu-1", None))
        assert not posts(sbx)
    assert router.fleet.core("default").store.path == tmp_path / "one.db"


def test_the_fleet_of_one_default_answers_word_for_word_as_the_plain_router(tmp_path: Path) -> None:
    from bot.app.compose import FrontPorts, compose
    from bot.sandbox import start_sandbox
    from bot.settings import load_settings
    from tests.fixtures.composing import default_router

    lines = ("/recover help", "/recover cases", f"/recover diagnose {SESSION}", "/recover bogus", "/recover pending")
    with start_sandbox() as sbx:
        plain = default_router(
            load_settings({}, dotenv=None).model_copy(update={"db_path": tmp_path / "a.db"}), sandbox=sbx, startup=False
        )
        fleet = compose(
            load_settings({}, dotenv=None).model_copy(update={"db_path": tmp_path / "b.db"}),
            sandboxes={"default": sbx},
            ports=FrontPorts(),
            startup=False,
        ).router
        for line in lines:
            assert text_of(_say(fleet, line, "C1")) == text_of(_say(plain, line, "C1")), line
        forged = fleet.handle_action("approve", "req_0123@eu-1", actor="bob", channel="C1", reporter=ListReporter())
        assert text_of(forged) == text_of(
            plain.handle_action("approve", "req_0123@eu-1", actor="bob", channel="C1", reporter=ListReporter())
        )


def test_pending_all_answers_for_every_installation_grouped_by_installation(
    make_fleet: Callable[..., FleetRouter],
) -> None:
    router = make_fleet("eu-1", "us-1")
    unnamed = _say(router, "/recover pending", "C0NONE")
    assert not unnamed.ok and "--install" in text_of(unnamed)  # a channel bound to none: which one?
    reply = _say(router, "/recover pending --all", "C0NONE")
    assert reply.ok, text_of(reply)
    assert [m.headline.split(" ", 1)[0] for m in reply.messages] == ["[eu-1]", "[us-1]"]


def test_a_typed_group_id_of_a_named_installation_never_resolves_to_the_defaults_group(
    sandboxes: Callable[..., SandboxHandle], tmp_path: Path
) -> None:
    # The default installation (its store is RECOVER_DB, from before the installations file) served
    # beside eu-1: both triage the same sessions, so both stores hold a group of the same number.
    settings = load_settings({}, dotenv=None).model_copy(update={"db_path": tmp_path / "recover.db", "approvers": ()})
    specs = [spec_for("default", sandboxes("default"), channels=("C0DEF",)), spec_for("eu-1", sandboxes("eu-1"))]
    router = compose(settings, specs, startup=False, ports=FrontPorts()).router
    assert _say(router, "/recover triage", "C0DEF").ok
    eu_triage = _say(router, "/recover triage", "C0EU1")
    assert eu_triage.ok, text_of(eu_triage)
    # The group id as people copy it from eu-1's triage reply.
    group = re.findall(r"\bt\d+\.g\d+(?:\.[a-z][a-z0-9-]*)?", text_of(eu_triage))[0]
    line = f'/recover dryrun batch decide {group} retry_restore --reason "store back"'
    assert router.installation_of_text(line, "C0NONE") == "eu-1"
    reply = _say(router, line, "C0NONE")
    assert reply.messages[0].headline.startswith("[eu-1] "), text_of(reply)
