"""Time to make 2 and 4 SSH test hosts ready from nothing, air-gapped, and the bytes pushed (issue 41).

Creates SSH test hosts (network namespaces with their own sshd and no route to
any package index; root only) whose Python is /usr/bin/python3 without
TensorFlow, and provisions them as `tfcc provision` does (console/provision.py):
one lock for their platform, the wheels from this console's cache, what each
host lacks pushed over SFTP as blobs with uv's binary, installed offline there.

By default the wheels are synthetic, about TensorFlow's closure in size: one
570 MB wheel that needs 30 small ones (80 MB in all), random bytes stored
uncompressed, with stand-ins of the console's TensorFlow stack, served from a
find_links folder (index = ""). ``--real`` provisions the console's own
TensorFlow stack from PyPI (the cluster file has no [environment]: tfcc's
default), which this console fetches; the hosts reach no index either way.

For each number of hosts, three ways, each on fresh hosts (nothing in their
tfcc home):

  own homes       each host its own TFCC_HOME: every host gets every byte;
  shared home     all hosts given one TFCC_HOME (as an NFS home would be:
                  each sshd sets it; a tfcc-home that is a symbolic link is
                  refused by the agent's start as writable by others),
                  provisioned together;
  shared, h0 1st  one TFCC_HOME, h0 provisioned alone, then all of them: what
                  h0 got (its blobs, the environment made of them) is there
                  for the rest, which push nothing.

With own homes, one package is then added to [environment]: each host gets
that wheel alone (the blobs it has are never sent again) and a new environment.

Each is provisioned twice: the second must do nothing (< 2 s, 0 bytes pushed),
timed in this process and as a `tfcc provision` process of its own (what a
person waits for: start-up included). One wheel cache serves the whole
invocation, as a console keeps it: only the first provision fetches (marked *).
A host that fails is made ready again at once, as its line says, and both
tries are counted (marked !).
"fetched" is what came into the cache: from the find_links folder by default,
from the index with --real. Everything made is removed at the end.

    sudo .venv/bin/python bench/provision.py [--sizes 2 4] [--real] [--network 7]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from console import cluster as cl  # noqa: E402
from console import provision as pv  # noqa: E402
from tests.helpers.wheels import console_stack_stand_ins, make_wheel  # noqa: E402

MB = 1_000_000
BIG_MB, SMALL_COUNT, SMALL_MB = 570, 30, 80
OWN, SHARED, FIRST = "own homes", "shared home", "shared, h0 1st"
VARIANTS = (OWN, SHARED, FIRST)
SECOND_GOAL = 2.0
EXTRA = "tfccextra==1.0"
TFCC = [sys.executable, "-m", "console.cli"]


def synthetic_wheels(folder: Path, big_mb: float, small_count: int, small_mb: float) -> tuple[list[str], int]:
    """A big wheel that needs ``small_count`` small ones (``small_mb`` in all, sized 1/k like a real closure:
    a few large, many tiny), and the console stack's stand-ins; the requirement and the wheels' bytes."""
    weights = [1 / (k + 1) for k in range(small_count)]
    small = []
    for k, weight in enumerate(weights):
        name = f"tfccdep-{k:02d}"
        make_wheel(folder, name, "1.0", payload=int(small_mb * MB * weight / sum(weights)))
        small.append(f"{name}==1.0")
    make_wheel(folder, "tfccbig", "1.0", requires=small, payload=int(big_mb * MB))
    make_wheel(folder, EXTRA.split("==")[0], "1.0", payload=MB)  # what a changed [environment] adds
    console_stack_stand_ins(folder)
    return ["tfccbig==1.0"], sum(p.stat().st_size for p in folder.glob("*.whl"))


def cluster_text(hosts, client_key: Path, packages: list[str] | None, wheels: Path | None) -> str:
    lines = ['[training]', 'workload = "digits"', '']
    if packages is not None:
        lines += ['[environment]', 'tensorflow = "console"', f'packages = {json.dumps(packages)}', 'index = ""',
                  f'find_links = {json.dumps([str(wheels)])}', '']
    for h in hosts:
        lines += ['[[hosts]]', f'name = "{h.name}"', f'address = "{h.address}"', 'user = "root"',
                  f'key = "{client_key}"', '']
    for h in hosts:
        lines += ['[[tasks]]', f'host = "{h.name}"', '']
    return "\n".join(lines)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


class Timeline:
    """When each host first reached each stage of a provision (its progress callbacks)."""

    def __init__(self):
        self.t0 = time.monotonic()
        self.seen: dict[str, dict[str, float]] = {}

    def __call__(self, result: pv.HostResult) -> None:
        self.seen.setdefault(result.name, {}).setdefault(result.stage, time.monotonic() - self.t0)

    def stages(self) -> dict[str, float]:
        """Each stage's seconds on the host that took longest in it."""
        out: dict[str, float] = {}
        for marks in self.seen.values():
            order = sorted(marks.items(), key=lambda kv: kv[1])
            for (stage, t), (_, after) in zip(order, order[1:]):
                out[stage] = max(out.get(stage, 0.0), after - t)
        return out


def provision_once(path: Path, failures: list[str] | None = None) -> tuple[pv.Report, Timeline, int]:
    """One provision of the cluster file ``path`` in this process; the report, its timeline, bytes fetched.
    A host that failed is noted in ``failures`` and the provision made again, as its line tells a person to
    (once); without ``failures``, or failing again, the bench stops."""
    before = folder_bytes(pv.cache_dir() / "wheels")
    timeline = Timeline()
    report = pv.Provision(cl.load(path), on_progress=timeline).run()
    failed = [f"{r.name}: {r.stage}: {r.line}" for r in report.hosts if not r.ok]
    if failed and failures is not None and not report.differs:
        failures += failed
        again, _, _ = provision_once(path)  # the timeline of the first try: where it went wrong
        for r, first in zip(again.hosts, report.hosts):
            r.pushed += first.pushed
        again.seconds += report.seconds
        return again, timeline, folder_bytes(pv.cache_dir() / "wheels") - before
    if failed or report.differs:
        raise SystemExit(f"provision of {path} failed:\n" + "\n".join(failed + report.differs))
    return report, timeline, folder_bytes(pv.cache_dir() / "wheels") - before


def provision_process(path: Path) -> tuple[float, dict]:
    """`tfcc provision FILE --json` as a person runs it: its wall time and its report."""
    t0 = time.monotonic()
    out = subprocess.run([*TFCC, "provision", str(path), "--json"], cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if out.returncode != 0:
        raise SystemExit(f"tfcc provision {path} exited {out.returncode}:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return wall, json.loads(out.stdout.strip().splitlines()[-1])


def scenario(testhosts, count: int, variant: str, work: Path, packages, wheels) -> dict:
    """Fresh hosts, provisioned twice the ``variant``'s way; the row of the table."""
    work.mkdir(exist_ok=True)
    env = {"TFCC_HOME": str(work / "shared-home")} if variant != OWN else None
    if env:
        Path(env["TFCC_HOME"]).mkdir(mode=0o700)
    hosts = testhosts.TestHosts(count, work / "hosts", env=env, plain_shell=True).up()
    try:
        # A file of their own: new hosts have new keys, and the console reads a known_hosts file once a process.
        known = work / f"known_hosts-{count}-{VARIANTS.index(variant)}"
        os.environ["TFCC_KNOWN_HOSTS"] = str(hosts.known_hosts(known))
        every = work / "cluster.toml"
        every.write_text(cluster_text(hosts.hosts, hosts.client_key, packages, wheels))
        pushed = {h.name: 0 for h in hosts.hosts}
        first, fetched, steps, failures = 0.0, 0, [], []
        if variant == FIRST:
            alone = work / "cluster-h0.toml"
            alone.write_text(cluster_text(hosts.hosts[:1], hosts.client_key, packages, wheels))
            report, timeline, got = provision_once(alone, failures)
            first += report.seconds
            fetched += got
            steps.append(report.seconds)
            for r in report.hosts:
                pushed[r.name] += r.pushed
        report, then, got = provision_once(every, failures)
        if variant != FIRST:
            timeline = then
        first += report.seconds
        fetched += got
        steps.append(report.seconds)
        for r in report.hosts:
            pushed[r.name] += r.pushed
        ends = [r.stage for r in report.hosts]
        home = Path(env["TFCC_HOME"]) if env else hosts.hosts[0].tfcc_home
        home_bytes = folder_bytes(home)
        again, _, again_fetched = provision_once(every)
        cli_wall, cli = provision_process(every)
        changed = None
        if variant == OWN and packages is not None:  # one package more: only its wheel is new to the hosts
            more = work / "cluster-more.toml"
            more.write_text(cluster_text(hosts.hosts, hosts.client_key, packages + [EXTRA], wheels))
            report, _, _ = provision_once(more)
            changed = {"seconds": report.seconds, "pushed": [r.pushed for r in report.hosts]}
        return {"hosts": count, "variant": variant, "first": first, "steps": steps, "fetched": fetched,
                "pushed": [pushed[h.name] for h in hosts.hosts], "ends": ends, "stages": timeline.stages(),
                "home": home_bytes, "second": again.seconds, "second_pushed": again.pushed + again_fetched,
                "cli": cli_wall, "cli_pushed": cli["pushed"] + cli["fetched"], "changed": changed,
                "failures": failures}
    finally:
        hosts.down()
        shutil.rmtree(work / "hosts", ignore_errors=True)
        shutil.rmtree(work / "shared-home", ignore_errors=True)


def mb(n: int) -> str:
    return f"{n / MB:.0f}"


def progress_line(row: dict) -> str:
    """A scenario's figures as it ends: where the first provision's time went, and what a home holds after it."""
    stages = ", ".join(f"{k} {v:.1f}" for k, v in row["stages"].items())
    home = "the shared tfcc home" if row["variant"] != OWN else "h0's tfcc home"
    return (f"{row['hosts']} hosts, {row['variant']}: first {row['first']:.1f} s (pushed "
            f"{', '.join(mb(p) for p in row['pushed'])} MB; slowest host's stages {stages}), second "
            f"{row['second']:.2f} s, `tfcc provision` {row['cli']:.2f} s; {home} {mb(row['home'])} MB after the first")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 4], help="numbers of hosts (default 2 4)")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS, metavar="VARIANT",
                    help=f"which ways (default all: {', '.join(VARIANTS)})")
    ap.add_argument("--real", action="store_true", help="the console's own TensorFlow stack, from PyPI")
    ap.add_argument("--big-mb", type=float, default=BIG_MB, help="the big synthetic wheel's payload (MB)")
    ap.add_argument("--small-mb", type=float, default=SMALL_MB, help=f"the {SMALL_COUNT} small ones' (MB in all)")
    ap.add_argument("--network", type=int, default=None,
                    help="the test hosts' network (tests/helpers/testhosts.py; default: PYTEST_XDIST_WORKER's, "
                         "else 0); another than the tests' lets the bench run beside them")
    ns = ap.parse_args()
    if ns.network is not None:
        os.environ["PYTEST_XDIST_WORKER"] = f"gw{ns.network}"
    # The hosts' network is fixed when testhosts is imported: after the option is read.
    from tests.helpers import testhosts

    problem = testhosts.missing_requirements()
    if problem:
        raise SystemExit(problem)
    rows = []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tfcc-bench-provision-") as tmp:
        work = Path(tmp)
        os.environ["TFCC_CONSOLE_HOME"] = str(work / "console-home")
        os.environ["TFCC_CACHE"] = str(work / "cache")  # one cache for the invocation: fetched once
        os.environ["TFCC_SSH_CONFIG"] = str(work / "no_ssh_config")
        if ns.real:
            packages = wheels = None
            source = "the console's TensorFlow stack from PyPI"
        else:
            wheels = work / "wheels"
            packages, size = synthetic_wheels(wheels, ns.big_mb, SMALL_COUNT, ns.small_mb)
            source = f"synthetic wheels, {mb(size)} MB in {len(list(wheels.glob('*.whl')))} files, find_links"
        print(f"provisioning {source}; test network {testhosts.NETWORK} ({testhosts.SUBNET}.x)", flush=True)
        for count in ns.sizes:
            for variant in ns.variants:
                t0 = time.monotonic()
                row = scenario(testhosts, count, variant, work / "run", packages, wheels)
                rows.append(row)
                print(f"  {progress_line(row)} ({time.monotonic() - t0:.0f} s with the hosts' set-up)", flush=True)
    cores = len(os.sched_getaffinity(0))
    print(f"\nMaking hosts ready ({time.strftime('%Y-%m-%d')}, {source}, {cores} cores, load average "
          f"{load:.1f} at the start and {os.getloadavg()[0]:.1f} at the end; hosts are network namespaces on this "
          "machine: their sshd, agent and uv share its cores and disk)")
    print(f"{'hosts':>5} | {'variant':<14} | {'first s':>7} | {'second s':>8} | {'tfcc provision s':>16} | "
          f"{'fetched MB':>10} | {'pushed per host MB':<20} | {'pushed total MB':>15}")
    for r in rows:
        first = f"{r['first']:.1f}" + ("*" if r["fetched"] else "") + ("!" if r["failures"] else "")
        print(f"{r['hosts']:>5} | {r['variant']:<14} | {first:>7} | {r['second']:>8.2f} | {r['cli']:>16.2f} | "
              f"{mb(r['fetched']):>10} | {' '.join(mb(p) for p in r['pushed']):<20} | {mb(sum(r['pushed'])):>15}")
    print("* includes the fetch into this console's cache (only the invocation's first provision fetches)")
    if any(r["failures"] for r in rows):
        print("! a host failed the first time; made ready again at once (its lines below), both included")
    print("second s: a second provision in this process; tfcc provision s: the same as a process of its own")
    for r in rows:
        for line in r["failures"]:
            print(f"{r['hosts']} hosts, {r['variant']}: failed once: {line}")
    for r in rows:
        if r["variant"] == FIRST:
            print(f"{r['hosts']} hosts, {FIRST}: h0 alone {r['steps'][0]:.1f} s, then all {r['steps'][1]:.1f} s")
    missed = [r for r in rows if max(r["second"], r["cli"]) >= SECOND_GOAL or r["second_pushed"] or r["cli_pushed"]]
    print(f"second provision < {SECOND_GOAL:g} s and 0 bytes, in-process and as `tfcc provision`: "
          + ("met for every row" if not missed else
             "MISSED for " + ", ".join(f"{r['hosts']} hosts {r['variant']}" for r in missed)))
    for r in rows:
        if r["changed"]:
            print(f"{r['hosts']} hosts, {OWN}, then {EXTRA} added to [environment]: {r['changed']['seconds']:.1f} s, "
                  f"pushed per host {', '.join(f'{p / MB:.1f}' for p in r['changed']['pushed'])} MB (its wheel "
                  "alone; a new environment is made from the blobs each host has)")
        if r["variant"] != OWN:  # one home: one host pushes (whichever got to it first), the others nothing
            others = sorted(r["pushed"])[:-1]
            print(f"{r['hosts']} hosts, {r['variant']}: beside the one host that pushed, the others pushed "
                  f"{mb(sum(others))} MB ({'no more bytes' if not any(others) else 'the same blobs again'}; the "
                  f"hosts ended {', '.join(r['ends'])})")


if __name__ == "__main__":
    main()
