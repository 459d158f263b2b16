"""The window's remembered profiles: recent cluster files and the last one opened (Qt-free).

Kept as JSON in the console's state folder (``$TFCC_CONSOLE_HOME`` or the
platform's state dir), written atomically and only when it changed.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from console.errors import make_state_dir, state_dir
from console.files import write_atomically

log = logging.getLogger("console.profiles")
MAX_RECENT = 8
MAX_SCREENS = 8  # window sizes remembered, one per screen size (the newest kept)


class Profiles:
    def __init__(self, path: Path | None = None):
        self.path = path or state_dir() / "profiles.json"
        self.recent: list[str] = []
        self.last: str | None = None
        self.view: dict = {}  # the dashboard's reading aids (Dashboard.view()), as the person left them
        self.windows: dict[str, list[int]] = {}  # per screen size ("1440x900"): the window's size left there
        try:
            data = json.loads(self.path.read_text())
            if not isinstance(data, dict):
                raise ValueError(f"it holds a {type(data).__name__}, not an object")
            recent = data.get("recent")
            self.recent = [p for p in recent if isinstance(p, str)] if isinstance(recent, list) else []
            self.last = data.get("last") if isinstance(data.get("last"), str) else None
            self.view = data.get("view") if isinstance(data.get("view"), dict) else {}
            windows = data.get("windows") if isinstance(data.get("windows"), dict) else {}
            self.windows = {k: v for k, v in windows.items() if isinstance(k, str) and isinstance(v, list)
                            and len(v) == 2 and all(type(n) is int and 200 <= n <= 20000 for n in v)}
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable %s: %s", self.path, exc)

    def opened(self, path: str | Path) -> None:
        """``path`` was opened or saved: first in the recent list, and the one to reopen."""
        path = str(Path(path).resolve())
        recent = [path] + [p for p in self.recent if p != path]
        recent = recent[:MAX_RECENT]
        if recent != self.recent or self.last != path:
            self.recent, self.last = recent, path
            self._save()

    def forget(self, path: str | Path) -> None:
        path = str(Path(path).resolve())
        if path in self.recent or self.last == path:
            self.recent = [p for p in self.recent if p != path]
            self.last = None if self.last == path else self.last
            self._save()

    def set_view(self, view: dict) -> None:
        """Remember the dashboard's reading aids (saved only when they changed)."""
        if view != self.view:
            self.view = dict(view)
            self._save()

    def window_size(self, screen: str) -> tuple[int, int] | None:
        """The window's size as the person left it on a screen of size ``screen`` (None: never there)."""
        size = self.windows.get(screen)
        return (size[0], size[1]) if size else None

    def set_window_size(self, screen: str, size: tuple[int, int]) -> None:
        """Remember the window's ``size`` for screens of size ``screen`` (saved only when it changed)."""
        size = [int(size[0]), int(size[1])]
        if self.windows.get(screen) != size:
            self.windows.pop(screen, None)
            self.windows[screen] = size
            while len(self.windows) > MAX_SCREENS:
                self.windows.pop(next(iter(self.windows)))
            self._save()

    def _save(self) -> None:
        if self.path.parent == state_dir():
            make_state_dir()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, json.dumps({"recent": self.recent, "last": self.last, "view": self.view,
                                                "windows": self.windows}, indent=1), mode=0o600)
