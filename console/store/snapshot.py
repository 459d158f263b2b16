"""A metrics store as kept on disk when its session ended, typed: ``Snapshot`` and its two files (Qt-free).

``store.json`` holds a ``Snapshot`` (everything but the tables' rows, and where the session that saved it
had read each task up to); ``store.npz`` holds every table's rows as they were kept. ``store.json`` is
written last and removed first: a folder without it holds no snapshot, whatever else is there. Nothing
here reaches a host.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from console.files import open_private, write_atomically
from console.threads import give_way

STATE, ARRAYS = "store.json", "store.npz"


JSON_PIECE = 500  # list items encoded per call (to_json)


def _piece(items: list) -> str:
    """A piece of a long list as JSON, without its brackets (the window's thread first: console.threads)."""
    give_way()
    return json.dumps(items)[1:-1]


@dataclass
class Snapshot:
    """What a store keeps besides its rows, and what the next session of the run needs to go on from it."""

    FORMAT = 2  # 2: events and markers are data (the views word them), not words

    tables: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (owner, kind, columns), in order
    workers: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    progress: dict[str, dict] = field(default_factory=dict)   # task -> its WorkerProgress's fields
    epochs: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    restarts: list[tuple] = field(default_factory=list)       # (attempt, the step it resumed from)
    markers: list[dict] = field(default_factory=list)         # each a Marker's fields
    states: dict[str, tuple] = field(default_factory=dict)
    alive: dict[str, dict] = field(default_factory=dict)
    gpus_used: dict[str, list | None] = field(default_factory=dict)
    origin: float | None = None
    base: float | None = None
    diverged: list[tuple] = field(default_factory=list)
    # Where the session had read each task up to: the byte offset of its metrics file on its host, the
    # lines of this console's copy of it (and that copy's size then), and the records supervision needs
    # again (console.run.session).
    offsets: dict[str, int] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    kept: dict[str, list[dict]] = field(default_factory=dict)

    def to_json(self) -> str:
        """The snapshot as JSON, its long lists (events, epochs) encoded a piece at a time: one encoding of a
        whole flood's events held the interpreter, and the window's thread with it, for a tenth of a second."""
        data = {"format": self.FORMAT, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}
        parts = []
        for name, value in data.items():
            if isinstance(value, list) and len(value) > JSON_PIECE:
                value = "[" + ", ".join(_piece(value[i:i + JSON_PIECE]) for i in range(0, len(value), JSON_PIECE)) + "]"
            else:
                value = json.dumps(value)
            parts.append(f"{json.dumps(name)}: {value}")
        return "{" + ", ".join(parts) + "}"

    @classmethod
    def from_json(cls, text: str) -> Snapshot:
        """The snapshot ``text`` holds; ValueError for one of another format, or damaged."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != cls.FORMAT:
            raise ValueError("not a snapshot of this format")
        names = {f.name: f for f in dataclasses.fields(cls)}
        kinds = {"tables": list, "workers": list, "hosts": list, "progress": dict, "epochs": list, "events": list,
                 "restarts": list, "markers": list, "states": dict, "alive": dict, "gpus_used": dict,
                 "diverged": list, "offsets": dict, "lines": dict, "sizes": dict, "kept": dict}
        values = {}
        for name in names:
            value = data.get(name)
            if name in kinds:
                value = kinds[name]() if value is None else value
                if not isinstance(value, kinds[name]):
                    raise ValueError(f"a snapshot whose {name} is {type(value).__name__}")
            elif value is not None and not isinstance(value, (int, float)):
                raise ValueError(f"a snapshot whose {name} is {type(value).__name__}")
            values[name] = value
        values["tables"] = [(str(owner), str(kind), [str(c) for c in columns]) for owner, kind, columns
                            in values["tables"]]
        values["restarts"] = [tuple(r) for r in values["restarts"]]
        values["states"] = {k: tuple(v) for k, v in values["states"].items()}
        values["diverged"] = [tuple(d) for d in values["diverged"]]
        return cls(**values)


def read(folder) -> Snapshot | None:
    """The snapshot in ``folder``, or None where there is none this version reads (a damaged one is none)."""
    try:
        with open(os.path.join(os.fspath(folder), STATE), encoding="utf-8") as f:
            return Snapshot.from_json(f.read())
    except (OSError, ValueError, TypeError, KeyError):
        return None


def write(folder, snapshot: Snapshot, tables: Iterator[dict[str, np.ndarray]]) -> None:
    """Write ``snapshot`` and its tables' rows (``tables`` yields each table's arrays in the snapshot's order,
    one at a time: a big store is never copied whole) to ``folder``."""
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    try:  # first: arrays without their state are no snapshot (a crash in between leaves none)
        os.unlink(os.path.join(folder, STATE))
    except FileNotFoundError:
        pass
    for stale in os.listdir(folder):  # what a process that ended mid-write left
        if stale.startswith(".store.") and stale.endswith(".npz"):
            os.unlink(os.path.join(folder, stale))
    tmp = os.path.join(folder, f".store.{os.getpid()}.npz")
    try:
        with open_private(tmp, "wb") as out, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED, allowZip64=True) as npz:
            for i, arrays in enumerate(tables):
                give_way()  # a run's end: the window's thread first between two tables
                for name, array in arrays.items():
                    with npz.open(f"{i}.{name}.npy", "w", force_zip64=True) as member:
                        np.lib.format.write_array(member, array, allow_pickle=False)
        os.replace(tmp, os.path.join(folder, ARRAYS))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    write_atomically(os.path.join(folder, STATE), snapshot.to_json(), mode=0o600)


def table_arrays(folder, snapshot: Snapshot) -> Iterator[tuple[str, str, dict[str, np.ndarray]]]:
    """Each table of ``snapshot`` in ``folder``: (owner, kind, {"x", "t", column: values}), one at a time.
    ValueError when the arrays file lacks some (checked before the first is given)."""
    with np.load(os.path.join(os.fspath(folder), ARRAYS)) as npz:
        wanted = {f"{i}.{k}" for i, (_, _, columns) in enumerate(snapshot.tables)
                  for k in ("x", "t", *map(str, range(len(columns))))}
        if not wanted <= set(npz.files):
            raise ValueError(f"the snapshot in {folder} lacks {len(wanted - set(npz.files))} of its arrays")
        for i, (owner, kind, columns) in enumerate(snapshot.tables):
            arrays = {"x": npz[f"{i}.x"], "t": npz[f"{i}.t"]}
            arrays.update({column: npz[f"{i}.{j}"] for j, column in enumerate(columns)})
            yield owner, kind, arrays
