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


_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


class _Imports(ast.NodeVisitor):
    """A file's imports that must work: ``(module, names, level, line)``; those in a ``try`` whose handler
    catches an import's failure (an optional import) and under ``if TYPE_CHECKING`` are left out."""

    def __init__(self):
        self.found: list[tuple[str, list[str], int, int]] = []
        self._optional = 0

    def visit_Try(self, node):
        caught = any(h.type is None or any(isinstance(n, ast.Name) and n.id in _IMPORT_ERRORS
                                           or isinstance(n, ast.Attribute) and n.attr in _IMPORT_ERRORS
                                           for n in ast.walk(h.type)) for h in node.handlers)
        self._optional += caught
        for child in node.body:
            self.visit(child)
        self._optional -= caught
        for child in [*node.handlers, *node.orelse, *node.finalbody]:
            self.visit(child)

    visit_TryStar = visit_Try

    def visit_If(self, node):
        test = node.test
        if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or \
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING":
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node):
        if not self._optional:
            self.found.extend((alias.name, [], 0, node.lineno) for alias in node.names)

    def visit_ImportFrom(self, node):
        if not self._optional:
            self.found.append((node.module or "", [a.name for a in node.names], node.level, node.lineno))


def external_imports(entry: Path, root: Path, path: list[Path]) -> dict[str, tuple[str, int]]:
    """The top-level modules the code imports from outside its workdir: ``{name: (file, line)}`` of the first
    import of each, following the imports from ``entry`` through the workdir's own files (``root``; ``path``:
    the folders Python looks in first, the script's folder or the workdir). Optional imports (in a ``try``
    that catches their failure) are left out; a file that cannot be read is passed over."""
    seen: set[Path] = set()
    todo = [entry]
    outside: dict[str, tuple[str, int]] = {}

    def own(parts: list[str], base: list[Path]) -> list[Path]:
        """The workdir's files that ``parts`` names from the folders ``base``: modules and packages' inits."""
        files = []
        for folder in base:
            here = folder
            for i, part in enumerate(parts):
                if (here / part / "__init__.py").is_file():
                    files.append(here / part / "__init__.py")
                if i == len(parts) - 1 and (here / f"{part}.py").is_file():
                    files.append(here / f"{part}.py")
                here = here / part
            if files or (folder / parts[0]).is_dir():
                return files or [folder / parts[0]]  # a namespace package: found, nothing to read
        return []

    while todo and len(seen) < MAX_FILES:
        file = todo.pop()
        if file in seen or not file.is_file():
            continue
        seen.add(file)
        try:
            if file.stat().st_size > MAX_FILE_BYTES:
                continue
            tree = ast.parse(file.read_bytes(), filename=file.name)
        except (OSError, SyntaxError, ValueError):
            continue
        visitor = _Imports()
        visitor.visit(tree)
        shown = file.relative_to(root).as_posix() if file.is_relative_to(root) else file.name
        for module, names, level, line in visitor.found:
            if level:  # relative: within the file's own package
                base = file.parent
                for _ in range(level - 1):
                    base = base.parent
                parts = [p for p in module.split(".") if p]
                targets = own(parts, [base]) if parts else []
                targets += [t for n in names for t in own(parts + [n], [base])]
                todo += [t for t in targets if t.suffix == ".py"]
                continue
            parts = module.split(".")
            targets = own(parts, path)
            if not targets:
                outside.setdefault(parts[0], (shown, line))
                continue
            targets += [t for n in names for t in own(parts + [n], path)]
            todo += [t for t in targets if t.suffix == ".py"]
    return outside
