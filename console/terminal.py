"""Text a program wrote for a terminal, as a terminal shows it.

Keras's ``fit(verbose=1)`` draws its progress bar for a terminal: it steps back over the bar (``\\b``) or
returns to the line's start (``\\r``) and writes the bar again, many times a second; libraries colour their
lines with ANSI escape sequences. Shown as written, a log is box glyphs, escape codes and four or five lines a
step. ``Terminal`` reads a stream in the pieces it comes in (a line, an escape sequence may be cut anywhere) and
gives the lines as a terminal would leave them: what ``\\r`` and ``\\b`` went back over is overwritten, an
erase-line erases, colours and cursor moves are read and dropped, other control characters are not shown. The
line being written (a progress bar that has not ended) is ``open``: a view shows it and replaces it as it
changes.
"""

from __future__ import annotations

import re

MAX_OPEN = 64 * 1024  # characters of a line without an end kept open; beyond, it is given as a line of its own

# One token: a line end, a return, a backspace, an escape sequence (CSI ``ESC [ ... final``, an OSC string such as a
# window title, ``ESC`` with intermediates and a final, a lone ``ESC``), or a run of other control characters, C1's
# too (not shown). The text between tokens is written as it is.
_TOKENS = re.compile(r"\r\n|\n|\r|\x08|\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[ -/]*[0-~]|\x1b"
                     r"|[\x00-\x07\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9f]+")
# Anything but plain text and line ends (most pieces have none: they are split at their line ends at once).
_SPECIAL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# An escape sequence cut at the piece's end: kept for the next piece.
_CUT = re.compile(r"\x1b(\[[0-?]*[ -/]*|\][^\x07\x1b]*|[ -/]*)\Z")
MAX_HELD = 4096  # characters of a cut escape sequence kept; a longer one is no sequence: its text is shown


class Terminal:
    """One stream's text as a terminal shows it (see the module's words). Not thread-safe: one reader feeds it."""

    def __init__(self):
        self._line = ""   # the line being written
        self._col = 0     # where the next character goes in it
        self._held = ""   # the start of an escape sequence cut at the last piece's end
        self._cut = False  # the open line was given in parts (too long): its own line end adds no empty line

    @property
    def open(self) -> str:
        """The line being written, as it stands ("" when none)."""
        return self._line

    def feed(self, text: str) -> list[str]:
        """The lines that ``text`` ended (a progress bar's last state, not each of its redraws)."""
        text = self._held + text
        self._held = ""
        cut = _CUT.search(text)
        if cut and len(text) - cut.start() <= MAX_HELD:
            self._held, text = text[cut.start():], text[:cut.start()]
        done: list[str] = []
        if not _SPECIAL.search(text):
            parts = text.split("\n")
            self._write(parts[0], done)
            if len(parts) > 1:
                self._end_line(done)
                done.extend(parts[1:-1])
                self._write(parts[-1], done)
            return done
        at = 0
        for token in _TOKENS.finditer(text):
            if token.start() > at:
                self._write(text[at:token.start()], done)
            at = token.end()
            self._control(token.group(), done)
        if at < len(text):
            self._write(text[at:], done)
        return done

    def _write(self, words: str, done: list[str]) -> None:
        line, col = self._line, self._col
        if col > len(line):
            line += " " * (col - len(line))
        self._line = line[:col] + words + line[col + len(words):]
        self._col = col + len(words)
        if words:
            self._cut = False
        if len(self._line) > MAX_OPEN:  # a stream that never ends its line: bounded, given in parts
            done.append(self._line)
            self._line, self._col, self._cut = "", 0, True

    def _end_line(self, done: list[str]) -> None:
        if not (self._cut and not self._line):  # the end of a line given in parts already
            done.append(self._line)
        self._line, self._col, self._cut = "", 0, False

    def _control(self, token: str, done: list[str]) -> None:
        if token in ("\n", "\r\n"):
            self._end_line(done)
        elif token == "\r":
            self._col = 0
        elif token == "\x08":
            self._col = max(0, self._col - 1)
        elif token.startswith("\x1b["):
            final, params = token[-1], token[2:-1]
            if final == "K":  # erase in line: to its end (0), to the cursor (1), all of it (2)
                if params in ("", "0"):
                    self._line = self._line[:self._col]
                elif params == "1":
                    self._line = " " * min(self._col, len(self._line)) + self._line[self._col:]
                elif params == "2":
                    self._line = ""
            elif final == "G" and (params.isdigit() or not params):  # to a column (1-based)
                self._col = min(max(0, int(params or 1) - 1), MAX_OPEN)
            # colours (m) and every other move: read and dropped
        # other control characters: not shown


def shown_lines(text: str) -> list[str]:
    """``text`` whole (a log read from its file): its lines as a terminal leaves them, an open one last."""
    terminal = Terminal()
    done = terminal.feed(text)
    return done + [terminal.open] if terminal.open else done
