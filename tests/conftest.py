"""Test-wide settings: no display, tf-keras, quiet TensorFlow, no real home directory; no test hangs the suite."""

import faulthandler
import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before any test imports TensorFlow
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
for _name in [n for n in os.environ if n.startswith("SLURM_")]:  # the suite run inside a Slurm job: the
    del os.environ[_name]  # trainer would build its TF_CONFIG from the job's variables (trainer/slurm.py)

# pytest-timeout's "thread" method needs the GIL to end a test: a hang that holds it (a Qt call
# that waits on a thread that waits for the GIL) once kept a CI run going until CI's own limit.
# faulthandler's watchdog is a C thread: past this much more than the test's timeout it prints
# every thread's stack on the terminal and ends the run.
HARD_STOP_MARGIN = float(os.environ.get("TFCC_TEST_HARD_STOP_MARGIN", "30"))
_terminal_fd: int | None = None


def pytest_sessionstart(session):
    global _terminal_fd
    writer = session.config.get_terminal_writer()
    try:
        _terminal_fd = os.dup(writer._file.fileno())  # the real terminal: a test's own output is captured
    except (AttributeError, OSError, ValueError):
        _terminal_fd = None


def _timeout(item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    return float(item.config.getini("timeout") or 0)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    limit = _timeout(item)
    if limit > 0 and _terminal_fd is not None:
        faulthandler.dump_traceback_later(limit + HARD_STOP_MARGIN, exit=True, file=_terminal_fd)
    try:
        return (yield)
    finally:
        if limit > 0 and _terminal_fd is not None:
            faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """A real Slurm cluster: two test hosts that are its nodes (the first also its login host), slurmctld here,
    munge (tests.helpers.slurmcluster)."""
    from tests.helpers.slurmcluster import SlurmCluster, missing_requirements as slurm_missing  # (this file is
    # copied alone into other tests' folders: nothing of tests/ at its top)

    problem = slurm_missing()
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Slurm tests: {problem}")
        pytest.skip(problem)
    cluster = SlurmCluster(2, tmp_path_factory.mktemp("slurm"),
                           env={"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"}).up()
    yield cluster
    cluster.down()
