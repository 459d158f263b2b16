"""Help: where tfcc's guide is, and what tfcc runs on (the About box)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QMessageBox, QWidget

DOCS = Path(__file__).resolve().parents[2] / "README.md"  # the guide; docs/ holds the rest


def versions() -> dict[str, str]:
    """tfcc's version and those of what it runs on (read from the installed packages: nothing imported)."""
    import platform
    from importlib import metadata

    from PySide6 import __version__ as pyside

    out = {"Python": platform.python_version(), "PySide6": pyside}  # what runs (its wheel: PySide6-Essentials)
    for package in ("tfcc", "pyqtgraph", "paramiko", "tensorflow", "tf-keras", "keras"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "not installed"
    return out


def about_text() -> str:
    found = versions()
    rows = "".join(f"<tr><td>{name}</td><td>{version}</td></tr>" for name, version in found.items())
    return (f"<b>tfcc {found['tfcc']}</b>: a desktop console for TensorFlow multi-worker training."
            f"<p>Its guide: {DOCS}</p><table>{rows}</table>")


def open_guide(parent: QWidget) -> QMessageBox | None:
    """The guide in the desktop's viewer (None); with none, a box that says where it is (a dialog that waits for
    nothing), which is returned."""
    if QDesktopServices.openUrl(QUrl.fromLocalFile(str(DOCS))):
        return None
    box = QMessageBox(QMessageBox.Information, "tfcc's guide",
                      f"No browser or viewer opened the guide. It is the file\n{DOCS}\nand the "
                      f"folder {DOCS.parent / 'docs'} beside it (plain Markdown: any editor reads "
                      "them).", QMessageBox.Ok, parent)
    box.setTextInteractionFlags(Qt.TextSelectableByMouse)
    box.setAttribute(Qt.WA_DeleteOnClose)
    box.open()
    return box
