"""Build the test images locally from /usr/bin/busybox (no registry is reachable here).

Two images, both ``FROM scratch`` with a busybox rootfs:
- ``recover-bot-test/reconciler``: ``bun`` (tests/docker/images/bun) plays the control host's reconciler.
- ``recover-bot-test/worker``: ``worker`` prints /worker/log.txt and exits.

Tags carry a hash of their inputs, so a changed script rebuilds and an unchanged one is reused.
Run by hand: ``python -m tests.docker.images.build`` (honours DOCKER_HOST).
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import docker

HERE = Path(__file__).resolve().parent
BUSYBOX_CANDIDATES = ("/usr/bin/busybox", "/bin/busybox")
REPOSITORY = "recover-bot-test"


@dataclass(frozen=True)
class TestImages:
    reconciler: str
    worker: str


def find_busybox() -> Path:
    for candidate in BUSYBOX_CANDIDATES:
        path = Path(candidate)
        if path.is_file():
            return path
    found = shutil.which("busybox")
    if found:
        return Path(found)
    raise FileNotFoundError("busybox not found: install busybox-static (apt-get install busybox-static)")


def _applets(busybox: Path) -> list[str]:
    out = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout
    return sorted({a.strip() for a in out.split() if a.strip() and "/" not in a and a != "busybox"})


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = mode
    tar.addfile(info)


def _context(busybox: bytes, applets: list[str], dockerfile: str, scripts: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add_file(tar, "Dockerfile", dockerfile.encode())
        for d in (
            "rootfs",
            "rootfs/bin",
            "rootfs/usr",
            "rootfs/usr/local",
            "rootfs/usr/local/bin",
            "rootfs/worker",
        ):
            _add_dir(tar, d)
        _add_dir(tar, "rootfs/tmp", 0o1777)
        _add_file(tar, "rootfs/bin/busybox", busybox, 0o755)
        for applet in applets:
            link = tarfile.TarInfo(f"rootfs/bin/{applet}")
            link.type = tarfile.SYMTYPE
            link.linkname = "busybox"
            tar.addfile(link)
        for name, data in scripts.items():
            _add_file(tar, f"rootfs/usr/local/bin/{name}", data, 0o755)
    return buf.getvalue()


_DOCKERFILE = """FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin:/bin
{extra}
"""


def build_images(client: docker.DockerClient) -> TestImages:
    """Build (or reuse) both images; returns their tags."""
    busybox_path = find_busybox()
    busybox = busybox_path.read_bytes()
    applets = _applets(busybox_path)
    specs = {
        "reconciler": (
            {"bun": (HERE / "bun").read_bytes()},
            'CMD ["bun", "run", "apps/control-host/src/main.ts", "reconciler"]',
        ),
        "worker": ({"worker": (HERE / "worker").read_bytes()}, 'CMD ["worker"]'),
    }
    tags: dict[str, str] = {}
    for name, (scripts, extra) in specs.items():
        dockerfile = _DOCKERFILE.format(extra=extra)
        digest = hashlib.sha256(busybox + dockerfile.encode() + b"".join(scripts.values())).hexdigest()[:12]
        tag = f"{REPOSITORY}/{name}:{digest}"
        try:
            client.images.get(tag)
        except docker.errors.ImageNotFound:
            context = _context(busybox, applets, dockerfile, scripts)
            client.images.build(fileobj=io.BytesIO(context), custom_context=True, tag=tag, rm=True)
        tags[name] = tag
    return TestImages(reconciler=tags["reconciler"], worker=tags["worker"])


if __name__ == "__main__":
    images = build_images(docker.from_env())
    print(images.reconciler)
    print(images.worker)
