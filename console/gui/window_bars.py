"""The main window's menus (File, Run, View, Help), its toolbar and the status bar's progress, with their actions."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QProgressBar, QStyle, QTabWidget

from console.gui.file_actions import FileActions


class WindowBars:
    """The bars of ``window``: File holds the file actions' own; View has a shortcut per tab of ``tabs``. The window
    wires what the other actions do."""

    def __init__(self, window: QMainWindow, files: FileActions, tabs: QTabWidget):
        menu = self.file_menu = window.menuBar().addMenu("&File")
        files.add_to(menu)
        menu.addSeparator()
        self.quit = QAction("&Quit", window, shortcut=QKeySequence.Quit)
        menu.addAction(self.quit)
        icon = window.style().standardIcon
        self.check = QAction(icon(QStyle.SP_DialogApplyButton), "Check", window, shortcut="Ctrl+K")
        self.check.setToolTip("Check every host: SSH, Python, TensorFlow, GPUs, ports free and reachable (Ctrl+K)")
        self.start = QAction(icon(QStyle.SP_MediaPlay), "Deploy && Start", window, shortcut="F5")
        self.start.setToolTip("Upload what is missing, start every task and follow them (F5)")
        self.stop = QAction(icon(QStyle.SP_MediaStop), "Stop", window, shortcut="Shift+F5")
        self.resume = QAction(icon(QStyle.SP_MediaSeekForward), "Resume", window, shortcut="Ctrl+R")
        self.resume.setToolTip("Start every task of the run again from the newest backup they all have, "
                               "as a new attempt (Ctrl+R)")
        self.detach = QAction(icon(QStyle.SP_DialogCloseButton), "Detach", window)
        self.detach.setToolTip("Stop following the run; it goes on, and reappears when this profile is opened")
        run_actions = [self.check, self.start, self.stop, self.resume, self.detach]
        window.menuBar().addMenu("&Run").addActions(run_actions)
        view = window.menuBar().addMenu("&View")
        self.setup = QAction("&Setup panel", window, shortcut="Ctrl+0", checkable=True, checked=True)
        self.setup.setToolTip("The hosts, tasks and training settings beside the tabs (Ctrl+0); a run shown "
                              "folds them away for its plots")
        self.side = QAction("&Events, logs and Why slow?", window, shortcut="Ctrl+L", checkable=True, checked=True)
        self.side.setToolTip("The panel beside the plots (Ctrl+L); folded, the plots take its room")
        view.addActions([self.setup, self.side])
        view.addSeparator()
        self.view_actions = []
        for i in range(tabs.count()):
            action = QAction(tabs.tabText(i), window, shortcut=f"Ctrl+{i + 1}")
            action.triggered.connect(lambda _=False, i=i: tabs.setCurrentIndex(i))
            view.addAction(action)
            self.view_actions.append(action)
        help_menu = window.menuBar().addMenu("&Help")
        self.docs = QAction("&Documentation", window, shortcut=QKeySequence.HelpContents)
        self.about = QAction("&About tfcc", window)
        help_menu.addActions([self.docs, self.about])
        bar = window.addToolBar("Actions")
        bar.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        bar.addAction(self.setup)
        bar.addSeparator()
        bar.addActions(run_actions)
        self.progress = QProgressBar(maximumWidth=260)
        self.progress.hide()
        window.statusBar().addPermanentWidget(self.progress)
