"""Built-in workloads (digits, synthetic) and users' model files.

A workload gives unbatched ``(x, y)`` datasets and an uncompiled model; the
trainer shuffles, batches, shards and compiles. A user's model file is a
Python file with::

    def build_model():            # -> tf.keras.Model, compiled or not
    def train_dataset():          # -> tf.data.Dataset of unbatched (x, y)
    def val_dataset():            # optional, same form
    LOSS = "sparse_categorical_crossentropy"   # optional, when build_model() does not compile
    METRICS = ["accuracy"]                     # optional
    def callbacks(run_dir, task):  # optional: extra Keras callbacks

The file is checked before TensorFlow starts (it exists, it parses, it defines
the two functions) and imported only after the distribution strategy exists,
because TensorFlow ops run at import time would stop collectives from being
configured.
"""

from __future__ import annotations

import ast
import linecache
import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from trainer.config import Options
from trainer.tf_config import ConfigError

DIGITS_VAL_FRACTION = 0.2
DIGITS_SPLIT_SEED = 0


@dataclass
class Workload:
    name: str
    build_model: Callable
    train_dataset: Callable
    val_dataset: Callable | None
    num_examples: int | None
    in_memory: bool
    loss: object = None
    metrics: list = field(default_factory=lambda: ["accuracy"])
    extra_callbacks: Callable | None = None


def _logits_loss():
    import tensorflow as tf

    return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


# --------------------------------------------------------------------------- digits


def digits_table():
    """scikit-learn's digits as its data file has them: (1797, 65), each row 64 pixels (0-16) then the digit.

    Read from the file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``, what ``load_digits`` reads)
    without importing scikit-learn, which would cost each worker about a second of CPU at its start; where the
    file is not found (another layout), through ``load_digits`` itself."""
    import gzip
    import importlib.util

    import numpy as np

    spec = importlib.util.find_spec("sklearn")  # where the package is, without running it
    path = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz" if spec and spec.origin else None
    if path is not None and path.is_file():
        with gzip.open(path, "rt") as f:
            return np.loadtxt(f, delimiter=",")
    from sklearn.datasets import load_digits

    data = load_digits()
    return np.column_stack([data.data, data.target])


def digits_arrays():
    """The scikit-learn digits as (x_train, y_train, x_val, y_val), a fixed held-out split."""
    import numpy as np

    table = digits_table()
    x = (table[:, :64].reshape(-1, 8, 8) / 16.0).astype("float32")[..., None]  # (1797, 8, 8, 1) in [0, 1]
    y = table[:, 64].astype("int64")
    order = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(len(x))
    n_val = int(round(len(x) * DIGITS_VAL_FRACTION))
    val, train = order[:n_val], order[n_val:]
    return x[train], y[train], x[val], y[val]


def digits_model():
    import tensorflow as tf

    layers = tf.keras.layers
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(8, 8, 1)),
            layers.Conv2D(32, 3, padding="same", activation="relu"),
            layers.Conv2D(64, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(),
            layers.Flatten(),
            layers.Dense(128, activation="relu"),
            layers.Dense(10),
        ],
        name="digits_cnn",
    )


def digits() -> Workload:
    import tensorflow as tf

    x_train, y_train, x_val, y_val = digits_arrays()
    return Workload(
        name="digits",
        build_model=digits_model,
        train_dataset=lambda: tf.data.Dataset.from_tensor_slices((x_train, y_train)),
        val_dataset=lambda: tf.data.Dataset.from_tensor_slices((x_val, y_val)),
        num_examples=len(x_train),
        in_memory=True,
        loss=_logits_loss(),
    )


# --------------------------------------------------------------------------- synthetic


def synthetic(shape: tuple[int, ...], classes: int, examples: int, seed: int) -> Workload:
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    x = rng.random((examples, *shape), dtype="float32")
    y = rng.integers(0, classes, size=examples).astype("int64")

    def build():
        layers = tf.keras.layers
        body = [tf.keras.Input(shape=shape)]
        if len(shape) == 3:
            body += [
                layers.Conv2D(32, 3, padding="same", activation="relu"),
                layers.MaxPooling2D(),
                layers.Conv2D(64, 3, padding="same", activation="relu"),
                layers.GlobalAveragePooling2D(),
            ]
        else:
            body += [layers.Flatten(), layers.Dense(256, activation="relu")]
        body += [layers.Dense(128, activation="relu"), layers.Dense(classes)]
        return tf.keras.Sequential(body, name="synthetic")

    return Workload(
        name="synthetic",
        build_model=build,
        train_dataset=lambda: tf.data.Dataset.from_tensor_slices((x, y)),
        val_dataset=None,
        num_examples=examples,
        in_memory=True,
        loss=_logits_loss(),
    )


# --------------------------------------------------------------------------- model files

REQUIRED_FUNCTIONS = ("build_model", "train_dataset")
# tfcc deploys a user's model file to dist/<hash>/user/ on each host and names the user's own
# path here, so that errors and tracebacks name the file the user edits, not the copy.
ORIGIN_VARIABLE = "TFCC_MODEL_FILE_ORIGIN"


def shown_name(path: Path) -> str:
    """How errors name a model file: as the user knows it (tfcc's deploy), else as given."""
    return os.environ.get(ORIGIN_VARIABLE) or str(path)


def check_model_file(path: Path) -> None:
    """Fail before TensorFlow starts when a model file cannot work."""
    shown = shown_name(path)
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read model file {shown!r}: {exc.strerror}; check its permissions") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"model file {shown!r} is not UTF-8 text (byte {exc.start}); "
                          "save it as UTF-8 (Python files are UTF-8)") from None
    try:
        tree = ast.parse(source, filename=shown)
    except SyntaxError as exc:
        line = f" at line {exc.lineno}" if exc.lineno else ""
        raise ConfigError(f"model file {shown!r} has a syntax error{line}: {exc.msg}; fix the file") from None
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    defined |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    missing = [name for name in REQUIRED_FUNCTIONS if name not in defined]
    if missing:
        raise ConfigError(
            f"model file {shown!r} does not define {' or '.join(missing)}(); "
            "it needs build_model() returning a tf.keras model and train_dataset() returning "
            "a tf.data.Dataset of unbatched (x, y)"
        )


def from_file(path: Path) -> Workload:
    import tensorflow as tf

    shown = shown_name(path)
    name = f"tfcc_user_model_{abs(hash(str(path.resolve())))}"
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))  # the file may import its neighbours
    try:
        source = path.read_text(encoding="utf-8")
        # Compiled under the user's own name, its lines kept for tracebacks: they show the user's file.
        linecache.cache[shown] = (len(source), None, source.splitlines(True), shown)
        exec(compile(source, shown, "exec"), module.__dict__)
        probe = module.train_dataset()
    except Exception as exc:
        raise ConfigError(
            f"model file {shown!r}: loading it or calling train_dataset() failed with "
            f"{type(exc).__name__}: {exc}; fix the file or the data it reads"
        ) from exc
    if not isinstance(probe, tf.data.Dataset):
        raise ConfigError(
            f"train_dataset() in {shown!r} returned {type(probe).__name__}; return a tf.data.Dataset "
            "of unbatched (x, y) examples"
        )
    card = int(probe.cardinality())
    return Workload(
        name=path.stem,
        build_model=module.build_model,
        train_dataset=module.train_dataset,
        val_dataset=getattr(module, "val_dataset", None),
        num_examples=card if card >= 0 else None,
        in_memory=False,
        loss=getattr(module, "LOSS", "sparse_categorical_crossentropy"),
        metrics=list(getattr(module, "METRICS", ["accuracy"])),
        extra_callbacks=getattr(module, "callbacks", None),
    )


def load(opts: Options) -> Workload:
    if opts.workload == "digits":
        return digits()
    if opts.workload == "synthetic":
        return synthetic(opts.shape, opts.classes, opts.examples, opts.seed)
    return from_file(opts.model_file)
