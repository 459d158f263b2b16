"""The batch script's attempts (agent/slurm.py ``attempt_loop``, the agent's job and the Slurm export alike), run by
bash under a stand-in srun: no Slurm needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent import slurm

# srun for a test: its exit code the next line of $CODES (0 past the end), TFCC_ATTEMPT noted in $SEEN.
FAKE_SRUN = """#!/usr/bin/env bash
echo "$TFCC_ATTEMPT" >>"$SEEN"
n=$(wc -l <"$SEEN")
code=$(sed -n "${n}p" "$CODES")
exit "${code:-0}"
"""


def run_loop(tmp_path: Path, codes: list[int], max_restarts: int, **given) -> tuple[int, str, list[str]]:
    """The loop's exit code, what it said (stdout and stderr) and each attempt's TFCC_ATTEMPT."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "srun").chmod(0o755)
    (tmp_path / "codes").write_text("".join(f"{c}\n" for c in codes))
    options = dict(runs="$run", tasks=2, cpus=1, srun_options=[], parameter_server=False, stops=[],
                   chief_finished=None, refused="false")
    options.update(given)
    script = tmp_path / "job.sh"
    script.write_text(f"set -u\nrun={tmp_path}\n" + slurm.attempt_loop("job", "true", max_restarts=max_restarts,
                                                                       **options))
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "CODES": str(tmp_path / "codes"),
                               "SEEN": str(tmp_path / "seen")})
    seen = (tmp_path / "seen").read_text().split() if (tmp_path / "seen").exists() else []
    return done.returncode, done.stdout + done.stderr, seen


def test_a_failed_attempt_starts_every_task_again_until_one_ends_well(tmp_path):
    code, said, seen = run_loop(tmp_path, [1, 3, 0], max_restarts=3)
    assert code == 0 and seen == ["1", "2", "3"], said
    assert f"job: attempt 1: 2 tasks, run folders in {tmp_path}" in said and "job: every task finished" in said
    assert said.count("restarting every task from its last backup") == 2


def test_the_last_restart_ends_the_job_with_the_attempts_exit_code(tmp_path):
    code, said, seen = run_loop(tmp_path, [1, 3, 0], max_restarts=1)
    assert code == 3 and seen == ["1", "2"], said
    assert f"job: attempt 2 failed (exit code 3), no restarts left; see {tmp_path}/*/stderr.log" in said


def test_a_task_that_refused_its_input_is_not_restarted(tmp_path):
    code, said, seen = run_loop(tmp_path, [1], max_restarts=3, refused="true")
    assert code == 2 and seen == ["1"] and "job: a task refused its input (exit code 2): not restarted" in said


@pytest.mark.parametrize("srun_code", [0, 1])
def test_a_stop_ends_the_job_before_anything_else_is_judged(tmp_path, srun_code):
    """A stop someone asked for (the agent's cancel), the time limit (the export's): no next attempt, and no
    'finished' for tasks that ended well because they were stopped."""
    (tmp_path / "stop").write_text("")
    code, said, seen = run_loop(tmp_path, [srun_code], max_restarts=3,
                                stops=[('[ -e "$run/stop" ]', "stopped", "124")], chief_finished="true")
    assert code == 124 and seen == ["1"] and "job: stopped" in said and "finished" not in said


def test_under_parameter_servers_the_chiefs_end_is_the_jobs(tmp_path):
    """A server killed after the chief finished (srun's --wait, SIGTERM's grace) is no failure."""
    code, said, _ = run_loop(tmp_path, [143], max_restarts=0, chief_finished='[ -e "$run/chief" ]')
    assert code == 143 and "no restarts left" in said
    (tmp_path / "seen").unlink()
    (tmp_path / "chief").write_text("")
    code, said, seen = run_loop(tmp_path, [143], max_restarts=0, chief_finished='[ -e "$run/chief" ]')
    assert code == 0 and seen == ["1"] and "job: every task finished" in said


def test_srun_gets_the_jobs_options_and_the_servers_wait(tmp_path):
    text = slurm.attempt_loop("job", "python3 -m x", runs="$run", tasks=4, cpus=3,
                              srun_options=["--gpu-bind=mask_gpu:0x1,0x2"], parameter_server=True, max_restarts=0,
                              stops=[], chief_finished=None, refused="false")
    assert ("  setsid srun --kill-on-bad-exit=1 --cpus-per-task=3 --gpu-bind=mask_gpu:0x1,0x2 "
            f"--wait={slurm.SERVER_WAIT} \\\n    python3 -m x &\n") in text


def test_the_agents_batch_script_is_bash(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "home"))
    for parameter_server in (False, True):
        text = slurm._batch_script("r1", tmp_path / "home" / "runs" / "r1", 3, ["--nodes=2"], [], sys.executable,
                                   str(tmp_path), 2, 1, parameter_server, "chief:1,ps:1,worker:1", 8888)
        path = tmp_path / "job.sbatch"
        path.write_text(text)
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0, text
        assert ("--wait=" in text) == parameter_server and ("chief-0/exit.json" in text) == parameter_server
