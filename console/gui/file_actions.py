"""The file actions: the cluster file's New, Open, Save, unsaved changes, and the exports.

New, Open, Open Recent, Save and Save As of the cluster file; CSV and PNG exports of a run; the cluster's
export to launch scripts, Slurm or Kubeflow."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMenu, QMessageBox, QWidget

from console import cluster as cl
from console import export
from console.gui.dashboard import Dashboard
from console.gui.export_dialog import ExportDialog
from console.gui.jobs import Threads
from console.profiles import Profiles


class FileActions(QObject):
    """The cluster file behind ``window``, its recent files in ``profiles``, and the dashboard's exports.

    ``current`` gives the cluster as edited now (what Save writes). The menu's actions are
    its own (``act_*``, ``recent_menu``); the window places them.
    """

    opened = Signal(object, object)  # a cluster to show, and its file (None: a new one, not saved yet)
    title_changed = Signal(str)      # the window's title: the file's name, and * while it has unsaved changes
    reported = Signal(str)           # what happened, in words
    exported = Signal(str)           # an export finished (from a thread): what happened, in words

    def __init__(self, window: QWidget, profiles: Profiles, threads: Threads, dashboard: Dashboard,
                 current: Callable[[], cl.Cluster]):
        super().__init__(window)
        self.window, self.profiles, self.threads, self.dashboard, self.current = (
            window, profiles, threads, dashboard, current)
        self.path: Path | None = None
        self.dirty = False
        self.error_box: QMessageBox | None = None
        self.act_new = QAction("&New", self, shortcut=QKeySequence.New, triggered=self._on_new_triggered)
        self.act_open = QAction("&Open…", self, shortcut=QKeySequence.Open, triggered=self._on_open_triggered)
        self.recent_menu = QMenu("Open &Recent", window)
        self.act_save = QAction("&Save", self, shortcut=QKeySequence.Save, triggered=self._on_save_triggered)
        self.act_save_as = QAction("Save &As…", self, shortcut=QKeySequence.SaveAs,
                                   triggered=self._on_save_as_triggered)
        self.act_export_csv = QAction("Export metrics as &CSV…", self, triggered=self._on_export_csv_triggered)
        self.act_export_png = QAction("Export plots as &PNG…", self, triggered=self._on_export_png_triggered)
        self.act_export_cluster = QAction("Export cluster &as… (scripts, Slurm, Kubeflow)", self,
                                          triggered=self._on_export_cluster_triggered)
        self.export_dialog: ExportDialog | None = None
        self.exported.connect(self.reported)
        self._fill_recent()

    def add_to(self, menu: QMenu) -> None:
        """Place the actions in ``menu``: New, Open, Open Recent, Save, Save As; the exports (offered when the menu
        opens only with something to export)."""
        menu.addActions([self.act_new, self.act_open])
        menu.addMenu(self.recent_menu)
        menu.addActions([self.act_save, self.act_save_as])
        menu.addSeparator()
        menu.addActions([self.act_export_csv, self.act_export_png, self.act_export_cluster])
        menu.aboutToShow.connect(self._on_menu_about_to_show)

    def _on_menu_about_to_show(self) -> None:
        """Exports of metrics and plots only with something to export."""
        has_metrics = bool(self.dashboard.store.metrics())
        self.act_export_csv.setEnabled(has_metrics)
        self.act_export_png.setEnabled(has_metrics)

    # ------------------------------------------------------------ the cluster file

    def set_path(self, path: Path | None) -> None:
        """The cluster shown now is the one in ``path`` (None: not saved yet), as it is there."""
        self.path = path
        self.set_dirty(False)

    def set_dirty(self, dirty: bool) -> None:
        self.dirty = dirty
        name = self.path.name if self.path else "untitled (embedded default)"
        self.title_changed.emit(f"tfcc — {name}{' *' if dirty else ''}")

    def maybe_discard(self) -> bool:
        """True when there are no unsaved changes, or the person chose to discard them."""
        if not self.dirty:
            return True
        answer = QMessageBox.question(self.window, "Unsaved changes", "Save the changes to this cluster first?",
                                      QMessageBox.Save | QMessageBox.Discard | QMessageBox.Cancel)
        if answer == QMessageBox.Save:
            self._on_save_triggered()
            return not self.dirty  # saved (a Save As someone cancelled keeps the window open)
        return answer == QMessageBox.Discard

    def open(self, path) -> bool:
        """Read ``path`` and send it out as ``opened``; False (and why, in words) when it cannot be read."""
        path = Path(path)
        try:
            cluster = cl.load(path)
        except cl.ClusterFileError as exc:
            self.reported.emit(f"Cannot open {path}: {exc}")
            self.profiles.forget(path)
            self._fill_recent()
            if self.window.isVisible():
                box = QMessageBox(QMessageBox.Warning, "Cannot open the cluster file", str(exc), QMessageBox.Ok,
                                  self.window)
                box.setAttribute(Qt.WA_DeleteOnClose)
                box.open()  # not exec(): nothing waits on it
                self.error_box = box
            return False
        self.profiles.opened(path)
        self._fill_recent()
        self.opened.emit(cluster, path)
        return True

    def save(self, path) -> None:
        path = Path(path)
        cl.save(self.current(), path)
        self.profiles.opened(path)
        self._fill_recent()
        self.set_path(path)
        self.reported.emit(f"Saved {path}")

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        for p in self.profiles.recent:
            self.recent_menu.addAction(p, lambda p=p: self.maybe_discard() and self.open(p))
        self.recent_menu.setEnabled(bool(self.profiles.recent))

    def _on_new_triggered(self) -> None:
        if self.maybe_discard():
            self.opened.emit(cl.Cluster([], []), None)

    def _on_open_triggered(self) -> None:
        if not self.maybe_discard():
            return
        path, _ = QFileDialog.getOpenFileName(self.window, "Open cluster", str(Path.cwd()), "Cluster files (*.toml)")
        if path:
            self.open(path)

    def _on_save_triggered(self) -> None:
        if self.path is None:
            self._on_save_as_triggered()
        else:
            self.save(self.path)

    def _on_save_as_triggered(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.window, "Save cluster as", str(Path.cwd() / "cluster.toml"),
                                              "Cluster files (*.toml)")
        if path:
            self.save(path)

    # ------------------------------------------------------------ exports

    def export_csv(self, path) -> None:
        """Write the metrics on a thread (a long run is hundreds of thousands of rows)."""
        store = self.dashboard.store
        self.reported.emit(f"Writing {path}…")

        def write():
            try:
                rows = store.write_csv(path)
                self.exported.emit(f"Wrote {rows} rows to {path}")
            except OSError as exc:
                self.exported.emit(f"Could not write {path}: {exc.strerror}; choose another place")

        self.threads.start("export", write)

    def open_export_dialog(self) -> ExportDialog:
        """The cluster's export dialog, opened (not run: the UI goes on); written on a thread when accepted."""
        dialog = ExportDialog(self.current(), Path.cwd() / "tfcc-export", self.window)
        dialog.accepted.connect(lambda: self.export_cluster(*dialog.chosen()))
        dialog.open()
        self.export_dialog = dialog
        return dialog

    def export_cluster(self, files: export.Export, folder: Path, force: bool) -> None:
        """Write an export's files into ``folder`` on a thread; ``exported`` says how it went."""
        self.reported.emit(f"Exporting the cluster to {folder}…")

        def write():
            try:
                written = export.write(files, folder, force)
                self.exported.emit(f"Wrote {len(written)} files to {folder}" +
                                   "".join(f"; {note}" for note in files.notes))
            except export.FolderNotEmpty as exc:
                self.exported.emit(f"Nothing exported: {exc.cause}; choose a new or empty folder, or tick "
                                   "\"replace what the folder holds\"")
            except export.ExportError as exc:
                self.exported.emit(f"Nothing exported: {exc}")
            except OSError as exc:
                self.exported.emit(f"Could not write into {folder}: {exc.strerror}; choose another folder")

        self.threads.start("export", write)

    def _on_export_cluster_triggered(self) -> None:
        self.open_export_dialog()

    def _on_export_csv_triggered(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.window, "Export metrics", str(Path.cwd() / "metrics.csv"),
                                              "CSV (*.csv)")
        if path:
            self.export_csv(path)

    def _on_export_png_triggered(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.window, "Export plots", str(Path.cwd() / "plots.png"),
                                              "PNG (*.png)")
        if path:
            self.export_png(path)

    def export_png(self, path) -> None:
        """The Dashboard's picture (made here: widgets are the UI thread's), saved on a thread."""
        image = self.dashboard.picture()

        def write():
            if image.save(str(path), "PNG"):
                self.exported.emit(f"Wrote {path}")
            else:
                self.exported.emit(f"Could not write {path}; choose another place")

        self.threads.start("export", write)
