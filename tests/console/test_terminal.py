"""A task's output as a terminal shows it: Keras's progress bar is one line that updates, colours and erase-line
are read, nothing shows as a glyph, and the pieces may be cut anywhere."""

from __future__ import annotations

import random

import pytest

from console.terminal import MAX_OPEN, Terminal, shown_lines


def keras_fit_output(epochs: int = 2, steps: int = 4) -> str:
    """What Keras 3's ``fit(verbose=1)`` writes where it draws for a terminal (its ``_dynamic_display``, true on
    any POSIX system): each update steps back over the bar with ``\\b``, returns with ``\\r`` and writes the
    bar again, in colour where the terminal has it."""
    out = []
    for epoch in range(1, epochs + 1):
        out.append(f"Epoch {epoch}/{epochs}\n")
        width = 0
        for step in range(1, steps + 1):
            done, left = "━" * (5 * step), "━" * (5 * (steps - step))
            bar = (f"\x1b[1m{step}/{steps}\x1b[0m \x1b[32m{done}\x1b[0m\x1b[37m{left}\x1b[0m \x1b[1m0s\x1b[0m "
                   f"10ms/step - accuracy: {0.1 * step:.4f} - loss: {2 / step:.4f}")
            out.append("\b" * width + "\r" + bar)
            width = len(bar)
        out.append("\n")
    return "".join(out)


def final_bar(step: int, steps: int = 4) -> str:
    return f"{step}/{steps} {'━' * 5 * steps} 0s 10ms/step - accuracy: {0.1 * step:.4f} - loss: {2 / step:.4f}"


def test_a_keras_progress_bar_is_one_line_per_epoch_in_its_last_state():
    assert shown_lines(keras_fit_output()) == ["Epoch 1/2", final_bar(4), "Epoch 2/2", final_bar(4)]


@pytest.mark.parametrize("seed", range(5))
def test_pieces_cut_anywhere_give_the_same_lines_and_the_open_line_is_the_bars_newest_state(seed):
    """A follow's message may end inside a line, a bar or an escape sequence."""
    text = keras_fit_output()
    pieces, at, rng = [], 0, random.Random(seed)
    while at < len(text):
        size = rng.randint(1, 40)
        pieces.append(text[at:at + size])
        at += size
    terminal, lines = Terminal(), []
    for piece in pieces:
        lines += terminal.feed(piece)
        assert not any(ord(c) < 32 for c in terminal.open + "".join(lines))  # no glyph of a control character
    assert lines == ["Epoch 1/2", final_bar(4), "Epoch 2/2", final_bar(4)] and terminal.open == ""

    terminal = Terminal()
    assert terminal.feed(keras_fit_output(epochs=1).rsplit("\n", 1)[0].rsplit("\b", 1)[0]) == ["Epoch 1/1"]
    assert terminal.open.startswith("4/4 ") or terminal.open.startswith("3/4 ")  # mid-redraw: the newest bar


def test_returns_backspaces_and_erase_line_act_as_in_a_terminal():
    assert shown_lines("progress 10%\rprogress 100%\n") == ["progress 100%"]
    assert shown_lines("abc\b\bX\n") == ["aXc"]
    assert shown_lines("downloading... 50%\r\x1b[Kdone\n") == ["done"]
    assert shown_lines("abc\x1b[2Kd\n") == ["   d"]  # the line erased, the cursor where it was
    assert shown_lines("abcdef\r\x1b[3Gx\n") == ["abxdef"]
    assert shown_lines("a\x1b[31mred\x1b[0m\tand\x07 a bell\r\n") == ["ared\tand a bell"]
    assert shown_lines("line one\r\nline two") == ["line one", "line two"]
    assert shown_lines("\x1b]0;training\x07\x1b(Bplain\x1b7 text\x9b\n") == ["plain text"]  # a title, a charset


def test_an_escape_sequence_cut_between_pieces_is_read_whole():
    terminal = Terminal()
    assert terminal.feed("ab\x1b") == [] and terminal.feed("[31mc\x1b]0;ti") == [] and terminal.feed("tle\x07d\n") == [
        "abcd"]


def test_a_line_that_never_ends_stays_bounded():
    terminal = Terminal()
    done = []
    for _ in range(100):
        done += terminal.feed("x" * 10_000)
    assert all(len(line) <= MAX_OPEN + 10_000 for line in done) and len(terminal.open) <= MAX_OPEN
    assert sum(map(len, done)) + len(terminal.open) == 1_000_000
    whole = Terminal()
    assert [len(line) for line in whole.feed("w" * (MAX_OPEN + 1) + "\n")] == [MAX_OPEN + 1]  # no empty line after
