"""deploy/docker-compose.two-bots.yml: two bots, one PostgreSQL, no Litestream (README, "Two bots, one store").

No image can be built here (no registry, no compose plugin), so the file is checked statically and its
bot environment is read by the bot's own settings loader, secrets as files, as a container would:
the store it names is the PostgreSQL URL of the mounted secret, not a file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from bot.settings import SECRET_NAMES, load_settings
from tests.install._compose import load_compose

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BOTS = ("recover-bot-a", "recover-bot-b")


@pytest.fixture(scope="module")
def pair() -> dict[str, Any]:
    return load_compose(DEPLOY / "docker-compose.two-bots.yml")


@pytest.fixture(scope="module")
def single() -> dict[str, Any]:
    return load_compose(DEPLOY / "docker-compose.yml")


def test_two_bots_are_one_definition_on_two_ports(pair: dict[str, Any]) -> None:
    a, b = (pair["services"][name] for name in BOTS)
    assert {k: v for k, v in a.items() if k != "ports"} == {k: v for k, v in b.items() if k != "ports"}
    assert a["ports"] != b["ports"] and a["command"] == ["serve"]
    for bot in (a, b):
        assert not bot.get("volumes"), "a bot on PostgreSQL keeps no store of its own"
        assert bot["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert bot["depends_on"]["socket-proxy"]["condition"] == "service_healthy"


def test_one_postgresql_and_no_litestream(pair: dict[str, Any]) -> None:
    services = pair["services"]
    assert set(services) == {*BOTS, "postgres", "socket-proxy"}
    assert not any("litestream" in str(s.get("image", "")) for s in services.values())
    pg = services["postgres"]
    assert re.fullmatch(r"postgres:\d+\.\d+", pg["image"]), "pinned to a full version"
    assert pg["environment"]["POSTGRES_PASSWORD_FILE"].startswith("/run/secrets/")
    assert "pg_isready" in pg["healthcheck"]["test"]
    assert any(str(v).endswith(":/var/lib/postgresql/data") for v in pg["volumes"])


def test_the_proxy_is_the_single_bots_proxy_admitting_both_bots(pair: dict[str, Any], single: dict[str, Any]) -> None:
    ours, theirs = pair["services"]["socket-proxy"], single["services"]["socket-proxy"]
    assert {k: v for k, v in ours.items() if k != "command"} == {k: v for k, v in theirs.items() if k != "command"}
    allow_from = [f for f in ours["command"] if f.startswith("-allowfrom=")]
    assert allow_from == ["-allowfrom=" + ",".join(BOTS)]
    assert [f for f in ours["command"] if not f.startswith("-allowfrom=")] == [
        f for f in theirs["command"] if not f.startswith("-allowfrom=")
    ], "the allow flags are the checked rendering of deploy/socket-proxy/allowlist.yaml (tests/docker)"


def test_every_secret_is_a_mounted_file_and_the_store_is_the_urls_postgresql(
    pair: dict[str, Any], tmp_path: Path
) -> None:
    bot = pair["services"]["recover-bot-a"]
    env: dict[str, str] = dict(bot["environment"])
    assert not set(SECRET_NAMES) & set(env) and "RECOVER_DB" not in env
    files: dict[str, str] = {
        "control_host_api_key": "k-compose-1",
        "slack_bot_token": "xoxb-compose-1",
        "slack_signing_secret": "sig-compose-1",
        "recover_audit_key": "a" * 64,
        "recover_db_url": "postgresql://recover:s3cret@postgres:5432/recover\n",
    }
    assert set(bot["secrets"]) == set(files) and set(files) <= set(pair["secrets"])
    mounted: dict[str, str] = {}
    for name, value in env.items():
        text = str(value)
        if text.startswith("/run/secrets/"):
            secret = text.removeprefix("/run/secrets/")
            assert secret in bot["secrets"], name
            path = tmp_path / secret
            path.write_text(files[secret])
            text = str(path)
        # compose's ${VAR:?…} and ${VAR:-default}: the deployer's value, or the default
        text = re.sub(r"\$\{(\w+):\?[^}]*\}", lambda m: {"CONTROL_HOST_URL": "http://ch:8080"}.get(m[1], "inst"), text)
        text = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", text)
        mounted[name] = text
    settings = load_settings(mounted, dotenv=None, requires=("control_host", "slack"))
    assert settings.store_target == "postgresql://recover:s3cret@postgres:5432/recover"
