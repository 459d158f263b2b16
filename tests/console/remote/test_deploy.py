"""Content-addressed deployment: nothing sent twice, nothing half-visible."""

from pathlib import Path

import pytest

from console import PROJECT_ROOT
from console.remote.deploy import deploy, make_bundle
from console.remote.local import LocalFiles


def test_same_code_uploads_nothing_the_second_time(tmp_path):
    bundle = make_bundle()
    target, sent = deploy(bundle, LocalFiles(), str(tmp_path))
    assert sent == bundle.size > 0
    assert (Path(target) / "agent" / "server.py").read_bytes() == (PROJECT_ROOT / "agent" / "server.py").read_bytes()
    assert deploy(bundle, LocalFiles(), str(tmp_path)) == (target, 0)


def test_changed_code_goes_to_a_new_folder(tmp_path):
    extra = tmp_path / "model.py"
    extra.write_text("A = 1\n")
    first = make_bundle({"user/model.py": extra})
    extra.write_text("A = 2\n")
    second = make_bundle({"user/model.py": extra})
    assert first.name != second.name


class FailingFiles(LocalFiles):
    def __init__(self, after: int):
        self.left = after

    def put(self, local, remote):
        if self.left == 0:
            raise OSError("connection lost")
        self.left -= 1
        super().put(local, remote)


def test_interrupted_upload_never_becomes_visible(tmp_path):
    bundle = make_bundle()
    with pytest.raises(OSError, match="connection lost"):
        deploy(bundle, FailingFiles(after=3), str(tmp_path))
    assert list((tmp_path / "dist").iterdir()) == []  # no target, no temporary folder left
    target, sent = deploy(bundle, LocalFiles(), str(tmp_path))  # the next try starts clean
    assert sent == bundle.size and (Path(target) / ".complete").exists()
