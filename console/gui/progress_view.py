"""Each task's row above the plots: its name, its progress, and a badge when something is wrong.

The progress is the epoch's with an ETA, what the task does after training, or a server's load; the badge is
what supervision says of it (stalled, failed, restarting), a diverged loss or a straggler.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QGridLayout, QLabel, QSizePolicy, QWidget

from agent.protocol import WAITING
from console.gui.elided import ElidedLabel
from console.states import Mark
from console.store.metrics import Marker, MetricsStore
from console.text import STATE_BADGES, after_training_text, alive_text, marker_text, state_text

ALARM_STYLE = "color: #b00020; font-weight: bold"  # a badge to look at
CALM_STYLE = "color: #555555"                      # one that says what was asked for (a stop)


class ProgressLine(QWidget):
    """An epoch progress bar with its text, repainted with the frame (QProgressBar repaints
    synchronously on every setValue: 1 ms each, 32 workers a third of a frame)."""

    def __init__(self, colour: QColor, parent=None):
        super().__init__(parent)
        self.colour = colour
        self._value = 0.0
        self._text = WAITING
        self.setMinimumHeight(18)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)

    def value(self) -> float:
        return self._value

    def text(self) -> str:
        return self._text

    def set_progress(self, value: float, text: str) -> None:
        if value != self._value or text != self._text:
            self._value, self._text = value, text
            self.update()

    def paintEvent(self, event):  # noqa: N802 (Qt's name)
        p = QPainter(self)
        r = self.rect().adjusted(0, 1, -1, -2)
        p.setPen(QColor("#999"))
        p.setBrush(QColor("#f4f4f4"))
        p.drawRect(r)
        filled = QColor(self.colour)
        filled.setAlpha(90)
        p.fillRect(r.adjusted(1, 1, -r.width() + int(r.width() * self._value), 0), filled)
        p.setPen(QColor("#222"))
        p.drawText(r, Qt.AlignCenter, self._text)
        p.end()


def eta_text(seconds: float | None) -> str:
    if seconds is None:
        return "ETA …"
    seconds = int(seconds)
    return f"ETA {seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"ETA {seconds // 60}:{seconds % 60:02d}"


class ProgressView(QWidget):
    """A row per task, in the order they are added: ``bars`` and ``badges`` by task name."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.grid = QGridLayout(self)
        self.grid.setContentsMargins(4, 4, 4, 4)
        self.grid.setColumnStretch(1, 1)  # the bars take the room; a badge what its words want, cut when long
        self.bars: dict[str, ProgressLine] = {}
        self.badges: dict[str, ElidedLabel] = {}  # per task: its supervision state, a diverged loss, or "straggler"
        self._names: dict[str, QLabel] = {}
        self.ended = False  # the run shown went as far as it goes: no ETA

    def rows(self) -> list[str]:
        return list(self.bars)

    def add_row(self, task: str, colour: QColor) -> None:
        if task in self.bars:
            return
        row = len(self.bars)
        name = QLabel(f"<b style='color:{colour.name()}'>■</b> {task}")
        bar = ProgressLine(colour)
        badge = ElidedLabel("")
        badge.setStyleSheet(ALARM_STYLE)
        self.grid.addWidget(name, row, 0)
        self.grid.addWidget(bar, row, 1)
        self.grid.addWidget(badge, row, 2)
        self.bars[task] = bar
        self.badges[task] = badge
        self._names[task] = name

    def empty(self) -> None:
        """Every row stays, emptied (a new run of the same tasks)."""
        for task in self.bars:
            self.bars[task].set_progress(0.0, "")
            self.badges[task].setText("")
            self.badges[task].setToolTip("")

    def clear(self) -> None:
        """No rows."""
        for widget in [*self._names.values(), *self.bars.values(), *self.badges.values()]:
            self.grid.removeWidget(widget)
            widget.deleteLater()
        self.bars.clear()
        self.badges.clear()
        self._names.clear()

    def freeze(self, word: str) -> None:
        """Every bar as it is, its ETA replaced by ``word`` (the window follows the run no more)."""
        for bar in self.bars.values():
            bar.set_progress(bar.value(), f"{bar.text().split('  ETA ')[0]}  {word}")

    def show_store(self, store: MetricsStore) -> None:
        """Each row as ``store`` has it now: progress with ETA (or what follows training, or a server's load),
        and its badge."""
        alive = store.alive_snapshot()
        states = store.states_snapshot()
        for task, bar in self.bars.items():
            prog = store.progress.get(task)
            calm = states.get(task, ("",))[0]
            if calm in Mark.CALM:  # a stop asked for: said at once, no ETA
                bar.set_progress(prog.fraction if prog is not None and prog.steps_per_epoch else 0.0,
                                 STATE_BADGES[calm] + (f" at epoch {prog.epoch + 1}/{prog.epochs}  step "
                                                       f"{prog.step + 1}/{prog.steps_per_epoch}"
                                                       if prog is not None and prog.steps_per_epoch else ""))
            elif task in alive and not (prog is not None and prog.steps_per_epoch):  # a server: no steps of its own
                bar.set_progress(0.0, alive_text(alive[task]))
            elif prog is not None and prog.steps_per_epoch:
                # Where it stopped, and no ETA of training that is not going on (failed, or the run is over).
                bar.set_progress(prog.fraction,
                                 f"epoch {prog.epoch + 1}/{prog.epochs}  step {prog.step + 1}/{prog.steps_per_epoch}"
                                 f"  {prog.fraction * 100:.0f}%  "
                                 + ("failed here" if calm == Mark.FAILED else after_training_text(prog.after)
                                    if prog.after else "ended here" if self.ended else eta_text(prog.eta())))
        slow = set(store.stragglers())
        diverged = {m.task: marker_text(m) for m in store.markers_snapshot() if m.kind == Marker.NAN}
        for task, label in self.badges.items():
            state, why = states.get(task, ("", ""))
            if state:
                words = STATE_BADGES[state] if state in Mark.CALM else state_text(state, why)
            elif task in diverged:
                words, why = "loss not finite", diverged[task]
            else:
                words = "straggler: step time well above the others'" if task in slow else ""
            if label.text() != words:
                label.setText(words)
                label.setToolTip(why or words)
                label.setStyleSheet(CALM_STYLE if state in Mark.CALM else ALARM_STYLE)
