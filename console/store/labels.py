"""What a person calls their runs: a name and notes per run id, in the console's state folder (Qt-free).

``<state>/labels.json`` holds ``{run_id: {"name": …, "notes": …}}``. A name and notes are the person's text
(data: cut to their length, control characters gone); a file that is missing or damaged reads as none, and
the next label written replaces it.
"""

from __future__ import annotations

import json
import logging
import threading

from console.errors import make_state_dir, state_dir
from console.files import write_atomically

log = logging.getLogger("console.store")

MAX_NAME = 80
MAX_NOTES = 2000
_lock = threading.Lock()  # one writer at a time in this console


def labels_path():
    return state_dir() / "labels.json"


def _clean(text, most: int) -> str:
    if not isinstance(text, str):
        return ""
    return "".join(c for c in text if c == "\n" or c >= " " and c != "\x7f")[:most].strip()


def read_labels() -> dict[str, dict[str, str]]:
    """Every run's name and notes ({} for none, or a damaged file)."""
    try:
        data = json.loads(labels_path().read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("the run labels in %s cannot be read (%s): none shown", labels_path(), exc)
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(run_id): {"name": _clean(v.get("name"), MAX_NAME), "notes": _clean(v.get("notes"), MAX_NOTES)}
            for run_id, v in data.items() if isinstance(v, dict)}


def label(run_id: str) -> dict[str, str]:
    return read_labels().get(run_id, {"name": "", "notes": ""})


def set_label(run_id: str, name: str | None = None, notes: str | None = None) -> dict[str, str]:
    """Give ``run_id`` a name and/or notes (None: as it is; "": none); what it has now. Blocking: a disk."""
    with _lock:
        labels = read_labels()
        now = labels.get(run_id, {"name": "", "notes": ""})
        if name is not None:
            now["name"] = _clean(name.replace("\n", " "), MAX_NAME)
        if notes is not None:
            now["notes"] = _clean(notes, MAX_NOTES)
        if now["name"] or now["notes"]:
            labels[run_id] = now
        else:
            labels.pop(run_id, None)
        make_state_dir()
        write_atomically(labels_path(), json.dumps(labels, indent=1, ensure_ascii=False), mode=0o600)
        return now


def forget(run_id: str) -> None:
    """A deleted run's label goes with it."""
    with _lock:
        labels = read_labels()
        if labels.pop(run_id, None) is not None:
            write_atomically(labels_path(), json.dumps(labels, indent=1, ensure_ascii=False), mode=0o600)
