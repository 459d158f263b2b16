"""Test-wide settings: no display, tf-keras, quiet TensorFlow, no real home directory; no test hangs the suite;
the tests that share this machine's test network run on one xdist worker."""

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
    try:
        if hasattr(session.config, "workerinput"):
            # An xdist worker's stdout is /dev/null (execnet keeps its channel elsewhere); its stderr is the
            # terminal the run was started from.
            _terminal_fd = os.dup(2)
        else:
            _terminal_fd = os.dup(session.config.get_terminal_writer()._file.fileno())  # a test's output is captured
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


# ------------------------------------------------------------------ parallel runs (pytest-xdist)

def shared_group(item) -> str | None:
    """The xdist group of a test that shares a costly module fixture with the others of its module (a training run
    several tests look at, the SSH test hosts, the Slurm cluster): its module, whose tests then run on one worker,
    one after the other, each fixture made once. (Each worker has a test network of its own:
    tests.helpers.testhosts.) A test that brings the test hosts up itself says so: ``test_network``."""
    info = getattr(item, "_fixtureinfo", None)
    shared = item.get_closest_marker("test_network") is not None or (info is not None and any(
        definition.scope != "function" and definition.baseid.startswith("tests")
        for name in item.fixturenames for definition in (info.name2fixturedefs.get(name) or ())[-1:]))
    return f"{item.module.__name__}:module-fixtures" if shared else None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        group = shared_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_finish(session):
    """An xdist worker whose groups did not take (xdist marks them in the node ids: pytest-dev/pytest-xdist#1386)
    would make each module fixture once for each worker that runs one of its tests: stop first."""
    if not (hasattr(session.config, "workerinput") and session.config.getvalue("loadgroup")):
        return
    lost = [i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
    if lost:
        raise pytest.UsageError(f"--dist loadgroup grouped none of the {len(lost)} tests that share module fixtures "
                                f"(this pytest-xdist and pytest do not work together): run with -n 0")


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: this file is also used where xdist is not loaded
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: a worker a core, but no more workers than the memory holds (a test runs up to four
    TensorFlow processes of ~0.7 GB each), and at most 4."""
    try:
        memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        memory_gb = 8
    return max(1, min(os.cpu_count() or 1, int(memory_gb // 4), 4))


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
