"""A safe YAML loader that remembers where every value came from.

Runbook errors must point at ``file:line``; PyYAML's SafeLoader builds plain dicts and lists and forgets
positions, so :class:`LineLoader` walks the composed node tree once more and records the line of every
mapping value and sequence item by its path (``("commands", 3, "flags", 0)``). It also refuses duplicate
keys, which plain YAML would silently let the last one win.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

Path_ = tuple[str | int, ...]


@dataclass
class LineMap:
    """Lines (1-based) by path inside one document; lookups fall back to the nearest known parent."""

    file: str
    lines: dict[Path_, int] = field(default_factory=dict)

    def line(self, path: Sequence[object]) -> int:
        # Paths are YAML keys and list indexes; anything else is looked up by its text.
        parts: list[str | int] = [p if isinstance(p, int) else str(p) for p in path]
        while parts:
            key = tuple(parts)
            if key in self.lines:
                return self.lines[key]
            parts.pop()
        return self.lines.get((), 1)

    def where(self, path: Sequence[object]) -> str:
        return f"{self.file}:{self.line(path)}"


class LineLoader(yaml.SafeLoader):
    """SafeLoader that records line numbers by path and reports duplicate keys as problems."""

    def __init__(self, stream: str, file: str) -> None:
        super().__init__(stream)
        self.line_map = LineMap(file)
        self.duplicate_keys: list[tuple[int, str]] = []

    def load_with_lines(self) -> object:
        """Construct the single document and fill :attr:`line_map` (call once)."""
        node = self.get_single_node()
        if node is None:
            return None
        # Walk before constructing: construction flattens merge keys (<<) in place, which would make an
        # explicit override of a merged key look like a duplicate.
        self._record(node, (), set())
        return self.construct_document(node)

    def _record(self, node: yaml.Node, path: Path_, seen: set[int]) -> None:
        self.line_map.lines.setdefault(path, node.start_mark.line + 1)
        if id(node) in seen:  # aliases may form cycles
            return
        seen = seen | {id(node)}
        if isinstance(node, yaml.MappingNode):
            keys_here: set[str] = set()
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = str(key_node.value)
                if key == "<<":
                    continue
                if key in keys_here:
                    self.duplicate_keys.append((key_node.start_mark.line + 1, key))
                keys_here.add(key)
                # The key's line reads best in messages: "decisions.close" points at "close:".
                self.line_map.lines.setdefault((*path, key), key_node.start_mark.line + 1)
                self._record(value_node, (*path, key), seen)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self._record(item, (*path, index), seen)


def load_yaml(text: str, file: str) -> tuple[object, LineMap, list[str]]:
    """Parse ``text`` safely; return the data, its line map and ``file:line: problem`` strings."""
    loader = LineLoader(text, file)
    problems: list[str] = []
    try:
        data = loader.load_with_lines()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        what = exc.problem or str(exc)
        if exc.context:
            what = f"{exc.context}: {what}"
        return None, loader.line_map, [f"{file}:{line}: invalid YAML: {what}"]
    except yaml.YAMLError as exc:
        return None, loader.line_map, [f"{file}:1: invalid YAML: {exc}"]
    finally:
        loader.dispose()
    for line, key in loader.duplicate_keys:
        problems.append(f"{file}:{line}: duplicate key '{key}' (YAML would silently keep only the last one)")
    return data, loader.line_map, problems


def read_yaml_file(path: Path) -> tuple[object, LineMap, list[str]]:
    """Read and parse one runbook file; an unreadable file is a problem, not a crash."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, LineMap(str(path)), [f"{path}:1: cannot read the file: {exc}"]
    return load_yaml(text, str(path))
