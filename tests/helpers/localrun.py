"""Start trainer tasks directly as local child processes, without the agent.

For the trainer's tests and benchmarks, which need real multi-worker runs and
nothing else; ``tfcc`` itself starts tasks through the agent (console.run.runner).
Each task gets its own run folder ``<run_root>/<task_type>-<index>`` and a
``TF_CONFIG`` naming every task on localhost.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from agent.runs import free_ports
from trainer.tf_config import make_tf_config


@dataclass
class LocalTask:
    task_type: str
    index: int
    run_dir: Path
    process: subprocess.Popen

    @property
    def name(self) -> str:
        return f"{self.task_type}-{self.index}"

    @property
    def metrics_path(self) -> Path:
        return self.run_dir / "metrics.jsonl"


def local_cluster(num_workers: int, ports: list[int] | None = None) -> dict[str, list[str]]:
    ports = ports or free_ports(num_workers)
    return {"worker": [f"localhost:{p}" for p in ports]}


def start_local_tasks(
    cluster: dict[str, list[str]],
    run_root: Path,
    trainer_args: list[str],
    *,
    env: dict[str, str] | None = None,
    python: str = sys.executable,
    script: str | None = None,
    capture: bool = False,
    evaluator: bool = False,
) -> list[LocalTask]:
    """Start every task of ``cluster``; stdout and stderr go to files in its run folder.

    Each task runs ``python -m trainer --run-dir DIR ARGS``, or with ``script``
    a user's own program ``python SCRIPT ARGS`` that reads TF_CONFIG itself
    (it finds its run folder in ``$TFCC_RUN_DIR``); with ``capture`` too, under tfcc's capture
    (``python -m trainer.capture SCRIPT ARGS``, as the agent starts it).
    """
    project_root = Path(__file__).resolve().parents[2]
    tasks = []
    roles = [(task_type, len(addrs)) for task_type, addrs in cluster.items()]
    if evaluator:  # a sidecar outside the training cluster: its TF_CONFIG names it in "task" only
        roles.append(("evaluator", 1))
    for task_type, count in roles:
        for index in range(count):
            run_dir = Path(run_root) / f"{task_type}-{index}"
            run_dir.mkdir(parents=True, exist_ok=True)
            task_env = dict(os.environ, **(env or {}))
            task_env["TF_CONFIG"] = make_tf_config(cluster, task_type, index)
            task_env["TFCC_RUN_DIR"] = str(run_dir)
            # tf-keras for users' scripts too: Keras 3's fit fails under MWMS.
            task_env.setdefault("TF_USE_LEGACY_KERAS", "1")
            task_env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(project_root), task_env.get("PYTHONPATH", "")) if p
            )
            with open(run_dir / "stdout.log", "ab") as out, open(run_dir / "stderr.log", "ab") as err:
                if script is None:
                    argv = [python, "-m", "trainer", "--run-dir", str(run_dir), *trainer_args]
                else:
                    argv = [python, *(["-m", "trainer.capture"] if capture else []), script, *trainer_args]
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=task_env,
                    start_new_session=True,
                )
            tasks.append(LocalTask(task_type, index, run_dir, proc))
    return tasks
