"""What a user's script says of itself, read without running it (Qt-free).

Which Keras it imports and whether it trains with ``fit``; ``tfcc check`` asks it before a launch
(console.checks)."""

from __future__ import annotations

import ast
import logging
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("console.script_source")

MAX_FILES = 500            # Python files read at most (the script first)
MAX_FILE_BYTES = 2 << 20   # a bigger .py file is data, not code a person wrote


@dataclass
class KerasUse:
    """Where the script's code imports each Keras and calls ``fit``: ``(file, line)`` pairs."""

    keras3: list[tuple[str, int]] = field(default_factory=list)    # import keras / from keras import ...
    tf_keras: list[tuple[str, int]] = field(default_factory=list)  # import tf_keras / from tf_keras ...
    tf_dot_keras: list[tuple[str, int]] = field(default_factory=list)  # tf.keras / from tensorflow import keras
    fit: list[tuple[str, int]] = field(default_factory=list)       # x.fit(...)

    @staticmethod
    def where(found: list[tuple[str, int]]) -> str:
        return ", ".join(f"{name}:{line}" for name, line in found[:3]) + (" …" if len(found) > 3 else "")


def keras_use(files: list[tuple[str, Path]]) -> KerasUse:
    """Read ``files`` ((name shown, path) of the script and the Python files beside it, the script
    first); a file that cannot be read or parsed is passed over (running it will say why)."""
    use = KerasUse()
    for name, path in files[:MAX_FILES]:
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            tree = ast.parse(path.read_bytes(), filename=name)
        except (OSError, SyntaxError, ValueError):
            log.info("not read for its Keras: %s", path)
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    _note(use, alias.name, name, node.lineno)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                _note(use, node.module, name, node.lineno)
                if node.module == "tensorflow" and any(a.name == "keras" for a in node.names):
                    use.tf_dot_keras.append((name, node.lineno))
            elif isinstance(node, ast.Attribute) and node.attr == "keras" and isinstance(node.value, ast.Name) \
                    and node.value.id in ("tf", "tensorflow"):
                use.tf_dot_keras.append((name, node.lineno))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "fit":
                use.fit.append((name, node.lineno))
    return use


def _note(use: KerasUse, module: str, name: str, line: int) -> None:
    top = module.split(".")[0]
    if top == "keras":
        use.keras3.append((name, line))
    elif top == "tf_keras":
        use.tf_keras.append((name, line))
    elif module.startswith("tensorflow.keras"):  # from tensorflow.keras import layers
        use.tf_dot_keras.append((name, line))


@dataclass
class Imports:
    """A file's imports at its top level of names: ``relative`` lines (``from . import x``), and each absolute
    top-level module it names with its first line (``import a.b`` -> ``a``)."""

    relative: list[int] = field(default_factory=list)
    absolute: dict[str, int] = field(default_factory=dict)


def imports(path: Path) -> Imports:
    """The imports of one file (anywhere in it: a function's own import counts); none for a file that cannot
    be read or parsed (running it will say why)."""
    found = Imports()
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return found
        tree = ast.parse(path.read_bytes(), filename=path.name)
    except (OSError, SyntaxError, ValueError):
        return found
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                found.relative.append(node.lineno)
            elif node.module:
                found.absolute.setdefault(node.module.split(".")[0], node.lineno)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found.absolute.setdefault(alias.name.split(".")[0], node.lineno)
    found.relative.sort()
    return found
