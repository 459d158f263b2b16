"""The check's report: each host's versions, the problems with their fixes (Make ready above those it fixes), and
the reachability matrix."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSplitter, QTableWidget, QTextBrowser, QVBoxLayout, QWidget

from console.checks import MAKE_READY, Report, skew
from console.gui.cells import cell
from console.gui.jobs import ProvisionJob
from console.gui.provision_view import ProvisionView


def _gb(value) -> str:
    return f"{value / 1e9:.1f} GB" if isinstance(value, (int, float)) and value >= 0 else "?"


def _seconds(value) -> str:
    return f"{value:+.1f} s" if isinstance(value, (int, float)) else "?"


def host_marks(report: Report) -> dict[str, list[str]]:
    """What ``report`` says of each host it looked at: its problems, in words ([] when every check passed).

    A problem marks the hosts it names (a reach problem names both ends), never a host whose
    name merely starts the same way.
    """
    problems: dict[str, list[str]] = {}
    for p in report.problems:
        for name in dict.fromkeys(p.hosts):
            problems.setdefault(name, []).append(str(p))
    return {r.name: problems.get(r.name) or ([] if r.ok else [r.error or "failed"]) for r in report.hosts}


NO_CHECK = ("<h3>No check yet</h3><p><b>Run ▸ Check</b> (Ctrl+K) connects to each host of the Setup tab and "
            "says, per host, its Python, TensorFlow, tf-keras, GPUs, CPUs, free memory and disk, and its clock; "
            "whether the script and its files are there; and whether every host reaches every task's port.</p>"
            "<p>Each problem comes with its fix. <b>Deploy &amp; Start</b> (F5) checks the same before it "
            "starts.</p>")


class CheckView(QSplitter):
    """The *Check* tab: Make ready (``provision_view``, over ``provisioner``) and a report's details above its
    reachability matrix, or why there is nothing to check."""

    def __init__(self, provisioner: ProvisionJob, parent=None):
        super().__init__(Qt.Vertical, parent)
        self.provision_view = ProvisionView(provisioner)
        self.details = QTextBrowser()
        self.details.setHtml(NO_CHECK)
        upper = QWidget()
        upper_layout = QVBoxLayout(upper)
        upper_layout.setContentsMargins(0, 0, 0, 0)
        upper_layout.addWidget(self.provision_view)
        upper_layout.addWidget(self.details, 1)
        self.matrix = QTableWidget()
        self.matrix_note = QLabel("")  # which ports the matrix tried: the run's, or ones free now
        self.matrix_note.setWordWrap(True)
        lower = QWidget()
        lower_layout = QVBoxLayout(lower)
        lower_layout.setContentsMargins(0, 0, 0, 0)
        lower_layout.addWidget(self.matrix_note)
        lower_layout.addWidget(self.matrix, 1)
        self.addWidget(upper)
        self.addWidget(lower)
        lower.hide()  # no matrix before a check
        self._lower = lower

    def show_refusal(self, reason: str) -> None:
        """The settings cannot work (``cluster.validate`` said why): nothing was checked."""
        self.details.setHtml(f"<p style='color:#b00020'><b>The settings cannot work:</b> {html.escape(reason)}</p>")

    def show_report(self, report: Report) -> None:
        rows = []
        skews = skew({r.name: r.probe for r in report.hosts if r.probe})
        for r in report.hosts:
            p = r.probe or {}
            gpus = p.get("gpus") or []
            memory = p.get("memory") if isinstance(p.get("memory"), dict) else {}
            rows.append(
                f"<tr><td><b>{html.escape(r.name)}</b></td><td>{'ok' if r.ok else 'FAILED'}</td>"
                f"<td>{html.escape(str(p.get('python', '')))}</td><td>{html.escape(str(p.get('tensorflow') or '-'))}</td>"
                f"<td>{html.escape(str(p.get('tf_keras') or '-'))}</td><td>{len(gpus)}"
                f"{' (' + html.escape(str(gpus[0].get('name', ''))) + ')' if gpus else ''}</td>"
                f"<td>{html.escape(str(p.get('cpus', '')))}</td>"
                f"<td>{_gb(memory.get('available_bytes'))} of {_gb(memory.get('total_bytes'))}</td>"
                f"<td>{_gb(p.get('disk_free_bytes'))}</td><td>{_seconds(skews.get(r.name))}</td></tr>")
        files = "".join(f"<tr><td>{html.escape(f['what'].replace('_', ' '))}</td><td>{html.escape(f['path'])}</td>"
                        f"<td>{'ok' if f['ok'] else 'FAILED'}</td></tr>" for f in report.files)
        problems, warnings = ("".join(f"<li><b>{html.escape(p.where)}</b>: {html.escape(p.cause)}.<br><i>Fix:</i> "
                                      f"{html.escape(p.fix)}"
                                      + ("<br><b>Make ready</b> (above) fixes it." if p.remedy == MAKE_READY else "")
                                      + "</li>" for p in found)
                              for found in (report.problems, report.warnings))
        self.details.setHtml(
            f"<h3>{'Ready to start' if report.ready else 'Not ready'}</h3>"
            "<table cellpadding=4><tr><th>host</th><th>state</th><th>Python</th><th>TensorFlow</th>"
            "<th>tf-keras</th><th>GPUs</th><th>CPUs</th><th>memory free</th><th>disk free</th>"
            f"<th>clock vs this one</th></tr>{''.join(rows)}</table>"
            + (f"<h4>Workload files</h4><table cellpadding=4><tr><th>file</th><th>path</th><th>state</th></tr>"
               f"{files}</table>" if files else "")
            + (f"<p><b>Keras:</b> {html.escape(report.keras)}</p>" if report.keras else "")
            + (f"<h4>Problems</h4><ul>{problems}</ul>" if problems else "<p>Every check passed.</p>")
            + (f"<h4 style='color:#b00020'>Warnings</h4><ul>{warnings}</ul>" if warnings else ""))
        self._show_matrix(report)

    def _show_matrix(self, report: Report) -> None:
        """One row per host that connected, one column per task: ok, or why that host could not reach it. The
        ports are the run's own, or, for tasks whose port is "auto", ports free now (the note says so)."""
        columns = [t for t in report.tasks if t["address"]]
        picked = [t["name"] for t in columns if t.get("picked")]
        self._lower.setVisible(bool(columns))
        self.matrix_note.setText(
            "<b>Reachability</b>, on the ports the run will use." if not picked else
            f"<b>Reachability</b>: {', '.join(picked)} {'has' if len(picked) == 1 else 'have'} the port \"auto\": "
            "the check tried ports free now (marked auto); the run picks its own free ports at its start.")
        sources = list(report.matrix)
        self.matrix.clear()
        self.matrix.setRowCount(len(sources))
        self.matrix.setColumnCount(len(columns))
        self.matrix.setHorizontalHeaderLabels([f"{t['name']}\n{t['address']}{' (auto)' if t.get('picked') else ''}"
                                               for t in columns])
        self.matrix.setVerticalHeaderLabels([f"from {s}" for s in sources])
        for i, source in enumerate(sources):
            for j, t in enumerate(columns):
                result = report.matrix[source].get(t["address"])
                if result is None:
                    item = cell("—", "the task's own host")
                else:
                    item = cell("ok" if result["ok"] else result["error"])
                    if not result["ok"]:
                        item.setForeground(Qt.red)
                        problem = next((p for p in report.problems if p.task == t["name"] and p.hosts[:1] == (source,)),
                                       None)
                        if problem is not None:
                            item.setToolTip(str(problem))
                self.matrix.setItem(i, j, item)
        self.matrix.resizeColumnsToContents()
