"""The host keys a connection asks the person to trust: a dialog per question, closed when it expires unanswered."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QWidget

from console.gui.dialogs import FingerprintDialog
from console.gui.jobs import HostKeyAsker


class HostKeyDialogs(QObject):
    """Opens a FingerprintDialog for each question ``asker`` asks, and answers that question with it, and no other."""

    reported = Signal(str)  # a line for the status bar

    def __init__(self, asker: HostKeyAsker, window: QWidget):
        super().__init__(window)
        self.asker, self.window = asker, window
        self.dialog: FingerprintDialog | None = None  # the newest
        self.dialogs: dict[int, FingerprintDialog] = {}  # each question's dialog, until answered
        asker.asked.connect(self._on_asker_asked)
        asker.expired.connect(self._on_asker_expired)

    def _on_asker_asked(self, number: int, host: str, key_type: str, fingerprint: str) -> None:
        """A host key to trust or not: its dialog answers that question, and no other."""
        dialog = FingerprintDialog(host, key_type, fingerprint, self.window)
        dialog.finished.connect(lambda result: self.asker.answer(number, result == FingerprintDialog.Accepted))
        self.dialogs[number] = self.dialog = dialog
        dialog.finished.connect(lambda _: self.dialogs.pop(number, None))
        dialog.open()

    def _on_asker_expired(self, number: int) -> None:
        """Nobody answered in time (a no): the dialog goes, so that no later click answers another question."""
        dialog = self.dialogs.pop(number, None)
        if dialog is not None:
            dialog.reject()
            self.reported.emit(f"The host key of {dialog.host} was not trusted: nobody answered in time")
