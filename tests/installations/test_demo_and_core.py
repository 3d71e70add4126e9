"""The demo with several installations and the single core given an installations file: the sandbox
side runs (a host per installation, a scheduler pass on each), and a core that serves one installation
refuses the file in one line instead of serving one of its installations by guess."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from bot.app.compose import FrontPorts, compose
from bot.cli import main
from bot.clock import ManualClock
from bot.console import DemoClock, run_demo
from bot.installations import InstallationsError
from bot.installations.render import write_installations
from bot.sandbox import start_installations
from bot.settings import Settings


def test_the_demo_clock_runs_a_scheduler_pass_on_every_installation() -> None:
    with start_installations(["eu-1", "us-1"], clock=ManualClock()) as hosts:
        clock = DemoClock(hosts, pace=0)
        before = clock.now()
        clock.sleep(30)
        assert (clock.now() - before).total_seconds() == 30 and clock.passes == 1
        for host in hosts.values():
            assert host.admin.now() == clock.now()  # one clock for every installation


def test_an_installations_file_is_composed_as_its_installations_or_refused_with_file_and_line(tmp_path: Path) -> None:
    """The one composition root reads the file: a core per installation (never one of them by guess, and
    nothing sent while composing), or every ``FILE:LINE`` problem."""
    with start_installations(["eu-1", "us-1"], clock=ManualClock()) as hosts:
        path = tmp_path / "conf" / "installations.yaml"
        write_installations(path, {n: h.url for n, h in hosts.items()}, {n: h.api_key for n, h in hosts.items()})
        settings = Settings(db_path=tmp_path / "recover.db", installations_file=path)
        assert list(compose(settings, ports=FrontPorts(), startup=False).cores) == ["eu-1", "us-1"]
        for host in hosts.values():
            assert host.admin.requests() == []  # nothing reached either installation
    (tmp_path / "bad.yaml").write_text("installations:\n  - name: eu-1\n    control_host_url: https://c.example\n")
    with pytest.raises(InstallationsError) as bad:
        compose(
            settings.model_copy(update={"installations_file": tmp_path / "bad.yaml"}), ports=FrontPorts(), startup=False
        )
    assert bad.value.problems == [
        f"{tmp_path / 'bad.yaml'}:2: no API key: give api_key_file (a mounted secret) or api_key_env (a variable's "
        f"name)"
    ]


def test_the_demo_with_two_installations_starts_their_hosts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`demo --installations eu-1,us-1`: a control host each, the same session ids on both, the bot
    given their installations file; a command naming neither is refused, one naming us-1 answers as us-1."""
    out = io.StringIO()
    status = run_demo(
        Settings(db_path=tmp_path / "demo.db"),
        installations=("eu-1", "us-1"),
        stdin=io.StringIO(
            "/recover installations\n"
            "/recover diagnose ses_startup_stopped\n"
            "/recover diagnose ses_startup_stopped --install us-1\n"
            # Each installation lists the console's channel, so the demo decides (with --install).
            '/recover decide ses_startup_stopped start_fresh --reason "nothing to keep" --install us-1\n'
        ),
        stdout=out,
    )
    text = out.getvalue()
    assert status == 1, capsys.readouterr().err  # piped input: 1 since one command was refused
    assert "This bot serves 2 installation(s)" in text
    assert "Which installation? This bot serves 2, and `diagnose` names none." in text
    assert "[us-1] ses_startup_stopped: Startup failures stopped the session" in text
    assert "[eu-1] ses_startup_stopped" not in text
    assert "not allowed in this channel" not in text and "[us-1] " in text.split("start_fresh", 1)[-1]


def test_the_demo_flag_takes_installation_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["demo", "--installations", "eu-1,EU-2"])
    assert caught.value.code == 2
    assert "'eu-1,EU-2': name each installation once" in capsys.readouterr().err
