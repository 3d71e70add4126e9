"""Reproducible builds: requirements.lock against pyproject.toml, and the pins of every image.

The image installs exactly requirements.lock (versions and sha256 hashes, ``--require-hashes``), so the
lock must satisfy every dependency pyproject.toml declares, build requirements included, and hold the
requirements of what it pins. Base images are pinned by digest with their tag; compose pulls only full
versions or digests; the build context is only what the Dockerfile copies.
"""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.install._compose import load_compose

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
PG_LOCK = ROOT / "requirements-postgres.lock"  # the image's `postgres` extra (EXTRAS=postgres)
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)\s*\\?$")
HASH = re.compile(r"^\s+--hash=sha256:[a-f0-9]{64}\s*\\?$")
DIGEST = re.compile(r"^[a-z0-9./-]+:[A-Za-z0-9._-]+@sha256:[a-f0-9]{64}$")


def read_lock(text: str) -> dict[str, tuple[str, int]]:
    """``{name: (version, number of hashes)}``; anything but pins, hashes and comments is an error."""
    pins: dict[str, tuple[str, int]] = {}
    current: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if m := PIN.match(line):
            current = canonicalize_name(m.group(1))
            assert current not in pins, f"requirements.lock:{number}: {current} pinned twice"
            pins[current] = (m.group(2), 0)
        elif HASH.match(line) and current is not None:
            version, hashes = pins[current]
            pins[current] = (version, hashes + 1)
        else:
            raise AssertionError(f"requirements.lock:{number}: not a pin or a hash: {line.strip()}")
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [Requirement(r) for r in [*project["project"]["dependencies"], *project["build-system"]["requires"]]]


def unsatisfied(pins: dict[str, tuple[str, int]], wanted: list[Requirement]) -> list[str]:
    problems = []
    for req in wanted:
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        pinned = pins.get(canonicalize_name(req.name))
        if pinned is None:
            problems.append(f"{req}: not in requirements.lock")
        elif not req.specifier.contains(pinned[0], prereleases=True):
            problems.append(f"{req}: requirements.lock pins {pinned[0]}")
    return problems


def test_the_lock_pins_every_dependency_exactly_with_hashes() -> None:
    pins = read_lock(LOCK.read_text())
    assert unsatisfied(pins, _declared()) == []
    assert all(hashes >= 1 for _, hashes in pins.values()), [n for n, (_, h) in pins.items() if not h]
    assert {"pip", "setuptools"} <= set(pins)  # the build tools too: nothing unhashed is fetched


@pytest.mark.subprocess
def test_the_lock_holds_what_its_pins_require() -> None:
    """Closed under dependencies, checked from the installed metadata of every pin installed at its version."""
    pins = read_lock(LOCK.read_text())
    checked = 0
    for name, (version, _) in sorted(pins.items()):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        checked += 1
        assert unsatisfied(pins, [Requirement(r) for r in dist.requires or []]) == [], name
    assert checked >= len(pins) // 2, "the test environment should run the locked versions (pip install -r)"


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            lambda t: re.sub(r"^docker==[^ ]+", "docker==6.1.0", t, flags=re.M),
            "docker>=7.1: requirements.lock pins 6.1.0",
        ),
        (
            lambda t: re.sub(r"^websockets==[\s\S]*?(?=^\S)", "", t, flags=re.M),
            "websockets>=13: not in requirements.lock",
        ),
    ],
    ids=["too-old", "missing"],
)
def test_the_check_catches_a_lock_that_does_not_satisfy_pyproject(edit, problem) -> None:
    assert problem in unsatisfied(read_lock(edit(LOCK.read_text())), _declared())


def test_a_pin_without_a_hash_or_a_loose_line_is_refused() -> None:
    with pytest.raises(AssertionError, match="not a pin or a hash"):
        read_lock("docker>=7.1\n")
    pins = read_lock("docker==7.2.0\n")
    assert pins["docker"] == ("7.2.0", 0)


def test_the_dockerfile_installs_the_lock_with_hashes_on_a_base_pinned_by_digest() -> None:
    text = DOCKERFILE.read_text()
    bases = re.findall(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)", text, re.M)
    assert bases and all(DIGEST.match(b) for b in bases), bases
    assert re.search(r"pip install --require-hashes --no-deps -r requirements\.lock", text)
    # The project itself adds nothing from an index.
    assert re.search(r"pip install --no-deps --no-build-isolation --no-index \.", text)


def _extra(name: str) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [Requirement(r) for r in project["project"]["optional-dependencies"][name]]


def test_the_postgres_lock_pins_the_extra_and_what_it_requires_with_hashes() -> None:
    pins = read_lock(PG_LOCK.read_text())
    base = read_lock(LOCK.read_text())
    assert not set(pins) & set(base), "a package pinned in both locks"
    assert unsatisfied(pins, _extra("postgres")) == []
    assert "psycopg-binary" in pins, "the [binary] extra: the image has no libpq of its own"
    assert all(hashes >= 1 for _, hashes in pins.values())
    both = {**base, **pins}
    for name, (version, _) in pins.items():
        dist = metadata.distribution(name)
        if dist.version == version:  # closed under dependencies, with the base lock beside it
            wanted = [Requirement(r) for r in dist.requires or [] if "extra ==" not in r]
            assert unsatisfied(both, wanted) == [], name


def test_the_dockerfile_installs_the_postgres_lock_only_for_that_extra_with_hashes() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(
        r'if \[ "\$EXTRAS" = "postgres" \]; then \\\n'
        r"\s+\S+pip install --require-hashes --no-deps -r requirements-postgres\.lock",
        text,
    )
    pair = load_compose(ROOT / "deploy" / "docker-compose.two-bots.yml")
    for name in ("recover-bot-a", "recover-bot-b"):
        assert pair["services"][name]["build"]["args"]["EXTRAS"] == "postgres"


def test_every_image_compose_pulls_is_a_full_version_or_a_digest() -> None:
    for name in ("docker-compose.yml", "docker-compose.socket-mode.yml", "docker-compose.two-bots.yml"):
        data = load_compose(ROOT / "deploy" / name)
        for service, spec in data.get("services", {}).items():
            image = spec.get("image")
            if image is None or "build" in spec:
                continue
            # PostgreSQL's full versions have two parts (15.10) since version 10.
            full = r"postgres:\d+\.\d+" if image.startswith("postgres:") else r"[a-z0-9./-]+:\d+\.\d+\.\d+"
            assert re.fullmatch(full + r"(@sha256:[a-f0-9]{64})?", image) or DIGEST.match(image), (
                f"{name}: {service}: {image} is not pinned to a full version or a digest"
            )


def test_the_build_context_is_only_what_the_dockerfile_copies() -> None:
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    rules = [line for line in lines if line and not line.startswith("#")]
    assert rules[0] == "**"  # everything out (.venv, .env, deploy/secrets, stores, test state) …
    included = {r[1:].removesuffix("/**") for r in rules if r.startswith("!")}
    copied = set()
    for sources in re.findall(r"^COPY\s+(?!--from)(.+)\s+\S+$", DOCKERFILE.read_text(), re.M):
        copied |= set(sources.split())
    assert included == copied  # … and back in exactly what COPY takes
    assert {"**/*.db", "**/*.db-wal", "**/*.inbox*"} <= set(rules)
