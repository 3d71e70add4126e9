"""Who is at the terminal: the console's acting user, fixed for the run.

Against a real control host the console acts as the account running it — never as a name from a
flag or from ``USER``/``LOGNAME``, which anyone can set. Behind ``sudo`` that account is root, so the
invoking user (``SUDO_USER``, trusted only when the real uid is root) is the one recorded.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable, Mapping


def terminal_login(
    *,
    environ: Mapping[str, str] | None = None,
    getuid: Callable[[], int] = os.getuid,
    getpwuid: Callable[[int], object] = pwd.getpwuid,
    getpwnam: Callable[[str], object] = pwd.getpwnam,
) -> str:
    """The login of the account running this process (``uid<N>`` when the uid has no account)."""
    env = os.environ if environ is None else environ
    uid = getuid()
    try:
        login = str(getpwuid(uid).pw_name)  # type: ignore[attr-defined]
    except KeyError:
        return f"uid{uid}"  # a container's uid without a passwd entry: recorded as such, never mapped by name
    sudo_user = (env.get("SUDO_USER") or "").strip()
    if uid == 0 and sudo_user and sudo_user != login:
        try:
            getpwnam(sudo_user)
        except KeyError:
            return login
        return sudo_user
    return login
