"""The bars over the Dashboard's plots: the reading aids (smoothing, log y, x, Fit, All plots), the runs compared."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QCheckBox, QComboBox, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QSlider,
                               QToolButton, QWidget)

from console.store.metric_ids import X_AXES

X_AXIS_NAMES = {"step": "global step", "time": "wall-clock time", "relative": "seconds since the run began"}


class ViewControls(QWidget):
    """The reading aids' bar; the Dashboard acts on its widgets' own signals."""

    def __init__(self, parent=None):
        super().__init__(parent)
        controls = QHBoxLayout(self)
        controls.setContentsMargins(4, 0, 4, 0)
        controls.addWidget(QLabel("Smoothing"))
        self.smoothing_slider = QSlider(Qt.Horizontal)
        self.smoothing_slider.setRange(0, 99)
        self.smoothing_slider.setMinimumWidth(80)  # a slider, never a nub that reads as a box
        self.smoothing_slider.setMaximumWidth(140)
        self.smoothing_slider.setToolTip("A time-weighted moving average of the training curves (0: none); "
                                         "the raw curve stays faint behind it")
        self.smoothing_label = QLabel("0.00")
        controls.addWidget(self.smoothing_slider)
        controls.addWidget(self.smoothing_label)
        self.log_box = QCheckBox("log y")
        self.log_box.setToolTip("A logarithmic y axis for the training plots (values ≤ 0 are gaps)")
        controls.addWidget(self.log_box)
        controls.addWidget(QLabel("x:"))
        self.x_box = QComboBox()
        self.x_box.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.x_box.setMinimumContentsLength(12)  # the longest name is cut in the box, whole in its list
        for axis in X_AXES:
            self.x_box.addItem(X_AXIS_NAMES[axis], axis)
        controls.addWidget(self.x_box)
        self.fit_button = QPushButton("Fit")
        self.fit_button.setToolTip("Every plot around its data again, as a finished run is shown (after a zoom "
                                   "or pan by hand)")
        controls.addWidget(self.fit_button)
        self.all_button = QPushButton("All plots")
        self.all_button.setToolTip("Show every plot again (a double-click on a plot shows it alone)")
        self.all_button.hide()
        controls.addWidget(self.all_button)
        controls.addStretch(1)


class CompareChips(QWidget):
    """The runs compared with the one shown, on a line of their own: a chip each, in its colour, with × to take it
    away. The line never widens the window (chips past its width are cut; the Series list has them all)."""

    chip_clicked = Signal(str)  # the person clicked a chip (to compare its run no more): its run id

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        chip_line = QHBoxLayout(self)
        chip_line.setContentsMargins(4, 0, 4, 0)
        chip_line.addWidget(QLabel("Compared:"))
        self.chips = QHBoxLayout()
        chip_line.addLayout(self.chips)
        chip_line.addStretch(1)
        self.hide()

    def show_runs(self, runs: list[tuple[str, str, QColor]]) -> None:
        """A chip for each compared run: (its id, its name, its colour); none: the line is hidden."""
        while self.chips.count():
            widget = self.chips.takeAt(0).widget()
            if widget is not None:
                widget.deleteLater()
        for run_id, name, colour in runs:
            chip = QToolButton()
            chip.setText(f"┅ {name}  ✕")
            chip.setToolTip(f"Run {run_id} is drawn dashed in this colour; click to compare it no more")
            chip.setStyleSheet(f"QToolButton {{ color: {colour.name()}; font-weight: bold; "
                               "border: 1px solid #bbb; border-radius: 9px; padding: 1px 8px }")
            chip.clicked.connect(lambda *_, run_id=run_id: self.chip_clicked.emit(run_id))
            self.chips.addWidget(chip)
        self.setVisible(bool(runs))

    def texts(self) -> list[str]:
        """What the chips say, in order."""
        return [self.chips.itemAt(i).widget().text() for i in range(self.chips.count())
                if self.chips.itemAt(i).widget() is not None]
