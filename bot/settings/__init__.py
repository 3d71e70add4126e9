"""Settings, read once at start from the environment and an optional ``.env`` file (pydantic-settings).

Names are fixed (tools and deployments rely on them); further settings use the ``RECOVER_`` prefix.
Validation reports every problem at once, one line each, and never prints a secret's value (secrets
are ``SecretStr``). Each subcommand asks only for the groups of settings it uses (:data:`GROUPS`).
Three jobs, three modules: parsing one value (``_parse``), the model and what each group requires
(``_model``), reading the sources and naming the problems (``_load``).
"""

from __future__ import annotations

from pydantic import SecretStr

from bot.settings._load import environ_names, load_settings, read_dotenv
from bot.settings._model import ALL_GROUPS, GROUPS, SECRET_NAMES, Settings
from bot.settings._parse import DEFAULT_SLACK_API_URL, RUNBOOKS_PACKAGE, packaged_runbooks


def reveal(secret: SecretStr | None) -> str | None:
    """A secret's value, for the one call that needs it (a client's constructor); never log it."""
    return secret.get_secret_value() if secret is not None else None


__all__ = [
    "ALL_GROUPS",
    "DEFAULT_SLACK_API_URL",
    "GROUPS",
    "RUNBOOKS_PACKAGE",
    "SECRET_NAMES",
    "Settings",
    "environ_names",
    "load_settings",
    "packaged_runbooks",
    "read_dotenv",
    "reveal",
]
