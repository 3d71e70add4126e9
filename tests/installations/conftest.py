"""Several installations from one bot: separately started sandboxes (identical session ids) behind
one fleet router, each with its own store file beside RECOVER_DB."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from bot.app.compose import FrontPorts, compose
from bot.app.fleet_router import FleetRouter
from bot.installations import InstallationSpec
from bot.sandbox import SandboxHandle, start_sandbox
from bot.settings import load_settings

#: Each installation's channel (its binding); C0NONE is bound to none.
CHANNELS = {"eu-1": "C0EU1", "us-1": "C0US1", "ap-1": "C0AP1"}


def spec_for(name: str, handle: SandboxHandle, *, channels: tuple[str, ...] | None = None) -> InstallationSpec:
    return InstallationSpec(
        name=name,
        control_host_url=handle.url,
        api_key=SecretStr(handle.api_key),
        compose_project=None,
        channels=channels if channels is not None else (CHANNELS[name],),
    )


@pytest.fixture
def sandboxes() -> Iterator[Callable[[str], SandboxHandle]]:
    started: dict[str, SandboxHandle] = {}

    def get(name: str, **kwargs: Any) -> SandboxHandle:
        if name not in started:
            started[name] = start_sandbox(**kwargs)
        return started[name]

    yield get
    for handle in started.values():
        handle.stop()


@pytest.fixture
def make_fleet(sandboxes: Callable[..., SandboxHandle], tmp_path: Path) -> Callable[..., FleetRouter]:
    def make(*names: str, **overrides: Any) -> FleetRouter:
        settings = load_settings({}, dotenv=None).model_copy(
            update={"db_path": tmp_path / "recover.db", "approvers": (), **overrides}
        )
        specs = [spec_for(n, sandboxes(n)) for n in names]
        return compose(settings, specs, startup=False, ports=FrontPorts()).router

    return make


def posts(handle: SandboxHandle) -> list[dict[str, Any]]:
    return [r for r in handle.admin.requests() if r.get("method") == "POST"]


def text_of(reply: Any) -> str:
    return "\n".join(m.plain_text() for m in reply.messages)
