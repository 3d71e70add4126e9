"""Reading the deployment's compose files in tests: a safe loader that knows compose's merge tags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class SafeComposeLoader(yaml.SafeLoader):
    """yaml's safe loader, plus compose's merge tags (!reset, !override) read as their plain values."""


def _plain(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node)
    return loader.construct_scalar(node)


for _tag in ("!reset", "!override"):
    SafeComposeLoader.add_constructor(_tag, _plain)


def load_compose(path: Path) -> Any:
    return yaml.load(path.read_text(), Loader=SafeComposeLoader)  # a SafeLoader subclass
