"""Runtime diagnosis: every signature on a realistic stderr tail, the exit-status fallbacks, and noise.

The key lines are TensorFlow 2.21 / tf-keras 2.21 / NCCL / CUDA message text as it is (read in the
installed wheel and their sources, or seen in this project's runs); the lines around them are what
such logs carry, including the start-up noise of every CPU host. No TensorFlow is imported.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from console import cluster as cl
from console import diagnosis
from console.run.runner import Run
from console.run.session import RunSession
from console.states import SessionKind
from console.diagnosis import Diagnosis, diagnose

SITE = "/home/ml/.venv/lib/python3.11/site-packages"

# What a CPU host with the full TensorFlow wheel prints as it starts (tfcc's own runs on this machine).
CPU_START = """\
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1795453057.219082   24689 port.cc:153] oneDNN custom operations are on. You may see slightly \
different numerical results due to floating-point round-off errors from different computation orders. \
To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.
I0000 00:00:1795453057.219711   24689 cudart_stub.cc:31] Could not find cuda drivers on your machine, \
GPU will not be used.
I0000 00:00:1795457250.504312   24689 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use \
available CPU instructions in performance-critical operations.
To enable the following instructions: AVX2 AVX512F AVX512_VNNI AVX512_BF16 FMA, in other operations, \
rebuild TensorFlow with the appropriate compiler flags.
E0000 00:00:1795453060.867228   24689 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: \
Failed call to cuInit: UNKNOWN ERROR (303)
"""

GPU_START = """\
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1795460101.118823    4242 port.cc:153] oneDNN custom operations are on. You may see slightly \
different numerical results due to floating-point round-off errors from different computation orders. \
To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.
I0000 00:00:1795460104.532210    4242 gpu_device.cc:2020] Created device /job:worker/replica:0/task:0/device:GPU:0 \
with 78643 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:18:00.0, compute capability: 9.0
"""

# tf.data's warning under autoshard AUTO on in-memory data: healthy, and it names "unshardable".
AUTO_SHARD_WARNING = """\
W0000 00:00:1795456120.004511     301 auto_shard.cc:558] AUTO sharding policy will apply DATA sharding policy \
as it failed to apply FILE sharding policy because of the following reason: Found an unshardable source \
dataset: name: "TensorSliceDataset/_2"
"""


def traceback(error: str, *frames: str) -> str:
    """A Python traceback ending in ``error``; a frame is "path:line:function", under SITE unless absolute."""
    lines = ["Traceback (most recent call last):"]
    for frame in frames:
        path, line, function = frame.rsplit(":", 2)
        lines.append(f'  File "{path if path.startswith("/") else f"{SITE}/{path}"}", line {line}, in {function}')
    return "\n".join([*lines, error]) + "\n"


def graph_error(kind: str, node: str, *message: str) -> str:
    """TensorFlow's "Graph execution error:" exception raised out of tf-keras's fit."""
    return traceback(
        f"tensorflow.python.framework.errors_impl.{kind}: Graph execution error:\n\n"
        f"Detected at node {node} defined at (most recent call last):\n"
        '  File "/home/ml/train.py", line 57, in <module>\n\n'
        f'  File "{SITE}/tf_keras/src/engine/training.py", line 1804, in fit\n\n'
        + "\n".join(message) + f"\n\t [[{{{{node {node}}}}}]] [Op:__inference_train_function_1777]",
        "/home/ml/train.py:57:<module>", "tf_keras/src/utils/traceback_utils.py:70:error_handler",
    )


FIT_FRAMES = ("/home/ml/train.py:57:<module>", "tf_keras/src/utils/traceback_utils.py:70:error_handler")
STRATEGY_FRAMES = ("/home/ml/train.py:12:<module>",
                   "tensorflow/python/distribute/collective_all_reduce_strategy.py:187:__init__",
                   "tensorflow/python/distribute/collective_all_reduce_strategy.py:602:_initialize_multi_worker")

# A survivor of a 2-worker digits run whose peer (worker-0) was killed: as tfcc's trainer wrote it.
PEER_LOST = CPU_START + AUTO_SHARD_WARNING + """\
E0000 00:00:1795456723.051552    1708 ring_alg.cc:291] Aborting RingReduce with UNAVAILABLE: Socket closed
Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling \
/tensorflow.WorkerService/RecvBuf:
:UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"Socket closed"}
E0000 00:00:1795456723.051609    1708 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort \
UNAVAILABLE: Socket closed
""" + graph_error("UnavailableError", "CollectiveReduceV2_3",
                  "Collective ops is aborted by: Socket closed",
                  "The error could be from a previous operation. Restart your program to reset.") + """\
tfcc-trainer: error: lost contact with another task of the cluster (Graph execution error:); \
restart every task of the run
"""

# The survivor of a frozen (SIGSTOPped) worker, as tfcc's trainer wrote it in a run here.
REDUCE_ABORTED = ("{{function_node __wrapped__CollectiveReduceV2_Nordering_token_1_device_/job:worker/replica:0/"
                  "task:0/device:CPU:0}} Collective ops is aborted by: ")
HEARTBEAT_LOST = CPU_START + traceback(
    "tensorflow.python.framework.errors_impl.UnavailableError: " + REDUCE_ABORTED
    + "Error reported from /job:worker/task:1: The following tasks are unhealthy (stopped sending heartbeats):\n"
    "/job:worker/replica:0/task:1\nThe tasks have crashed. Check the task logs for an earlier error, "
    "or scheduler events (e.g. preemption, eviction) to debug further.\nThe error could be from a previous "
    "operation. Restart your program to reset. [Op:CollectiveReduceV2] name: ",
    "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/pool.py:48:mapstar")

# The frozen worker itself, which went on beside its peer's next attempt (the same run).
OUT_OF_STEP = CPU_START + traceback(
    "tensorflow.python.framework.errors_impl.InternalError: in user code:\n\n"
    f'    File "{SITE}/tf_keras/src/engine/training.py", line 1398, in train_function  *\n'
    "        return step_function(self, iterator)\n"
    f'    File "{SITE}/tf_keras/src/engine/base_layer_utils.py", line 137, in make_variable\n'
    "        return tf1.Variable(\n\n"
    "    InternalError: {{function_node __wrapped__CollectiveBcastRecv_device_/job:worker/replica:0/task:1/"
    "device:CPU:0}} "
    "Collective ops is aborted by: Collective instance 134 expected type 1 and data_type 9 but got type 1 and "
    "data_type 1\n"
    "    Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling "
    "/tensorflow.WorkerService/CompleteInstance:\n"
    "    The error could be from a previous operation. Restart your program to reset. [Op:CollectiveBcastRecv]\n",
    *FIT_FRAMES) + "tfcc-trainer: error: InternalError: in user code:\n"

# Run here: MultiWorkerMirroredStrategy() with the task's port held by another socket.
PORT_IN_USE = CPU_START + """\
E0000 00:00:1795457252.561349   14777 add_port.cc:83] Failed to add port to server: No address added out of \
total 1 resolved for '0.0.0.0:36071'
E0000 00:00:1795457252.563854   14777 grpc_server_lib.cc:618] UNKNOWN: Could not start gRPC server
E0000 00:00:1795457252.564497   14777 context_distributed_manager.cc:1061] Could not start gRPC server
""" + traceback("tensorflow.python.framework.errors_impl.UnknownError: Could not start gRPC server",
                *STRATEGY_FRAMES, "tensorflow/python/eager/context.py:745:ensure_initialized")

INCARNATION = CPU_START + traceback(
    "tensorflow.python.framework.errors_impl.FailedPreconditionError: Device /job:worker/replica:0/task:1/device:CPU:0 "
    "current incarnation doesn't match with one in the group. This usually means this worker has restarted but the "
    "collective leader hasn't, or this worker connects to a wrong cluster.\n"
    "Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling "
    "/tensorflow.WorkerService/CompleteGroup:", *FIT_FRAMES)

GROUP_SIZE = GPU_START + graph_error(
    "InternalError", "CollectiveReduceV2",
    "Device /job:worker/replica:0/task:1/device:GPU:0 is joining a group with size2, but that group has size 4 "
    "(group_key=1)")

SHAPE_MISMATCH = GPU_START + graph_error(
    "InvalidArgumentError", "CollectiveReduceV2_4",
    "Shape mismatch in the collective instance 100. Op at device /job:worker/replica:0/task:1/device:GPU:0 "
    "expected shape [416202] but another member in the group expected shape [1630346]. This is likely due to "
    "different input shapes at different members of the collective op.")

CONFIGURED_LATE = CPU_START + traceback(
    "RuntimeError: Collective ops must be configured at program startup", *STRATEGY_FRAMES,
    "tensorflow/python/eager/context.py:1083:configure_collective_ops")

# Keras 3's fit under MultiWorkerMirroredStrategy (ray-project/ray#47464, keras-team/keras#20585).
KERAS3 = CPU_START + traceback(
    "ValueError: Attempt to convert a value (PerReplica:{\n"
    "  0: <tf.Tensor: shape=(1,), dtype=int64, numpy=array([1])>\n"
    "}) with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) to a Tensor.",
    "/home/ml/train.py:61:<module>", "keras/src/utils/traceback_utils.py:122:error_handler",
    "keras/src/backend/tensorflow/trainer.py:377:fit")

KERAS_MIXED = CPU_START + traceback(
    "TypeError: The added layer must be an instance of class Layer. Received: "
    "layer=<keras.src.layers.core.dense.Dense object at 0x7f3a2c1d5e10> of type "
    "<class 'keras.src.layers.core.dense.Dense'>.",
    "/home/ml/model.py:8:build", "tf_keras/src/engine/sequential.py:177:add")

RAN_OUT = CPU_START + """\
Epoch 2/5
WARNING:tensorflow:Your input ran out of data; interrupting training. Make sure that your dataset or generator \
can generate at least `steps_per_epoch * epochs` batches (in this case, 60 batches). You may need to use the \
repeat() function when building your dataset.
"""

UNSHARDABLE = CPU_START + traceback(
    'tensorflow.python.framework.errors_impl.NotFoundError: Found an unshardable source dataset: '
    'name: "TensorSliceDataset/_2"\nop: "TensorSliceDataset"', *FIT_FRAMES)

GPU_OOM = GPU_START + """\
W0000 00:00:1795460220.512013    4242 bfc_allocator.cc:501] Allocator (GPU_0_bfc) ran out of memory trying to \
allocate 3.06GiB (rounded to 3288334336)requested by op sequential/conv2d/Conv2D
W0000 00:00:1795460220.530110    4242 op_kernel.cc:1857] OP_REQUIRES failed at conv_ops_impl.h:1199 : \
RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[256,64,112,112] and type float on \
/job:worker/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc
""" + graph_error(
    "ResourceExhaustedError", "sequential/conv2d/Conv2D",
    "OOM when allocating tensor with shape[256,64,112,112] and type float on "
    "/job:worker/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
    "Hint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom "
    "to RunOptions for current allocation info. This isn't available when running in Eager mode.")

DISK_FULL = CPU_START + traceback(
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: /home/ml/.tfcc/runs/r1/worker-0/backup/"
    "chief/ckpt-7_temp/part-00000-of-00001.data-00000-of-00001.tempstate8734; No space left on device",
    *FIT_FRAMES, "tf_keras/src/callbacks.py:1934:on_train_batch_end")

NCCL_FAILED = GPU_START + """\
gpu-a:4242:4390 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
gpu-a:4242:4390 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.2<41237> failed : \
Software caused connection abort
gpu-a:4242:4390 [0] NCCL INFO bootstrap.cc:85 -> 2
""" + graph_error("InternalError", "CollectiveReduceV2",
                  "NCCL: unhandled system error (run with NCCL_DEBUG=INFO for details). "
                  "Set NCCL_DEBUG=WARN for detail.")

NCCL_PEER = GPU_START + graph_error(
    "InternalError", "CollectiveReduceV2_2",
    "NCCL: remote process exited or there was a network error. Set NCCL_DEBUG=WARN for detail.")

DRIVER_TOO_OLD = traceback(
    "tensorflow.python.framework.errors_impl.InternalError: cudaGetDevice() failed. Status: CUDA driver version "
    "is insufficient for CUDA runtime version", "/home/ml/train.py:20:<module>",
    "tensorflow/python/eager/context.py:2407:_initialize_physical_devices")

DRIVER_MISMATCH = """\
E0000 00:00:1795461007.772381    5120 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: \
Failed call to cuInit: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: system has unsupported display driver / cuda driver \
combination
I0000 00:00:1795461007.772510    5120 cuda_diagnostics.cc:160] kernel reported version is: 470.182.3
"""

GPU_LIBS = """\
W0000 00:00:1795461100.201554    6001 dso_loader.cc:73] Could not load dynamic library 'libcudnn.so.9'; dlerror: \
libcudnn.so.9: cannot open shared object file: No such file or directory
W0000 00:00:1795461100.201870    6001 gpu_device.cc:2344] Cannot dlopen some GPU libraries. Please make sure the \
missing libraries mentioned above are installed properly if you would like to use GPU. Follow the guide at \
https://www.tensorflow.org/install/gpu for how to download and setup the required libraries for your platform.
Skipping registering GPU devices...
"""

NO_AVX = """\
F0000 00:00:1795462000.100002    7007 cpu_feature_guard.cc:93] The TensorFlow library was compiled to use AVX \
instructions, but these aren't available on your machine.
Aborted (core dumped)
"""

NO_TF_KERAS = CPU_START + """\
WARNING:tensorflow:Your environment has TF_USE_LEGACY_KERAS set to True, but you do not have the tf_keras package \
installed. You must install it in order to use the legacy tf.keras. Install it via: `pip install tf_keras`
""" + traceback("ImportError: Keras cannot be imported. Check that it is installed.",
                "/home/ml/train.py:30:<module>", "tensorflow/python/util/lazy_loader.py:210:__getattr__")

NO_MODULE = CPU_START + traceback("ModuleNotFoundError: No module named 'sklearn'", "/home/ml/data.py:3:<module>")

BARRIER = CPU_START + traceback(
    "tensorflow.python.framework.errors_impl.DeadlineExceededError: Barrier timed out. "
    "Id: [Init]Wait_for_all_tasks_to_register. This usually happens because a task triggered the barrier too early "
    "or too slowly. Please look at the task logs (both timed out and first task) to debug further.\n"
    "The first task at the barrier: /job:worker/replica:0/task:0. Some timed out task names:\n"
    "/job:worker/replica:0/task:2", *STRATEGY_FRAMES)

SHELL_KILLED = CPU_START + "Epoch 3/10\n/home/ml/run.sh: line 4: 31337 Killed                  python train.py\n"


# stderr tail, exit status, the trainer's error, then what the diagnosis must be and say.
KERAS2_ON_3 = """Traceback (most recent call last):
  File "/h/runs/r/worker-0/work/trainer/task.py", line 48, in <module>
    keras_model.save(export_dir)
ValueError: Invalid filepath extension for saving. Please add either a `.keras` extension for the native Keras format (recommended) or a `.h5` extension. Received: filepath=out/model.
"""
KERAS3_ON_2 = """Traceback (most recent call last):
  File "/h/runs/r/worker-0/work/main.py", line 9, in <module>
    x = tf.keras.ops.sum(y)
AttributeError: module 'tf_keras.api._v2.keras' has no attribute 'ops'
"""


CASES = [
    pytest.param(PEER_LOST, 1, "lost contact with another task of the cluster (Graph execution error:); restart "
                 "every task of the run", "peer-lost", True, ("worker-0", "restarts every task"), id="peer-lost"),
    pytest.param(HEARTBEAT_LOST, 1, "lost contact with another task of the cluster (" + REDUCE_ABORTED + "Error "
                 "reported from /job:worker/task:1: The following tasks are unhealthy (stopped sending heartbeats):); "
                 "restart every task of the run", "heartbeat-lost", True, ("worker-1", "sent no heartbeat"),
                 id="heartbeat"),
    pytest.param(PORT_IN_USE, 1, None, "port-in-use", False, ("36071", 'port = "auto"'), id="port-tf"),
    pytest.param("", 2, "port 23456 of task worker:1 (10.0.0.2:23456) is already in use on this host (Address "
                 "already in use); stop the process that holds it or give this task another port",
                 "port-in-use", False, ("23456", "`tfcc check` names the process"), id="port-trainer"),
    pytest.param(OUT_OF_STEP, 1, None, "collective-out-of-step", True, ("out of step", "restart every task together"),
                 id="out-of-step"),
    pytest.param(INCARNATION, 1, None, "incarnation-mismatch", True, ("never one alone",), id="incarnation"),
    pytest.param(GROUP_SIZE, 1, None, "collective-mismatch", False, ("2 replicas", "has 4", "same number of GPUs"),
                 id="group-size"),
    pytest.param(SHAPE_MISMATCH, 1, None, "collective-mismatch", False, ("different model code",), id="shape"),
    pytest.param(CONFIGURED_LATE, 1, None, "collective-config-late", False, ("right after importing TensorFlow",),
                 id="configured-late"),
    pytest.param(KERAS3, 1, None, "keras3-multiworker", False,
                 ("`import tf_keras as keras`", "TF_USE_LEGACY_KERAS=1 before importing TensorFlow"), id="keras3"),
    pytest.param(KERAS_MIXED, 1, None, "keras-mixed", False, ("`import tf_keras as keras`", "no plain `import keras`"),
                 id="keras-mixed"),
    pytest.param(KERAS2_ON_3, 1, None, "keras2-code-on-keras3", False, ('keras = "tf-keras"',), id="keras2-on-keras3"),
    pytest.param(KERAS3_ON_2, 1, None, "keras3-code-on-tf-keras", False, ('keras = "keras3"',), id="keras3-on-tf-keras"),
    pytest.param(RAN_OUT, 1, None, "input-exhausted", False, ("`.repeat()`", "steps_per_epoch", "60 were needed"),
                 id="ran-out"),
    pytest.param(RAN_OUT, -9, None, "input-exhausted", False, (".repeat()",), id="ran-out-then-killed"),
    pytest.param(UNSHARDABLE, 1, "--autoshard file needs a dataset read from files (e.g. TFRecords); use "
                 "--autoshard auto or data", "autoshard-file", False, ('"auto" or "data"',), id="autoshard"),
    pytest.param(GPU_OOM, 1, None, "out-of-memory", False, ("on GPU:0", "lower the batch per replica"), id="oom"),
    pytest.param(DISK_FULL, 1, None, "disk-full", False, ("free space", "tfcc resume RUN"), id="disk-full"),
    pytest.param(NCCL_FAILED, 1, None, "nccl-error", False,
                 (": unhandled system error", "NCCL_DEBUG=WARN", 'communication to "ring"'), id="nccl"),
    pytest.param(NCCL_PEER, 1, None, "nccl-peer-lost", True, ("NCCL lost a peer", "restarts every task"),
                 id="nccl-peer"),
    pytest.param(DRIVER_TOO_OLD, 1, None, "cuda-driver-too-old", False, ("NVIDIA driver", "nvidia-smi"),
                 id="driver-insufficient"),
    pytest.param(GPU_LIBS, None, None, "gpu-libs-missing", False, ("tensorflow[and-cuda]", "libcudnn.so.9"),
                 id="gpu-libs"),
    pytest.param(NO_AVX, -6, None, "cpu-lacks-avx", False, ("AVX", "/proc/cpuinfo"), id="no-avx"),
    pytest.param(NO_TF_KERAS, 1, None, "tf-keras-missing", False, ("pip install 'tf-keras==2.21.*'",),
                 id="no-tf-keras"),
    pytest.param(NO_MODULE, 1, None, "module-missing", False, ("'sklearn'", "pip install scikit-learn"),
                 id="no-module"),
    pytest.param(BARRIER, 1, None, "barrier-timeout", True, ("late: worker-2", "`tfcc check`"), id="barrier"),
    pytest.param(SHELL_KILLED, 137, None, "host-oom", True, ("out-of-memory killer", "batch per replica"),
                 id="oom-killed-137"),
    pytest.param(SHELL_KILLED, -9, None, "host-oom", True, ("out-of-memory killer",), id="oom-killed-sigkill"),
]


@pytest.mark.parametrize("stderr, returncode, error, name, retryable, says", CASES)
def test_signature(stderr, returncode, error, name, retryable, says):
    found = diagnose(stderr, returncode, error)
    assert found is not None and found.name == name, found
    assert found.retryable is retryable
    assert found.cause and found.fix and "{" not in found.cause + found.fix  # every field filled in
    for words in says:
        assert words in found.cause + " " + found.fix


def test_every_signature_has_its_case():
    names = {s.name for s in diagnosis._SIGNATURES}
    covered = {case.values[3] for case in CASES}
    assert len(names) >= 15 and names <= covered, names - covered


def test_a_clean_exit_is_diagnosed_only_when_it_still_matters():
    assert diagnose(CPU_START, 0) is None
    assert diagnose(PEER_LOST, 0) is None  # a teardown message of a finished run is no failure
    assert diagnose(RAN_OUT, 0).name == "input-exhausted"  # training stopped early
    assert diagnose(GPU_LIBS, 0).name == "gpu-libs-missing"  # it trained without its GPUs


def test_cuinit_is_noise_unless_it_names_a_driver_mismatch():
    for returncode in (1, None, 0):
        assert diagnose(CPU_START, returncode) is None
    assert diagnose(CPU_START + PEER_LOST, 1).name == "peer-lost"
    assert diagnose(DRIVER_MISMATCH, 0).name == "cuda-driver-too-old"


def test_the_cause_outranks_what_it_brings_along():
    # A GPU host without its libraries whose peer was killed: the lost peer ended it, and a restart can help.
    assert diagnose(GPU_LIBS + PEER_LOST, 1).name == "peer-lost"
    # A user's error after healthy allocator warnings and tf.data's AUTO notice.
    healthy = ("W0000 00:00:1795460220.512013    4242 bfc_allocator.cc:501] Allocator (GPU_0_bfc) ran out of "
               "memory trying to allocate 2.20GiB with freed_by_count=0. The caller indicates that this is not a "
               "failure, but this may mean that there could be performance gains if more memory were available.\n")
    found = diagnose(GPU_START + healthy + AUTO_SHARD_WARNING + traceback("ValueError: boom at step 10",
                                                                          *FIT_FRAMES), 1)
    assert found == Diagnosis("training-error", "error in the training code: ValueError: boom at step 10",
                              found.fix, False)
    # The disk filled while saving: ResourceExhaustedError, but not memory.
    assert diagnose(DISK_FULL, 1).name == "disk-full"
    # A peer's death seen through NCCL is a lost peer, not an NCCL set-up problem.
    assert diagnose(NCCL_FAILED.replace("NCCL: unhandled system error", "NCCL: remote process exited or there "
                                        "was a network error"), 1).name == "nccl-peer-lost"


@pytest.mark.parametrize("returncode, signal_name", [(-9, "SIGKILL"), (-15, "SIGTERM"), (139, "SIGSEGV"),
                                                     (-6, "SIGABRT")])
def test_a_signal_is_retryable_and_named(returncode, signal_name):
    found = diagnose(CPU_START + "Epoch 3/10\n", returncode)
    assert found.name == "killed-by-signal" and found.retryable
    assert f"killed by {signal_name}" in found.cause and "restarts every task" in found.fix


def test_exit_137_without_a_word_is_the_oom_killer_likely():
    found = diagnose(CPU_START, 137)
    assert found.name == "host-oom" and found.retryable and "most likely" in found.cause


def test_a_traceback_is_a_permanent_error_in_the_training_code():
    found = diagnose(CPU_START + traceback("KeyError: 'label'", "/home/ml/train.py:40:<module>"), 1)
    assert found.name == "training-error" and not found.retryable
    assert found.cause == "error in the training code: KeyError: 'label'" and "tfcc logs RUN TASK" in found.fix
    # TensorFlow's "Graph execution error:" is named by the message after the frames of "Detected at node".
    graph = graph_error("InvalidArgumentError", "sparse_categorical_crossentropy/SparseSoftmaxCrossEntropyWithLogits",
                        "logits and labels must have the same first dimension, got logits shape [32,10] and "
                        "labels shape [64]")
    assert diagnose(graph, 1).cause == ("error in the training code: InvalidArgumentError: logits and labels must "
                                        "have the same first dimension, got logits shape [32,10] and labels shape [64]")
    # An eager op's error loses its "{{function_node …}}" and "[Op:…]" wrapping.
    eager = traceback("tensorflow.python.framework.errors_impl.InvalidArgumentError: {{function_node __wrapped__"
                      "Reshape_device_/job:localhost/replica:0/task:0/device:CPU:0}} Input to reshape is a tensor with "
                      "10 values, but the requested shape has 12 [Op:Reshape] name: ", "/home/ml/train.py:33:<module>")
    assert diagnose(eager, 1).cause == ("error in the training code: InvalidArgumentError: Input to reshape is a "
                                        "tensor with 10 values, but the requested shape has 12")
    # Autograph's "in user code:" is named by the error inside it.
    autograph = traceback("ValueError: in user code:\n\n"
                          '    File "/home/ml/train.py", line 21, in train_step  *\n'
                          "        raise ValueError(f\"bad labels at step {step}\")\n\n"
                          "    ValueError: bad labels at step 10\n", *FIT_FRAMES)
    assert diagnose(autograph, 1).cause == "error in the training code: ValueError: bad labels at step 10"


def test_the_trainers_own_refusal_is_kept_with_its_fix():
    line = ("TF_CONFIG has no \"task\" object; add {\"type\": \"worker\", \"index\": N} for this process")
    found = diagnose(CPU_START + f"tfcc-trainer: error: {line}\n", 2)
    assert found == Diagnosis("bad-input", "TF_CONFIG has no \"task\" object",
                              "add {\"type\": \"worker\", \"index\": N} for this process", False)
    assert diagnose("", 2, line) == found


class Code:
    """What the console knows of a user's code (``diagnosis.CodeFacts``), as told."""

    def __init__(self, excluded=None, runs=None):
        self.excluded, self.runs, self.asked = excluded or {}, runs or {}, []

    def not_shipped(self, module):
        self.asked.append(module)
        return self.excluded.get(module)

    def run_as_module(self, missing):
        return self.runs.get(missing)

    def local_file(self, rel):
        return None


def test_a_missing_module_that_the_workdir_excluded_is_said_as_such_and_others_keep_the_pip_advice():
    not_shipped = Code({"sklearn": "sklearn.py is excluded by 'sklearn.py' in .tfccignore (line 1)"})
    asked = not_shipped.asked
    found = diagnose(NO_MODULE, 1, code=not_shipped)
    assert found.name == "module-not-shipped" and not found.retryable and asked == ["sklearn"]
    assert found.cause == ("the training code imports the module 'sklearn', which is in your workdir on this machine "
                           "but was not shipped to the hosts: sklearn.py is excluded by 'sklearn.py' in .tfccignore "
                           "(line 1)")
    assert found.fix.startswith("remove that exclusion")
    other = NO_MODULE.replace("'sklearn'", "'mnist_setup'")
    assert diagnose(other, 1, code=not_shipped) == diagnose(other, 1)
    assert "pip install mnist_setup" in diagnose(other, 1, code=not_shipped).fix
    assert diagnose(PEER_LOST, 1, code=not_shipped).name == "peer-lost"
    assert asked == ["sklearn", "mnist_setup", "mnist_setup"]  # asked only of a missing module


RELATIVE = """Traceback (most recent call last):
  File "/h/runs/r/worker-0/work/trainer/task.py", line 3, in <module>
    from . import model
ImportError: attempted relative import with no known parent package
"""


def test_a_relative_import_in_a_script_says_run_it_as_a_module_never_fix_the_code():
    fix = 'run it as a module: module = "trainer.task" in [training] in place of script (...)'
    found = diagnose(RELATIVE, 1, code=Code(runs={None: (fix, None)}))
    assert found == Diagnosis(
        "relative-import-in-script", "the script uses a relative import (from . import …), which Python allows only "
        "in a module of a package run with python -m; a file run by its path has no package", fix, False)
    assert diagnose(RELATIVE, 1).fix.startswith("make the script's folder a package and run it as a module")


def test_a_projects_package_off_a_scripts_path_says_run_it_as_a_module_never_pip_install():
    missing = NO_MODULE.replace("'sklearn'", "'myproject.models'")
    fix = 'run it as a module: module = "experiments.train", workdir = "/repo" in [training] in place of script'
    found = diagnose(missing, 1, code=Code(runs={"myproject.models": (fix, "myproject/ in /repo")}))
    assert found == Diagnosis("module-off-the-path", "the training code imports the module 'myproject.models', "
                              "which is your project's (myproject/ in /repo) but not on the import path: a script "
                              "run by its path has only its own folder there", fix, False)


def test_the_other_kerass_api_is_a_keras_mismatch_with_the_setting_to_change():
    found = diagnose(KERAS2_ON_3, 1)
    assert found.name == "keras2-code-on-keras3" and not found.retryable
    assert found.cause.startswith("the script is written for Keras 2 (tf.keras), but it ran under Keras 3, which "
                                  "refused a Keras 2 call: ValueError: Invalid filepath extension for saving.")
    assert found.fix.startswith('set keras = "tf-keras" in [training]')
    for line in ("AttributeError: 'Sequential' object has no attribute 'fit_generator'",
                 "ImportError: `keras.optimizers.legacy` is not supported in Keras 3. When using `tf.keras`, ...",
                 "ValueError: The filename must end in `.weights.h5`. Received: filepath=w.ckpt"):
        assert diagnose(f"Traceback (most recent call last):\n{line}\n", 1).name == "keras2-code-on-keras3", line
    found = diagnose(KERAS3_ON_2, 1)
    assert found == Diagnosis("keras3-code-on-tf-keras", "the script uses Keras 3's API (keras.ops), but it ran "
                              "under tf-keras (Keras 2), which has no ops",
                              'import keras (Keras 3) for it and set keras = "keras3" in [training] where Keras 3 '
                              "can run (one training task), or write it for Keras 2; then start the run again", False)


NAME_ERROR = """Traceback (most recent call last):
  File "/opt/tfcc/dist/trainer/capture.py", line 740, in <module>
    main()
  File "/usr/lib/python3.11/runpy.py", line 291, in run_path
    return _run_module_code(code, init_globals, run_name,
  File "/home/u/.tfcc/runs/r1/worker-0/work/main.py", line 30, in <module>
    train(model)
  File "/home/u/.tfcc/runs/r1/worker-0/work/lib/loop.py", line 12, in train
    print(epoch_loss + undefined_name)
NameError: name 'undefined_name' is not defined
"""


def test_a_code_error_names_the_users_own_file_and_line_as_on_this_machine():
    class Here(Code):
        def local_file(self, rel):
            return f"/home/me/project/{rel}"

    found = diagnose(NAME_ERROR, 1, code=Here())
    assert found == Diagnosis(
        "training-error", "error in the training code at /home/me/project/lib/loop.py:12 (`print(epoch_loss + "
        "undefined_name)`): NameError: name 'undefined_name' is not defined",
        "fix it there, then start the run again; a restart would fail the same way", False)
    assert diagnose(NAME_ERROR, 1).cause.startswith("error in the training code at lib/loop.py:12 (`print(")


# The traceback of a captured script run as a module (python -m trainer.task), Python 3.11's marks under the code.
MODULE_ERROR = """2026-11-29 05:00:01.1: I tensorflow/core/util/port.cc:153] oneDNN custom operations are on.
Traceback (most recent call last):
  File "/usr/lib/python3.11/runpy.py", line 198, in _run_module_as_main
    return _run_code(code, main_globals, None,
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3.11/runpy.py", line 88, in _run_code
    exec(code, run_globals)
  File "/home/u/.tfcc/dist/abc/trainer/capture.py", line 901, in <module>
    main()
  File "/home/u/.tfcc/runs/r1/worker-1/work/trainer/task.py", line 40, in <module>
    model.fit(train, epochs=args.epochs, callbacks=[EpochReport()])
  File "/venv/lib/python3.11/site-packages/tf_keras/src/utils/traceback_utils.py", line 70, in error_handler
    raise e.with_traceback(filtered_tb) from None
  File "/home/u/.tfcc/runs/r1/worker-1/work/trainer/report.py", line 7, in on_epoch_end
    print(f"best {best_loss:.4f}")
                  ^^^^^^^^^
NameError: name 'best_loss' is not defined
worker-1 exiting
"""


def test_a_code_error_is_the_users_file_line_code_and_exception_with_the_other_frames_folded():
    error = diagnosis.code_error(MODULE_ERROR)
    assert (error.where, error.code, error.exception) == (
        "trainer/report.py:7", 'print(f"best {best_loss:.4f}")', "NameError: name 'best_loss' is not defined")
    assert error.traceback.splitlines() == [
        "Traceback (most recent call last):",
        "  … 3 frames of Python, TensorFlow, Keras or tfcc",
        '  File "trainer/task.py", line 40, in <module>',
        "    model.fit(train, epochs=args.epochs, callbacks=[EpochReport()])",
        "  … 1 frame of Python, TensorFlow, Keras or tfcc",
        '  File "trainer/report.py", line 7, in on_epoch_end',
        '    print(f"best {best_loss:.4f}")',
        "                  ^^^^^^^^^",
        "NameError: name 'best_loss' is not defined"]
    whole = diagnosis.last_traceback(MODULE_ERROR)
    assert whole.startswith("Traceback") and whole.endswith("is not defined") and "capture.py" in whole


def test_a_code_error_is_the_last_traceback_and_only_one_through_the_users_files():
    assert diagnosis.code_error(NAME_ERROR + MODULE_ERROR).where == "trainer/report.py:7"
    assert diagnosis.code_error(MODULE_ERROR + NAME_ERROR).where == "lib/loop.py:12"
    tensorflow_only = ('Traceback (most recent call last):\n  File "/venv/lib/python3.11/site-packages/tensorflow/'
                       'x.py", line 3, in f\n    g()\ntensorflow.python.framework.errors_impl.UnavailableError: '
                       'peer gone\n')
    assert diagnosis.code_error(tensorflow_only) is None
    assert diagnosis.code_error("Killed\n") is None and diagnosis.code_error("") is None


def test_a_code_error_skips_other_threads_log_lines_and_a_traceback_printed_at_shutdown():
    interleaved = MODULE_ERROR.replace(
        '    model.fit(train, epochs=args.epochs, callbacks=[EpochReport()])\n',
        '    model.fit(train, epochs=args.epochs, callbacks=[EpochReport()])\n'
        'W0000 00:00:1795930855.196065    7757 collective_ops.cc:52] a collective op is slow\n')
    assert diagnosis.code_error(interleaved).exception == "NameError: name 'best_loss' is not defined"
    shutdown = MODULE_ERROR + ("Exception ignored in: <function Pool.__del__ at 0x7f>\nTraceback (most recent call "
                               "last):\n  File \"/usr/lib/python3.11/multiprocessing/pool.py\", line 271, in __del__\n"
                               "RuntimeError: cannot join current thread\n")
    assert diagnosis.code_error(shutdown).where == "trainer/report.py:7"
