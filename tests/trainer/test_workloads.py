"""Workloads: a user's model file is named as the user knows it, in errors and tracebacks."""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest

from trainer.tf_config import ConfigError
from trainer.workloads import ORIGIN_VARIABLE, check_model_file, from_file

BROKEN = '''import tensorflow as tf


def build_model():
    return None


def train_dataset():
    return load_my_data()  # the user's bug: line 9


def load_my_data():
    raise FileNotFoundError("/data/digits.npz")
'''


@pytest.fixture
def deployed(tmp_path, monkeypatch):
    """The model file as tfcc deploys it (a copy under dist/<hash>/user/), and the user's own path."""
    copy = tmp_path / "dist" / "0123abcd" / "user" / "my_model.py"
    copy.parent.mkdir(parents=True)
    copy.write_text(BROKEN)
    monkeypatch.setenv(ORIGIN_VARIABLE, "/home/ada/project/my_model.py")
    return copy


def test_a_failing_model_file_is_named_as_the_user_knows_it(deployed):
    with pytest.raises(ConfigError) as err:
        from_file(deployed)
    assert str(err.value) == ("model file '/home/ada/project/my_model.py': loading it or calling train_dataset() "
                              "failed with FileNotFoundError: /data/digits.npz; fix the file or the data it reads")
    frames = traceback.format_exception(err.value.__cause__)
    text = "".join(frames)
    assert 'File "/home/ada/project/my_model.py", line 9, in train_dataset' in text
    assert "return load_my_data()  # the user's bug: line 9" in text  # the line itself is shown
    assert str(deployed) not in text  # the copy is tfcc's business


def test_the_pre_check_names_the_users_file_too(deployed):
    deployed.write_text("def build_model():\n    return None\n")
    with pytest.raises(ConfigError, match="^model file '/home/ada/project/my_model.py' does not define train_dataset"):
        check_model_file(deployed)


def test_the_digits_are_scikit_learns_read_without_importing_it():
    """A digits worker reads scikit-learn's data file itself (importing scikit-learn cost each a second of CPU):
    the same table as ``load_digits``, in a process where scikit-learn stays unimported."""
    import json
    import subprocess
    import sys

    import numpy as np
    from sklearn.datasets import load_digits

    from trainer.workloads import digits_table

    data = load_digits()
    assert np.array_equal(digits_table(), np.column_stack([data.data, data.target]))
    code = ("import json, sys; from trainer.workloads import digits_arrays; x, y, vx, vy = digits_arrays(); "
            "print(json.dumps([x.shape, vx.shape, str(x.dtype), 'sklearn' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert json.loads(done.stdout) == [[1438, 8, 8, 1], [359, 8, 8, 1], "float32", False]
