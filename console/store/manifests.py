"""The runs this console started: their ids and their manifests in its state folder (Qt-free).

A run id names one run everywhere: a folder on every host and ``<state>/runs/<id>.json``
here, which keeps the cluster and each task's TF_CONFIG so that a run can be followed,
stopped and resumed by a later console.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from agent.protocol import name_problem
from console import cluster as cl
from console.errors import RunError, make_state_dir, state_dir
from console.files import write_atomically
from console.states import Left


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def check_run_id(run_id) -> str:
    """``run_id`` if it can name a run (a folder on every host and a manifest here), else a RunError.

    Checked before anything touches a disk: ``../x`` must never become a path.
    """
    problem = name_problem("run id", run_id)
    if problem:
        raise RunError(problem)
    return run_id


def console_id() -> str:
    """This console's own name (made once, kept in its state folder): the hosts record which console
    started each task, and a delete from another console leaves it alone."""
    path = state_dir() / "console-id"
    try:
        known = path.read_text(encoding="utf-8").strip()
        if not name_problem("console id", known):
            return known
    except OSError:
        pass
    made = "console-" + uuid.uuid4().hex
    make_state_dir()
    write_atomically(path, made + "\n", mode=0o600)
    return made


def manifest_path(run_id: str) -> Path:
    return state_dir() / "runs" / f"{check_run_id(run_id)}.json"


def known_runs() -> list[str]:
    """The ids of the runs this console has manifests of (oldest first)."""
    return sorted(p.stem for p in (state_dir() / "runs").glob("*.json") if name_problem("run id", p.stem) is None)


@dataclass
class Manifest:
    """What the console keeps of a run it started, checked when read."""

    run_id: str
    cluster: cl.Cluster
    tasks: list[tuple[str, str]]  # (task name, host name), in cluster order
    tf_configs: list[str]         # each task's TF_CONFIG, as its process got it
    # An elastic run: the tasks it went on without (name -> why), and each change of its size, oldest first
    # ({"at": time, "tasks": the names in the run from then, "why": words}).
    left: dict[str, Left] = field(default_factory=dict)  # (console.states.Left: its words, and its reason)
    resizes: list[dict] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)  # tasks moved to a spare host, with no folder there yet
    # The newest breakdown's scaling ({"speedup", "efficiency", "workers", "kind", "time"}; console.speed).
    speed: dict = field(default_factory=dict)


def _left(why: str) -> dict:
    """A task's leaving as the manifest keeps it: its words and its reason (a console.states.Leave)."""
    return {"left": str(why), "left_reason": getattr(why, "reason", None) or Left.read(why).reason}


def write_manifest(manifest: Manifest) -> None:
    path = manifest_path(manifest.run_id)
    make_state_dir(path.parent)
    created = time.time()
    try:  # rewritten (an elastic run's change of size): it was made when the run was
        kept = json.loads(path.read_text(encoding="utf-8")).get("created")
        created = kept if isinstance(kept, (int, float)) else created
    except (OSError, ValueError, AttributeError):
        pass
    data = {"run_id": manifest.run_id, "created": created, "console": console_id(),
            "cluster": cl.dumps(manifest.cluster),
            "tasks": [{"name": name, "host": host, "tf_config": config,
                       **(_left(manifest.left[name]) if name in manifest.left else {}),
                       **({"moved": True} if name in manifest.moved else {})}
                      for (name, host), config in zip(manifest.tasks, manifest.tf_configs)],
            **({"resizes": manifest.resizes} if manifest.resizes else {}),
            **({"speed": manifest.speed} if manifest.speed else {})}
    write_atomically(path, json.dumps(data, indent=1), mode=0o600)


def read_manifest(run_id: str) -> Manifest:
    """A run's manifest, checked: a damaged one is a RunError that says which file and what to do."""
    path = manifest_path(run_id)
    if not path.is_file():
        known = known_runs()
        raise RunError(f"no run {run_id!r} is known to this console",
                       "tfcc runs lists them" + (f" (the newest is {known[-1]})" if known else ""))
    damaged = (f"the manifest of run {run_id} ({path}) is damaged",
               "tfcc cannot follow or stop that run from it; its tasks may still run on their hosts "
               "(stop them there if so), then delete the file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        tasks = data["tasks"]
        cluster = cl.loads(data["cluster"], source=f"the cluster in {path}")
        names = cluster.task_names()
        if (not isinstance(tasks, list) or len(tasks) != len(names) or [t["name"] for t in tasks] != names
                or not all(isinstance(t["tf_config"], str) and isinstance(t["host"], str) for t in tasks)):
            raise ValueError("its tasks do not match its cluster")
        for t in tasks:
            json.loads(t["tf_config"])
        left = {t["name"]: t["left"] for t in tasks if "left" in t}
        moved = [t["name"] for t in tasks if t.get("moved") is True]
        resizes = data.get("resizes", [])
        if (not all(isinstance(why, str) for why in left.values()) or len(left) >= len(tasks)
                or not isinstance(resizes, list) or not all(isinstance(r, dict) for r in resizes)):
            raise ValueError("its elastic membership is not one")
        left = {t["name"]: Left.read(t["left"], t.get("left_reason")) for t in tasks if "left" in t}
    except OSError as exc:
        raise RunError(f"the manifest of run {run_id} ({path}) cannot be read ({exc.strerror})",
                       "check its permissions") from None
    except (ValueError, KeyError, TypeError, cl.ClusterFileError) as exc:
        raise RunError(f"{damaged[0]} ({type(exc).__name__}: {str(exc)[:200]})", damaged[1]) from None
    speed = data.get("speed")  # a note of the newest breakdown: one that is not one is left out, not refused
    speed = speed if isinstance(speed, dict) and all(isinstance(speed.get(k), (int, float)) and
                                                     not isinstance(speed.get(k), bool)
                                                     for k in ("speedup", "efficiency", "workers")) else {}
    return Manifest(run_id, cluster, [(t["name"], t["host"]) for t in tasks], [t["tf_config"] for t in tasks],
                    left, resizes, moved, speed)
