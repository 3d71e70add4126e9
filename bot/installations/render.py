"""An installations file written for running control hosts (the sandbox's ``--installations``), in the
shape :func:`bot.installations.load_installations` reads, so ``serve``, ``installations check`` and
the demo can use it as it is. Keys are never written into it: a key file each (mode 0600) beside the
file, or the name of a variable to export.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path


def env_name(name: str) -> str:
    """The variable an installation's key is read from when no key file is written."""
    return "RECOVER_SANDBOX_KEY_" + re.sub(r"[^A-Z0-9]", "_", name.upper())


def installations_yaml(
    urls: Mapping[str, str], key_refs: Mapping[str, tuple[str, str]], channels: Sequence[str] = ()
) -> str:
    """The file's text: ``key_refs`` maps a name to ``("api_key_file", path)`` or ``("api_key_env", NAME)``;
    ``channels`` each installation's (none: bound to no channel until the operator lists one)."""
    lines = ["installations:"]
    for name, url in urls.items():
        kind, ref = key_refs[name]
        lines += [
            f"  - name: {name}",
            f"    control_host_url: {url}",
            f"    {kind}: {ref}",
            f"    channels: [{', '.join(channels)}]            # the Slack channel ids bound to this installation",
        ]
    return "\n".join(lines) + "\n"


def write_installations(
    path: Path, urls: Mapping[str, str], keys: Mapping[str, str], channels: Sequence[str] = ()
) -> list[Path]:
    """Write the file and each key beside it (``<name>.key``, owner-only); the files written. The
    folder's ``.gitignore`` ignores the keys: written into a checkout, ``git add .`` never commits one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ignore_keys(path.parent)
    written: list[Path] = []
    refs: dict[str, tuple[str, str]] = {}
    for name in urls:
        key_file = path.parent / f"{name}.key"
        descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(keys[name] + "\n")
        os.chmod(key_file, 0o600)  # an existing file keeps its mode through O_CREAT
        written.append(key_file)
        refs[name] = ("api_key_file", key_file.name)
    path.write_text(installations_yaml(urls, refs, channels), encoding="utf-8")
    written.append(path)
    return written


#: What a folder's ``.gitignore`` gets where keys are written (one line, added once).
KEYS_IGNORED = "*.key"


def ignore_keys(folder: Path) -> Path:
    """``folder/.gitignore`` with a line ignoring the key files (kept as it is when it has one)."""
    ignore = folder / ".gitignore"
    kept = ignore.read_text(encoding="utf-8") if ignore.exists() else ""
    if KEYS_IGNORED not in kept.splitlines():
        lead = "" if not kept or kept.endswith("\n") else "\n"
        ignore.write_text(
            f"{kept}{lead}# the control hosts' API keys: never committed\n{KEYS_IGNORED}\n", encoding="utf-8"
        )
    return ignore
