"""Pre-flight checks of a cluster (Qt-free): hosts, versions, GPUs, ports, reachability.

Every host is checked at once, each within a deadline: a host that hangs shows
as "no answer in N s" and never holds back the others. Reachability is tested
on the real training ports, between every pair of hosts: each host's agent
holds temporary listeners on its task ports while every other host's agent
connects to them. Each failed check becomes a ``Problem`` with the cause and
the fix in plain words, the same text for the CLI and the GUI.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field

from agent.protocol import format_address, parse_address
from console import cluster as cl
from console import environments, exposure, text, workdir
from console.errors import TfccError, describe
from console.remote.deploy import make_bundle
from console.remote.link import HostLink
from console.run.launch import check_user_file, keras_choice
from console.diagnosis import PIP_NAMES
from console.script_source import external_imports, imports, keras_use
from trainer.plan import GlobalSplit, replicas_per_worker, strategy_for
from trainer.strategies import Strategy
from trainer.tf_config import CHIEF, WORKER

log = logging.getLogger("console.checks")
LISTEN_SECONDS = 60.0
MAKE_READY = "make-ready"  # a Problem's remedy: tfcc can fix it itself (tfcc provision, the Check's Make ready)
DOTFILES_SAID = 20  # a workdir row names this many of the dotfiles it ships (all of them in its "dotfiles")


@dataclass
class Problem:
    where: str     # a host, a task or "cluster"
    cause: str
    fix: str
    hosts: tuple[str, ...] = ()  # the hosts it concerns (the window marks them), by name
    task: str = ""               # the task it concerns, by name, if one
    remedy: str = ""             # MAKE_READY where tfcc can fix it itself
    package: str = ""            # a module the code imports that a host lacks: the package Make ready offers to add

    def __str__(self) -> str:
        return f"{self.where}: {self.cause}; {self.fix}" if self.fix else f"{self.where}: {self.cause}"


@dataclass
class HostReport:
    name: str
    address: str
    ok: bool = False
    error: str | None = None
    probe: dict | None = None
    ports: list = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Report:
    hosts: list[HostReport]
    tasks: list[dict]                       # name, host, address (host:port)
    matrix: dict[str, dict[str, dict]]      # source host -> task address -> connect result
    problems: list[Problem]
    seconds: float = 0.0
    warnings: list[Problem] = field(default_factory=list)  # what a run may go on with, said (a public address)
    files: list[dict] = field(default_factory=list)  # the workload's files: what, path, ok, problem (workload_files)
    keras: str = ""  # a user's code: the Keras it gets and why ("tf-keras (it uses tf.keras (main.py:3), ...)")

    @property
    def ready(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        return {"ready": self.ready, "seconds": self.seconds, "hosts": [asdict(h) for h in self.hosts],
                "tasks": self.tasks, "matrix": self.matrix,
                "problems": [asdict(p) | {"text": str(p)} for p in self.problems],
                "warnings": [asdict(p) | {"text": str(p)} for p in self.warnings], "files": self.files,
                "keras": self.keras}


# --------------------------------------------------------------------------- rules


def _major_minor(version: str | None) -> str | None:
    return ".".join(version.split(".")[:2]) if version else None


def consistency(cluster: cl.Cluster, probes: dict[str, dict], keras: tuple[str, str] | None = None) -> list[Problem]:
    """Rules across hosts, from each host's probe (hosts without one are skipped). ``keras``: the code's
    ``keras_choice``, made once for a check (else made here)."""
    problems = []
    used = [h for h in cluster.hosts if h.name in probes and (h.spare or any(t.host == h.name for t in cluster.tasks))]
    for host in used:
        p = probes[host.name]
        if p.get("env_missing"):  # its tasks run in the [environment], not made there yet: that is its problem
            continue
        # tfcc makes the environment where no python of the host's own overrides it (docs/provision.md).
        makes = not host.python or cluster.environment is not None
        if not p.get("tensorflow"):
            problems.append(Problem(host.name, f"its Python ({p.get('python_executable')}) has no TensorFlow",
                                    ("make it ready (tfcc provision: tfcc installs it, offline too), install it there "
                                     "yourself" if makes else "install it there")
                                    + " (pip install 'tensorflow==2.21.*' 'tf-keras==2.21.*') or set "
                                    f"python for {host.name} to an interpreter that has it", (host.name,),
                                    remedy=MAKE_READY if makes else ""))
        elif not p.get("tf_keras") and (why := _needs_tf_keras(cluster, keras)):
            mine = cluster.training.user_code
            problems.append(Problem(host.name, f"its Python ({p.get('python_executable')}) has TensorFlow "
                                    f"{p['tensorflow']} but no tf-keras" + (f", which the script gets ({why})"
                                                                             if mine else ""),
                                    f"pip install 'tf-keras=={_major_minor(p['tensorflow'])}.*' there"
                                    + (" (or set keras = \"keras3\" in [training] if the script runs under Keras 3)"
                                       if mine and cluster.training.keras == "auto" and not cluster.needs_tf_keras
                                       else "") + (", or make it ready (tfcc provision)" if makes else ""),
                                    (host.name,), remedy=MAKE_READY if makes else ""))
    for key, label in (("tensorflow", "TensorFlow"), ("tf_keras", "tf-keras")):
        versions = {h.name: probes[h.name].get(key) for h in used
                    if probes[h.name].get(key) and not probes[h.name].get("env_missing")}
        if len(set(versions.values())) > 1:
            listing = ", ".join(f"{n} has {v}" for n, v in versions.items())
            newest = max(versions.values(), key=lambda v: [int(x) if x.isdigit() else 0 for x in v.split(".")])
            makes = all(not cluster.host(n).python for n in versions) or cluster.environment is not None
            problems.append(Problem("cluster", f"{label} differs between hosts: {listing}",
                                    ("make them ready (tfcc provision: the same versions everywhere) or install the "
                                     if makes else "install the ")
                                    + f"same version everywhere, e.g. {label.lower()}=={newest}", tuple(versions),
                                    remedy=MAKE_READY if makes else ""))
    pythons = {h.name: _major_minor(probes[h.name].get("python")) for h in used
               if not probes[h.name].get("env_missing")}
    if len(set(pythons.values())) > 1:
        listing = ", ".join(f"{n} has {v}" for n, v in pythons.items())
        problems.append(Problem("cluster", f"Python differs between hosts: {listing}",
                                "use the same Python major.minor on every host (set python for each host)",
                                tuple(pythons)))
    per_worker = {}
    for name, task in zip(cluster.task_names(), cluster.tasks):
        if task.host not in probes or not _holds_replicas(cluster, task):
            continue
        visible = len(probes[task.host].get("gpus") or [])
        per_worker[name] = len(task.gpus) if task.gpus else visible
    if len(set(per_worker.values())) > 1:
        listing = ", ".join(f"{n} {g}" for n, g in per_worker.items())
        problems.append(Problem(
            "cluster", f"workers would use different numbers of GPUs ({listing}); collectives then fail with "
            "'Collective Op has group_size … but that group has size …'",
            "give every task the same number of GPUs (gpus = [...] in each task)",
            tuple(dict.fromkeys(t.host for n, t in zip(cluster.task_names(), cluster.tasks) if n in per_worker))))
    problems += _global_batch_rule(cluster, per_worker)
    return problems


def _needs_tf_keras(cluster: cl.Cluster, keras: tuple[str, str] | None = None) -> str:
    """Why the tasks need tf-keras ("" if they do not): tfcc's trainer always; a user's code where it gets
    tf-keras (``keras_choice``, or ``keras`` made already: the cluster, or its code written for Keras 2)."""
    flavour, why = keras or keras_choice(cluster)
    return why if flavour == cl.TF_KERAS else ""


def workload_files(cluster: cl.Cluster) -> tuple[list[dict], list[Problem]]:
    """The files the run ships from this machine (a model file, a script), checked as a start checks them: each as
    a row (what, path, ok, problem), and the problems."""
    rows, problems = [], []
    for what in ("model_file", "script", "module"):
        path = getattr(cluster.training, what)
        if not path:
            continue
        try:
            if what == "module":  # its file in its workdir
                path = f"{path} ({workdir.locate(cluster.training)[1]})"
                check_user_file(str(workdir.locate(cluster.training)[1]), what)
            else:
                check_user_file(path, what)
            rows.append({"what": what, "path": path, "ok": True, "problem": ""})
        except TfccError as exc:
            problem = Problem("cluster", exc.cause, exc.fix or "")
            rows.append({"what": what, "path": path, "ok": False, "problem": str(problem)})
            problems.append(problem)
            continue
        if what in ("script", "module"):  # the folder that ships with it, as a start collects it
            try:
                shipped = workdir.collect(cluster.training, hashed=False)
            except TfccError as exc:
                problem = Problem("cluster", exc.cause, exc.fix or "")
                rows.append({"what": "workdir", "path": str(workdir.locate(cluster.training)[0]), "ok": False,
                             "problem": str(problem)})
                problems.append(problem)
                continue
            left = f"; {len(shipped.skipped)} left out (.tfccignore and defaults)" if shipped.skipped else ""
            keys = shipped.secrets()
            if keys:  # a "!" line took them back: said first, each
                left += f"; key and token files shipped (a ! line took them back): {', '.join(keys)}"
            dots = shipped.dotfiles()
            if dots:  # settings files travel; a token one must be seen before it does
                more = f" and {len(dots) - DOTFILES_SAID} more (tfcc check --json lists them all)" \
                    if len(dots) > DOTFILES_SAID else ""
                left += f"; dotfiles shipped: {', '.join(dots[:DOTFILES_SAID])}{more}"
            rows.append({"what": "workdir", "path": f"{shipped.root}: ships {len(shipped.files)} file"
                         f"{'s' * (len(shipped.files) != 1)}, {workdir.human_bytes(shipped.size)}{left}",
                         "ok": True, "problem": "", "dotfiles": dots, "secrets": keys})
    return rows, problems


def import_problems(cluster: cl.Cluster) -> list[Problem]:
    """What a script's imports say before a launch, read from its code: a relative import (only a package's
    module run with ``python -m`` may have one), or an import of its project's own package that is not on a
    script's path (Python puts only the script's folder there). Either way: run it as a module."""
    t = cluster.training
    if not t.script:
        return []
    try:
        root, script = workdir.locate(t)
    except TfccError:
        return []  # workload_files says why
    found = imports(script)
    name = script.relative_to(root).as_posix()
    if found.relative:
        run = workdir.as_module(t)
        return [Problem("cluster", f"the script {name} uses a relative import (line {found.relative[0]}), which "
                        "Python allows only in a module of a package run with python -m",
                        run.fix(t) if run else "make its folder a package and run it as a module: module = "
                        "\"pkg.main\" in [training] in place of script")]
    for top, line in found.absolute.items():
        if (script.parent / f"{top}.py").exists() or (script.parent / top).exists():
            continue  # beside the script: on its path
        run = workdir.as_module(t, top)
        if run is not None:
            return [Problem("cluster", f"the script {name} imports {top} (line {line}), which is your project's "
                            f"({run.found}) but not on the import path of a script run by its path (only its own "
                            "folder is)", run.fix(t))]
    return []


def code_imports(cluster: cl.Cluster) -> dict[str, tuple[str, int]]:
    """The modules a user's code imports from outside its workdir, not Python's own: ``{name: (file, line)}``
    (each host's Python is asked whether it has them)."""
    t = cluster.training
    if not t.user_code:
        return {}
    try:
        root, entry = workdir.locate(t)
    except TfccError:
        return {}
    first = [root] if t.module else [entry.parent, root]  # what Python searches first: the cwd, or the folder
    found = external_imports(entry, root, list(dict.fromkeys(first)))
    standard = set(sys.builtin_module_names) | set(sys.stdlib_module_names)
    return {name: where for name, where in found.items() if name not in standard}


def missing_imports(cluster: cl.Cluster, probes: dict[str, dict], wanted: dict[str, tuple[str, int]]) -> list[Problem]:
    """A module the code imports that a host's Python lacks (and the workdir does not hold): one problem each,
    naming the hosts and the package to install."""
    lacking: dict[str, list[str]] = {}
    for host, probe in probes.items():
        for name in probe.get("missing_modules") or []:
            if name in wanted:
                lacking.setdefault(name, []).append(host)
    problems = []
    for name, hosts in sorted(lacking.items()):
        file, line = wanted[name]
        exe = {probes[h].get("python_executable") for h in hosts}
        python = f" ({exe.pop()})" if len(exe) == 1 else ""
        package = PIP_NAMES.get(name, name)
        problems.append(Problem(hosts[0] if len(hosts) == 1 else "hosts",
                                f"the code imports {name} ({file}:{line}), which the Python{python} of "
                                f"{', '.join(hosts)} lacks and its workdir does not hold",
                                f"add \"{package}\" to packages in [environment] and make the hosts ready (tfcc "
                                f"provision), install it there yourself (pip install {package}), or drop the import",
                                tuple(hosts), remedy=MAKE_READY, package=package))
    return problems


def script_problems(cluster: cl.Cluster, collected: workdir.Workdir | None = None) -> list[Problem]:
    """What a user's script's own code says before a launch: a Keras 3 ``fit`` where only tf-keras can
    run it (more than one training task under MultiWorkerMirrored, or parameter-server training).
    ``collected``: its workdir, collected already (else it is read here)."""
    t = cluster.training
    if not t.user_code or not cluster.needs_tf_keras:
        return []
    try:
        root, script = workdir.locate(t)
        files = [(script.name, script)] + [(f.rel, f.path) for f in (collected or workdir.collect(t)).files
                                           if f.rel.endswith(".py") and f.path != script]
    except TfccError as exc:  # tfcc run says the same, before it uploads anything
        return [Problem("cluster", exc.cause, exc.fix or "")]
    use = keras_use(files)
    why = cluster.training_kind
    if not use.fit:
        return []  # a custom training loop: Keras 3 models can be trained by one
    if t.keras == cl.KERAS3:
        return [Problem("cluster", f"training.keras is \"keras3\", but the script calls fit ({use.where(use.fit)}) "
                        f"with {why}: Keras 3 cannot run fit under MultiWorkerMirrored or ParameterServer "
                        "strategies in TensorFlow 2.21",
                        "set keras = \"auto\" (tf-keras here) and write the script for tf-keras, or train with "
                        "a custom training loop")]
    if use.keras3:
        return [Problem("cluster", f"the script imports Keras 3 (import keras at {use.where(use.keras3)}) and calls "
                        f"fit ({use.where(use.fit)}) with {why}: Keras 3 cannot run fit under MultiWorkerMirrored "
                        "or ParameterServer strategies in TensorFlow 2.21",
                        "import tf_keras as keras instead (or use tf.keras, which tfcc makes tf-keras here)")]
    return []


def _holds_replicas(cluster: cl.Cluster, task: cl.Task) -> bool:
    """A task with model replicas: a worker, or the chief of synchronous training (a coordinator holds
    none, a ps holds variables, an evaluator is no part of training)."""
    return task.role == WORKER or (task.role == CHIEF and not cluster.parameter_server)


def _global_batch_rule(cluster: cl.Cluster, gpus_per_worker: dict[str, int]) -> list[Problem]:
    """A global batch given in the training spec must split evenly over the replicas: all of them in
    synchronous training; one worker's (its GPUs) under parameter-server training, where a step is one
    worker's batch."""
    g = cluster.training.global_batch
    holders = [t for t in cluster.tasks if _holds_replicas(cluster, t)]
    if not g or not gpus_per_worker or len(gpus_per_worker) != len(holders):  # per-replica batches always split
        return []
    workers = len(gpus_per_worker)
    if cluster.parameter_server:
        replicas = max(replicas_per_worker(Strategy.PARAMETER_SERVER, gpus, 1) for gpus in gpus_per_worker.values())
        where = "replicas of one worker (each step is one worker's batch)"
    else:
        requested = cluster.training.strategy
        replicas = sum(replicas_per_worker(strategy_for(requested, workers, gpus), gpus, 1)
                       for gpus in gpus_per_worker.values())
        where = f"replicas ({workers} workers)"
    split = GlobalSplit(g, replicas)
    if split.even:
        return []
    examples = " or ".join(map(str, split.nearest_even))
    return [Problem("cluster", f"the global batch {g} does not split evenly over the {replicas} {where}",
                    f"set global_batch to a multiple of {replicas} (e.g. {examples}) or set per_replica_batch instead")]


def skew(probes: dict[str, dict]) -> dict[str, float]:
    """Each host's clock minus this machine's at the time of its probe (seconds; shown, not judged)."""
    return {name: p["time"] - p["_asked_at"] for name, p in probes.items() if "time" in p and "_asked_at" in p}


def reach_problem(source: str, task: dict, result: dict, peers: list[str] | None = None) -> Problem:
    """A task port ``source`` could not reach; ``peers``: the addresses of the cluster's other hosts, the only
    ones the advice opens the port to (TensorFlow's server runs what anyone who reaches it sends)."""
    where = f"{source} -> {task['name']}"
    host, port = parse_address(task["address"])
    cause = f"{source} cannot reach {task['host']} at {task['address']} ({result['error']})"
    allow = (f"allow {port}/tcp on {task['host']} from {_and(peers)} only (not from everyone: its server runs "
             f"what it is sent), e.g. {' or '.join(exposure.allow_lines(port, peers)[:2])}" if peers
             else f"allow {port}/tcp on {task['host']} from the cluster's hosts only")
    if result["error"] == "timed out":
        fix = f"a firewall between them drops this port; {allow}; or choose another port"
    elif result["error"] == "refused":
        fix = f"a firewall on {task['host']} rejects this port; {allow}; or choose another port"
    elif result["error"] in ("no route to host", "network unreachable"):
        fix = f"{host} is not reachable from {source}: use an address of {task['host']} that {source} can reach"
    else:
        fix = f"check the network between {source} and {task['host']}"
    return Problem(where, cause, fix, (source, task["host"]), task["name"])


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def peer_addresses(cluster: cl.Cluster, host: str) -> list[str]:
    """The addresses of ``host``'s peers (the cluster's other hosts with tasks), resolved here where they are
    names (a firewall rule needs addresses), as given where they do not resolve."""
    found = []
    for peer in exposure.peers_of(cluster, host):
        found += exposure.resolve(peer) or [peer]
    return list(dict.fromkeys(found))


def firewall_problems(cluster: cl.Cluster, probes: dict[str, dict]) -> list[Problem]:
    """With ``firewall = true``: each host whose agent cannot set nftables rules (its probe says why)."""
    if not cluster.training.firewall:
        return []
    return [Problem(name, f"firewall = true, but tfcc cannot set nftables rules there ({p['firewall_problem']})",
                    "log in as root there (user = \"root\"), let this user run nft with sudo without a password, or "
                    "set firewall = false in [training] and allow the task ports from the cluster's hosts only "
                    "yourself", (name,))
            for name, p in probes.items() if not p.get("firewall")]


def _no_answer_fix(host: cl.Host, stage: str, link_stage: str) -> str:
    """What to do about a host that gave no answer in time, by how far its check got."""
    if stage == "connecting":
        stage = link_stage
    if stage == "connecting":
        return "check that the host is up and its SSH port reachable (a firewall that drops packets looks like this)"
    if stage == "deploying":
        return "the upload of tfcc's agent did not finish: check the host's free disk space and the network to it"
    return (f"its agent started with {host.interpreter!r} but did not answer ({stage}): check that this Python "
            "runs there and that the host is not overloaded")


# --------------------------------------------------------------------------- the check


def check(cluster: cl.Cluster, deadline: float = 20.0, ask_host_key=None, connect_timeout: float = 3.0,
          on_progress=None) -> Report:
    """Check every host of ``cluster`` and the ports between them.

    ``on_progress(done, total, what)`` is called from worker threads as hosts answer
    (``total`` is the hosts plus one step for the reachability matrix).
    """
    t0 = time.monotonic()
    progress_lock = threading.Lock()
    done_steps = [0]

    def progress(what: str) -> None:
        if on_progress is not None:
            with progress_lock:
                done_steps[0] += 1
                count = done_steps[0]
            on_progress(count, len(used) + 1, what)

    # A spare host is checked too: an elastic run moves a lost host's tasks there.
    used = [h for h in cluster.hosts if h.spare or any(t.host == h.name for t in cluster.tasks)]
    # Each step of reaching a host (SSH connect, the agent's first answer) within the deadline.
    links = {h.name: HostLink(h, ask_host_key, timeout=deadline) for h in used}
    stages = {h.name: "connecting" for h in used}
    reports = {h.name: HostReport(h.name, h.address or "localhost") for h in used}
    files, problems = workload_files(cluster)
    wanted: dict[str, tuple[str, int]] = {}
    collected = None  # the code's workdir, read and hashed once for the whole check
    if not problems and cluster.training.user_code:
        try:
            collected = workdir.collect(cluster.training, hashed=False)  # read, not hashed: no upload here
        except TfccError:
            pass  # script_problems says why
    keras = keras_choice(cluster, collected)
    if not problems:  # a file that is there: what its code says
        problems = import_problems(cluster) + script_problems(cluster, collected)
        wanted = code_imports(cluster)
    try:
        spec = environments.spec_of(cluster)
    except TfccError as exc:
        spec = None
        problems.append(Problem("cluster", exc.cause, exc.fix or ""))
    pool = ThreadPoolExecutor(max_workers=max(4, 2 * len(used)))
    try:
        bundle = make_bundle()  # hashed once, not once per host

        def survey(host: cl.Host):
            start = time.monotonic()

            def left() -> float:
                return max(0.1, deadline - (time.monotonic() - start))

            stages[host.name] = "connecting"  # then the link's own stage says how far it got
            client = links[host.name].connect(bundle)
            stages[host.name] = "probing"
            asked = time.time()
            in_env = spec is not None and (spec.required or not host.python)  # its tasks run in the environment
            probe = client.call("probe", timeout=left(), firewall=cluster.training.firewall,
                                **({"modules": sorted(wanted)} if wanted else {}),
                                **({"python_env": spec.python_env()} if in_env else {}))
            probe["_asked_at"] = asked
            if in_env and spec.required and not probe.get("env"):
                probe["env_missing"] = True
            stages[host.name] = "checking ports"
            fixed = [t.port for t in cluster.tasks if t.host == host.name and t.port != "auto"]
            ports = client.call("check_ports", ports=fixed, timeout=left())["ports"] if fixed else []
            auto = sum(1 for t in cluster.tasks if t.host == host.name and t.port == "auto")
            free = client.call("ports", count=auto, timeout=left())["ports"] if auto else []
            return probe, ports, free, time.monotonic() - start

        futures = {pool.submit(survey, h): h for h in used}
        exposed = pool.submit(exposure.public_tasks, cluster)  # names resolved meanwhile
        peers = {h.name: pool.submit(peer_addresses, cluster, h.name) for h in used}
        for future, host in futures.items():
            future.add_done_callback(lambda _f, name=host.name: progress(f"{name} answered"))
        done, _ = wait(futures, timeout=deadline)
        phases = {"survey": time.monotonic() - t0}
        auto_ports: dict[str, list] = {}
        for future, host in futures.items():
            r = reports[host.name]
            if future in done:
                error = future.exception()
                if not (isinstance(error, TfccError) and error.timed_out):
                    try:
                        r.probe, r.ports, auto_ports[host.name], r.seconds = future.result()
                        r.ok = True
                    except TfccError as exc:  # unreachable, authentication, host key, agent errors: all per host
                        r.error = str(exc)
                        problems.append(Problem(host.name, f"cannot be checked: {exc.cause}", exc.fix or "",
                                                (host.name,)))
                    except Exception as exc:  # a bug: the host's line says so and the traceback goes to the log
                        r.error = describe(exc)
                        problems.append(Problem(host.name, f"cannot be checked: {r.error}", "", (host.name,)))
                    continue
            # Still waiting at the deadline, or a step of it timed out (the connect's timeout is the deadline).
            r.error = f"no answer in {deadline:.0f} s"
            problems.append(Problem(host.name, r.error, _no_answer_fix(host, stages[host.name], links[host.name].stage),
                                    (host.name,)))
        for r in reports.values():
            for port in r.ports:
                if not port["free"]:
                    problems.append(Problem(r.name, text.port_in_use_text(port),
                                            "stop that process or give the task another port (or port = \"auto\")",
                                            (r.name,)))
        probes = {n: r.probe for n, r in reports.items() if r.probe}
        missing_env = [n for n, p in probes.items() if p.get("env_missing")]
        if missing_env:
            problems.append(Problem(missing_env[0] if len(missing_env) == 1 else "hosts",
                                    f"the cluster file's [environment] is not made on {', '.join(missing_env)} yet",
                                    "make the hosts ready (tfcc provision, or Make ready in the window)",
                                    tuple(missing_env), remedy=MAKE_READY))
        problems += consistency(cluster, probes, keras)
        problems += missing_imports(cluster, probes, wanted)
        problems += firewall_problems(cluster, probes)
        warnings = []
        try:
            left = max(0.1, deadline - (time.monotonic() - t0))
            said = exposure.exposure_problem(cluster, exposed.result(timeout=left))
        except Exception as exc:  # a resolver that hangs or fails: the check goes on without this warning
            log.info("resolving the task addresses: %s", describe(exc))
            said = None
        if said:
            public = tuple(dict.fromkeys(e.host for e in exposed.result()))
            warnings.append(Problem("cluster", *said, public))

        # Reachability on the real task ports, all to all.
        tasks = []
        taken = {n: list(p) for n, p in auto_ports.items()}
        for name, task in zip(cluster.task_names(), cluster.tasks):
            if task.port != "auto":
                port = task.port
            else:
                port = taken[task.host].pop(0) if taken.get(task.host) else None
            tasks.append({"name": name, "host": task.host,  # an evaluator serves nothing: no port to reach
                          "address": format_address(cluster.host(task.host).tf_host, port)
                          if port and task.in_cluster else None,
                          "picked": task.port == "auto"})  # a port free now: the run picks its own at start
        ok_hosts = [n for n, r in reports.items() if r.ok]
        busy = {(r.name, p["port"]) for r in reports.values() for p in r.ports if not p["free"]}
        listening = {}
        t1 = time.monotonic()
        for name in ok_hosts:
            ports = [parse_address(t["address"])[1] for t in tasks if t["host"] == name and t["address"]]
            ports = [p for p in ports if (name, p) not in busy]
            if ports:
                try:
                    listening[name] = links[name].client.call("listen", ports=ports, seconds=LISTEN_SECONDS,
                                                              timeout=deadline)["listening"]
                except TfccError as exc:  # the host went away since it answered: its problem, not the check's
                    problems.append(Problem(name, f"stopped answering during the check: {exc.cause}", exc.fix or "",
                                            (name,)))
        matrix: dict[str, dict[str, dict]] = {}
        phases["listen"] = time.monotonic() - t1
        t1 = time.monotonic()
        try:
            futures = [pool.submit(_connect_from, links[s].client, s, tasks, listening, connect_timeout)
                       for s in ok_hosts]
            for source, future in zip(ok_hosts, futures):
                try:
                    source, results = future.result()
                except TfccError as exc:
                    problems.append(Problem(source, f"stopped answering during the check: {exc.cause}",
                                            exc.fix or "", (source,)))
                    continue
                row = matrix.setdefault(source, {})
                for result in results:
                    address = format_address(result["host"], result["port"])
                    row[address] = result
                    if not result["ok"]:
                        task = next(t for t in tasks if t["address"] == address)
                        try:
                            allowed = peers[task["host"]].result(timeout=1)
                        except Exception:
                            allowed = exposure.peers_of(cluster, task["host"])
                        problems.append(reach_problem(source, task, result, allowed))
            phases["connect"] = time.monotonic() - t1
            t1 = time.monotonic()
        finally:
            for name in listening:
                try:
                    links[name].client.call("release", ports=listening[name], timeout=10)
                except Exception:
                    log.warning("could not release the listeners on %s", name)
        phases["release"] = time.monotonic() - t1
        progress("reachability tested")
        log.info("check phases: %s", phases)
        said = ""
        if cluster.training.user_code:
            flavour, why = keras
            said = f"{flavour or 'its own Keras'} ({why})"
        return Report(list(reports.values()), tasks, matrix, problems, time.monotonic() - t0, warnings, files, said)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        for link in links.values():
            link.drop()


def _connect_from(client, source: str, tasks: list[dict], listening: dict, connect_timeout: float):
    """From ``source``'s agent, connect to every other host's listening task port."""
    targets = []
    for t in tasks:
        if not t["address"] or t["host"] == source or t["host"] not in listening:
            continue
        host, port = parse_address(t["address"])
        if port in listening[t["host"]]:
            targets.append({"host": host, "port": port})
    if not targets:
        return source, []
    answer = client.call("connect", targets=targets, connect_timeout=connect_timeout, timeout=connect_timeout + 30)
    return source, answer["results"]
