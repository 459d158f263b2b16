"""A stand-in task: writes FIRST metric lines, waits for $TFCC_RUN_DIR/release, writes SECOND more, exits CODE.

usage: fake_task.py FIRST SECOND CODE [--ignore-term]
"""

import json
import os
import signal
import sys
import threading

first, second, code = (int(a) for a in sys.argv[1:4])
if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # like a TensorFlow worker
run = os.environ["TFCC_RUN_DIR"]


def emit(i):
    with open(os.path.join(run, "metrics.jsonl"), "a") as f:
        f.write(json.dumps({"type": "step", "step": i}) + "\n")


for i in range(first):
    emit(i)
print("first part written", flush=True)
pause = threading.Event()
while not os.path.exists(os.path.join(run, "release")):
    pause.wait(0.02)
for i in range(first, first + second):
    emit(i)
print("done", flush=True)
sys.exit(code)
