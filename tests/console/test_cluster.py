"""The cluster file: reading, writing, TF_CONFIG, and every validation case with its message."""

import json

import pytest

from console import cluster as cl
from console.cluster import ClusterFileError

BASE = """
[training]
workload = "digits"

[[hosts]]
name = "a"
address = "10.0.0.1"

[[hosts]]
name = "b"
address = "10.0.0.2"
user = "me"
port = 2222

[[tasks]]
host = "a"
role = "chief"
port = 12345

[[tasks]]
host = "b"
port = 12345
gpus = [0, 1]
"""


def test_default_is_two_local_workers_on_digits():
    c = cl.default()
    assert [h.local for h in c.hosts] == [True]
    assert c.task_names() == ["worker-0", "worker-1"]
    assert c.training.workload == "digits"


def test_tf_config_names_each_hosts_address():
    c = cl.loads(BASE)
    assert c.task_names() == ["chief-0", "worker-0"]
    config = json.loads(c.tf_config(1))
    assert config == {"cluster": {"chief": ["10.0.0.1:12345"], "worker": ["10.0.0.2:12345"]},
                      "task": {"type": "worker", "index": 0}}
    assert c.tasks[1].gpus == [0, 1] and c.host("b").port == 2222


def test_auto_ports_must_be_resolved_before_tf_config():
    c = cl.default()
    with pytest.raises(ClusterFileError, match="port is \"auto\": pick free ports"):
        c.tf_config(0)
    assert json.loads(c.tf_config(0, [5000, 5001]))["cluster"]["worker"] == ["localhost:5000", "localhost:5001"]


def test_dumps_loads_round_trip(tmp_path):
    c = cl.loads(BASE)
    cl.save(c, tmp_path / "c.toml")
    assert cl.load(tmp_path / "c.toml") == c
    assert not list(tmp_path.glob(".*.tmp"))


def test_trainer_args_follow_the_training_spec():
    c = cl.loads(BASE.replace('workload = "digits"', 'workload = "synthetic"\nepochs = 2\nargs = ["--seed", "7"]'))
    args = c.training.trainer_args()
    assert args[args.index("--epochs") + 1] == "2" and args[args.index("--workload") + 1] == "synthetic"
    assert args[-2:] == ["--seed", "7"]
    assert args[args.index("--per-replica-batch") + 1] == "32" and "--global-batch" not in args
    by_global = cl.loads(BASE.replace('workload = "digits"', 'global_batch = 256')).training
    assert by_global.trainer_args()[2:4] == ["--global-batch", "256"]
    assert "--per-replica-batch" not in by_global.trainer_args()
    assert cl.loads(cl.dumps(cl.Cluster(cl.loads(BASE).hosts, cl.loads(BASE).tasks, by_global))).training == by_global


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda t: t.replace("port = 12345\ngpus", "port = 12345\nhost_typo = 1\ngpus"),
         "tasks[1] has unknown key 'host_typo'; known keys are host, role, port, gpus"),
        (lambda t: t.replace('address = "10.0.0.2"', 'address = "10.0.0.1"'),
         "tasks[1] and tasks[0] both use 10.0.0.1:12345; give each task on a host its own port"),
        (lambda t: t.replace('address = "10.0.0.1"', 'address = "localhost"'),
         "host 'a' has the loopback address 'localhost', but tasks also run on b, which cannot reach it"),
        (lambda t: t.replace("gpus = [0, 1]", 'role = "chief"'),
         "tasks[0] and tasks[1] are both chief; a cluster has at most one chief"),
        (lambda t: t.replace("port = 12345\ngpus", "port = 70000\ngpus"),
         "tasks[1].port is 70000; use a number from 1 to 65535 or \"auto\""),
        (lambda t: t.replace("port = 12345\ngpus", "port = \"any\"\ngpus"),
         "tasks[1].port is 'any'; use a number from 1 to 65535 or \"auto\""),
        (lambda t: t.replace('host = "b"', 'host = "c"'),
         "tasks[1].host 'c' is not a host of this cluster (hosts: a, b)"),
        (lambda t: t.replace('role = "chief"', 'role = "master"'),
         "tasks[0].role is 'master'; use one of chief, worker, ps, evaluator"),
        (lambda t: t.replace('name = "b"', 'name = "a"'), "hosts[1].name 'a' is used twice"),
        (lambda t: t.replace('address = "10.0.0.2"\n', ""), "hosts[1] (b) has no address"),
        (lambda t: t.replace("port = 2222", "port = \"22\""), "hosts[1].port is '22'; it must be a int"),
        (lambda t: t.replace("gpus = [0, 1]", "gpus = [\"0\"]"), "tasks[1].gpus is ['0']; list distinct GPU indices"),
        (lambda t: t.replace('workload = "digits"', 'workload = "mnist"'),
         "training.workload is 'mnist'; use one of digits, synthetic, file"),
        (lambda t: t.replace('workload = "digits"', 'workload = "digits"\nepochs = 0'),
         "training.epochs is 0; it must be from 1 to 100000"),
        (lambda t: t.replace('workload = "digits"', 'workload = "file"'),
         "training.workload is \"file\" but training.model_file is empty"),
        (lambda t: t.replace('workload = "digits"', 'global_batch = 64\nper_replica_batch = 8'),
         "[training] sets both per_replica_batch and global_batch; keep one of them"),
        (lambda t: t.replace('workload = "digits"', 'global_batch = -8'), "training.global_batch is -8; it must be from 1 to 1048576"),
        (lambda t: t + "\n[extra]\n", "has unknown section 'extra'"),
        (lambda t: t.replace("[training]", "[training"), "is not valid TOML"),
        (lambda t: t.split("[[tasks]]")[0], "the cluster has no tasks; add a [[tasks]] table"),
    ],
    ids=["unknown-key", "duplicate-host-port", "loopback-with-remote", "two-chiefs", "port-range", "port-word",
         "unknown-host", "bad-role", "duplicate-host-name", "no-address", "ssh-port-type", "gpus-type",
         "bad-workload", "zero-epochs", "file-without-model", "both-batches", "negative-global-batch", "unknown-section", "bad-toml", "no-tasks"],
)
def test_validation_names_the_field_and_the_fix(edit, expected):
    with pytest.raises(ClusterFileError) as err:
        cl.loads(edit(BASE))
    assert expected in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(ClusterFileError, match="does not exist; check the path"):
        cl.load(tmp_path / "nope.toml")


def test_local_host_defaults_to_the_consoles_own_interpreter():
    """A fresh machine's PATH python3 may lack TensorFlow: the default cluster must not depend on it."""
    import sys

    host = cl.default().hosts[0]
    assert host.python == "" and host.interpreter == sys.executable
    assert cl.Host(name="r", address="10.0.0.9").interpreter == "python3"
    assert cl.Host(name="r", address="10.0.0.9", python="/opt/py/bin/python").interpreter == "/opt/py/bin/python"


FOUR_WORKERS = '[[hosts]]\nname = "a"\nlocal = true\n' + '[[tasks]]\nhost = "a"\n' * 4 + "[training]\n"


@pytest.mark.parametrize("training, expected", [
    ("elastic = 5", "training.elastic is 5, but the cluster has 4 training tasks (chief and workers); set it to the "
                    "fewest the run may go on with, 1 to 4, or 0 to restart only on every host"),
    ("elastic = -1", "training.elastic is -1"),
    ("elastic = 2", "the global batch 128 cannot be kept on 3 training tasks (training.elastic is 2): it must split "
                    "evenly over their replicas; make it a multiple of 12 (training.global_batch = 132), or raise "
                    "elastic to 4 (it then never goes on with fewer tasks)"),
    ("elastic = 1\nglobal_batch = 40", "the global batch 40 cannot be kept on 3 training tasks (training.elastic is "
                                       "1): it must split evenly over their replicas; make it a multiple of 12 "
                                       "(training.global_batch = 36), or raise elastic to 4"),
], ids=["more-than-tasks", "negative", "batch-does-not-split", "global-batch"])
def test_elastic_says_what_cannot_be_kept_and_what_to_do(training, expected):
    with pytest.raises(ClusterFileError) as err:
        cl.loads(FOUR_WORKERS + training)
    assert expected in str(err.value)


def test_an_elastic_run_that_can_keep_its_batch_is_taken_and_tells_the_trainer():
    c = cl.loads(FOUR_WORKERS + "elastic = 2\nglobal_batch = 120")
    assert "--elastic" in c.training.trainer_args()
    assert "--elastic" not in cl.default().training.trainer_args()
    assert cl.loads(cl.dumps(c)) == c


def test_the_tf_config_of_an_elastic_run_that_shrank_counts_its_members_only():
    c = cl.loads(FOUR_WORKERS + "elastic = 2\nglobal_batch = 120")
    ports = [5000, 5001, 5002, 5003]
    config = json.loads(c.tf_config(3, ports, members={0, 3}))
    assert config == {"cluster": {"worker": ["localhost:5000", "localhost:5003"]}, "task": {"type": "worker", "index": 1}}
    assert c.tf_config(1, ports) == c.tf_config(1, ports, members={0, 1, 2, 3})
    with pytest.raises(ValueError, match="not a member"):
        c.tf_config(1, ports, members={0, 3})
    # The chief's task left: the workers left are the cluster, worker 0 of them leads (TensorFlow's rule).
    led = cl.loads(FOUR_WORKERS.replace('host = "a"\n', 'host = "a"\nrole = "chief"\n', 1) + "elastic = 2\n"
                   "global_batch = 120")
    assert json.loads(led.tf_config(2, ports, members={1, 2})) == {
        "cluster": {"worker": ["localhost:5001", "localhost:5002"]}, "task": {"type": "worker", "index": 1}}


PS_CLUSTER = ('[[hosts]]\nname = "a"\naddress = "10.0.0.1"\n[[hosts]]\nname = "b"\naddress = "10.0.0.2"\n'
              '[[hosts]]\nname = "c"\naddress = "10.0.0.3"\nspare = true\n'
              '[[tasks]]\nhost = "a"\nrole = "chief"\n[[tasks]]\nhost = "a"\n[[tasks]]\nhost = "b"\nrole = "ps"\n')


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t + "[training]\nelastic = 1\n", None),
    (lambda t: t, "hosts[2] (c) is a spare, which only an elastic run uses: set training.elastic"),
    (lambda t: t.replace("spare = true\n", "") + "[training]\nelastic = 1\n", None),  # its spare used
    (lambda t: t.replace('host = "b"\nrole = "ps"', 'host = "c"\nrole = "ps"') + "[training]\nelastic = 1\n",
     "hosts[2] (c) is a spare, but tasks[2] runs on it; a spare runs no task until a host is lost"),
], ids=["ps-with-a-spare", "spare-without-elastic", "ps-elastic-spare-used", "busy-spare"])
def test_spare_hosts_serve_an_elastic_run_and_run_nothing(edit, expected):
    if expected is None:
        c = cl.loads(edit(PS_CLUSTER))
        assert cl.loads(cl.dumps(c)) == c
        return
    with pytest.raises(ClusterFileError) as err:
        cl.loads(edit(PS_CLUSTER))
    assert expected in str(err.value)


# --------------------------------------------------------------------------- a Slurm cluster

SLURM = """
[training]
workload = "digits"
epochs = 2

[slurm]
login = "login.hpc.example"
partition = "gpu"
nodes = 3
tasks_per_node = 2
gpus_per_task = 1
time = "2:00:00"
account = "lab"
qos = "normal"
"""


def test_a_slurm_cluster_reads_back_unchanged_and_its_placement_plans_slurms_tasks():
    cluster = cl.loads(SLURM)
    assert cl.loads(cl.dumps(cluster)) == cluster
    assert "[[hosts]]" not in cl.dumps(cluster) and "[slurm]" in cl.dumps(cluster)
    s = cluster.slurm
    assert (s.login, s.partition, s.nodes, s.tasks_per_node, s.gpus_per_task, s.time, s.account, s.qos) == (
        "login.hpc.example", "gpu", 3, 2, 1, "2:00:00", "lab", "normal")
    # No hosts: Slurm picks the nodes. Its placement plans tasks_per_node tasks on each node, in rank order (the
    # trainer's Slurm mode places ranks the same way).
    from console.run.placement import placement_for
    assert cluster.hosts == [] and [t.host for t in cluster.tasks] == [""] * 6
    assert placement_for(cluster).machines() == {"slurm-node-0": [0, 1], "slurm-node-1": [2, 3],
                                                 "slurm-node-2": [4, 5]}
    assert {t.role for t in cluster.tasks} == {"worker"} and all(t.gpus == [0] for t in cluster.tasks)


def test_a_slurm_cluster_with_parameter_servers_gives_the_ranks_their_roles():
    cluster = cl.loads(SLURM.replace("qos = \"normal\"", "parameter_servers = 2"))
    assert cluster.training.strategy == "parameter_server"
    assert [t.role for t in cluster.tasks] == ["chief", "ps", "ps", "worker", "worker", "worker"]
    assert cluster.task_names() == ["chief-0", "ps-0", "ps-1", "worker-0", "worker-1", "worker-2"]


@pytest.mark.parametrize("change, message", [
    (lambda t: t + '[[hosts]]\nname = "a"\naddress = "10.0.0.1"\n',
     "has [slurm] and also [[hosts]] or [[tasks]]; Slurm picks the nodes"),
    (lambda t: t.replace('login = "login.hpc.example"', 'login = "-oProxyCommand=x"'), "slurm.login is '-oProxyCommand=x'"),
    (lambda t: t.replace("nodes = 3", "nodes = 0"), "slurm.nodes is 0; it must be from 1 to"),
    (lambda t: t.replace('time = "2:00:00"', 'time = "two hours"'), "slurm.time is 'two hours', which sbatch does not read"),
    (lambda t: t.replace('partition = "gpu"', 'partition = "gpu; rm -rf ~"'), "slurm.partition is 'gpu; rm -rf ~'"),
    (lambda t: t.replace('account = "lab"', 'account = "a\\nb"'), "slurm.account"),
    (lambda t: t.replace("nodes = 3", "nodes = 1").replace("tasks_per_node = 2", "tasks_per_node = 1")
     .replace('qos = "normal"', "parameter_servers = 1"), "leave no worker beside the chief and 1 ps"),
    (lambda t: t.replace('qos = "normal"', 'queue = "x"'), "slurm has unknown key 'queue'"),
])
def test_a_bad_slurm_section_is_refused_with_what_to_do(change, message):
    with pytest.raises(ClusterFileError, match=None) as caught:
        cl.loads(change(SLURM))
    assert message in str(caught.value)


def test_the_slurm_export_asks_for_the_cluster_files_partition_account_qos_and_gpus():
    from console import export

    cluster = cl.loads(SLURM)
    text = export.render("slurm", cluster, export.slurm_options(cluster)).files["tfcc.sbatch"]
    for line in ("#SBATCH --nodes=3", "#SBATCH --ntasks=6", "#SBATCH --ntasks-per-node=2", "#SBATCH --gres=gpu:2",
                 "#SBATCH --time=2:00:00", "#SBATCH --partition=gpu", "#SBATCH --account=lab", "#SBATCH --qos=normal"):
        assert line + "\n" in text


@pytest.mark.parametrize("setting, words", [("firewall = true", "training.firewall is for hosts of your own"),
                                            ("elastic = 1", "training.elastic is for hosts of your own"),
                                            ('secret_env = ["API_KEY"]', "cannot reach a Slurm job's tasks")])
def test_what_only_hosts_of_ones_own_can_do_is_refused_for_a_slurm_cluster(setting, words):
    with pytest.raises(ClusterFileError) as caught:
        cl.loads(SLURM.replace('epochs = 2', f'epochs = 2\n{setting}'))
    assert words in str(caught.value)
