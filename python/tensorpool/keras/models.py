# SPDX-License-Identifier: Apache-2.0
"""tf.keras.models: Sequential and load_model over tp::train::Sequential (src/python/train.cpp).

The model records tensorpool.distribute.get_strategy() when it is created inside a strategy's scope (as Keras
does), else the strategy current at compile(). compile() builds the C++ model (`_native`, None before) and
fit() runs the C++ loop `tensorpool train` runs, with its settings: batches shuffled with the seed, prefetched
2 deep, staged where the CLI stages them, 2 steps in flight (1 when a callback has per-batch hooks).
"""

import json
import os
import sys

import numpy as np

from tensorpool import _runtime, _tensorpool
from tensorpool import data as _data
from tensorpool.keras import callbacks as _callbacks
from tensorpool.keras import layers as _layers
from tensorpool.keras import losses as _losses
from tensorpool.keras import metrics as _metrics
from tensorpool.keras import mixed_precision as _mixed_precision
from tensorpool.keras import optimizers as _optimizers

__all__ = ["Sequential", "load_model"]

_STEPS_IN_FLIGHT = 2  # `tensorpool train`'s --steps-in-flight default
_PREFETCH = 2  # the CLI's prefetch depth
_SEED = 42  # the CLI's --seed default: initialisers and the first fit's shuffle
_CONFIG_FILE = "config.json"
_WEIGHTS_DIR = "variables"


def _strategy_in_scope():
    from tensorpool import distribute

    return distribute.get_strategy() if distribute.has_strategy() else None


def _format_bytes(count):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.2f} {unit}"
        count /= 1024.0
    return f"{count} B"


def _native_name(index):
    """The runtime's name of the model's index-th Dense layer."""
    return "dense" if index == 0 else f"dense_{index}"


class Sequential:
    """Sequential([Input(shape=(784,)) or Dense(..., input_shape=(784,)), Dense(...), ...])."""

    def __init__(self, layers=None, name=None):
        self.name = name or _layers._unique_name("sequential")
        self._input = None  # InputLayer
        self._dense = []
        self._strategy = _strategy_in_scope()
        self._native = None
        self._compiled = None  # what compile() was given, as a config
        self._metric_key = None
        self._fits = 0
        self._has_variables = False  # the runtime creates them at the first training step (or a restore)
        self.stop_training = False
        self.history = None
        for layer in layers or []:
            self.add(layer)

    # --- building ---

    def add(self, layer):
        if self._native is not None:
            raise ValueError("Sequential.add: the model is compiled; add layers before compile()")
        if isinstance(layer, _layers.InputLayer):
            if self._input is not None or self._dense:
                raise ValueError("Sequential.add: an Input layer must come first, and only once")
            self._input = layer
            return
        if not isinstance(layer, _layers.Dense):
            raise TypeError(f"Sequential.add: {type(layer).__name__} is not a layer this runtime has (Dense, Input)")
        if layer.input_shape is not None:
            if self._input is not None or self._dense:
                raise ValueError(f"Sequential.add: {layer.name} has input_shape= but is not the first layer")
            self._input = _layers.InputLayer(shape=layer.input_shape)
        if any(existing.name == layer.name for existing in self._dense):
            raise ValueError(f"Sequential.add: a layer named '{layer.name}' is already in the model")
        self._dense.append(layer)

    @property
    def layers(self):
        return list(self._dense)

    @property
    def input_shape(self):
        return None if self._input is None else (None,) + self._input.input_shape

    @property
    def output_shape(self):
        return None if not self._dense else (None, self._dense[-1].units)

    def _check_buildable(self, where):
        if self._input is None:
            raise ValueError(
                f"{where}: the model's input shape is unknown; start with Input(shape=(784,)) or give the first "
                "layer input_shape=(784,)"
            )
        if not self._dense:
            raise ValueError(f"{where}: the model has no Dense layer")

    def _layer_params(self):
        rows = []
        inputs = int(np.prod(self._input.input_shape)) if self._input is not None else 0
        for layer in self._dense:
            rows.append((layer, layer.count_params(inputs)))
            inputs = layer.units
        return rows

    def count_params(self):
        self._check_buildable("count_params")
        return sum(count for _, count in self._layer_params())

    # --- compile ---

    def compile(self, optimizer="rmsprop", loss=None, metrics=None, seed=None, **kwargs):
        """optimizer: 'adam', 'sgd' or Adam(...)/SGD(...); loss: 'sparse_categorical_crossentropy' or 'mse' (or
        a loss object); metrics: None or ['accuracy']."""
        for key in kwargs:
            if key not in ("loss_weights", "weighted_metrics", "run_eagerly", "jit_compile", "steps_per_execution"):
                raise TypeError(f"compile: unexpected argument '{key}'")
            if kwargs[key] not in (None, False, 1):
                raise ValueError(f"compile: {key}={kwargs[key]!r} is not supported")
        if isinstance(optimizer, str) and optimizer.lower() == "rmsprop":
            raise ValueError("compile: optimizer 'rmsprop' (Keras's default) is not available; use 'adam' or 'sgd'")
        self._check_buildable("compile")
        opt = _optimizers.get(optimizer)
        if loss is None:
            raise ValueError("compile: give a loss, e.g. loss='sparse_categorical_crossentropy'")
        loss_object = _losses.get(loss)
        metric_keys = [_metrics.get(metric) for metric in (metrics or [])]
        if len(metric_keys) > 1:
            raise ValueError(f"compile: give at most one metric (accuracy), not {metrics!r}")
        if metric_keys and loss_object.native_name != "sparse_categorical_crossentropy":
            raise ValueError("compile: accuracy needs loss='sparse_categorical_crossentropy' (class labels)")
        if seed is None:
            seed = _SEED
        self._compiled = {
            "optimizer": {"name": opt.name, "config": opt.get_config()},
            "loss": {"name": loss_object.native_name, "from_logits": loss_object.from_logits},
            "metrics": metric_keys,
            "seed": int(seed),
            "policy": _mixed_precision.global_policy().name,
        }
        strategy = self._strategy if self._strategy is not None else _strategy_in_scope()
        self._native = self._compile_native(strategy)
        self._has_variables = False
        self._metric_key = metric_keys[0] if metric_keys else None

    def _compile_native(self, strategy=None):
        """A new compiled C++ model of this model's layers and compile() settings on `strategy` (a
        tensorpool.distribute strategy; None: the default, one device)."""
        if self._compiled is None:
            raise ValueError("the model is not compiled; call compile() first")
        _runtime.ensure_configured()
        native_strategy = None if strategy is None else strategy._native()
        native = _tensorpool.Sequential(list(self._input.input_shape))
        for layer in self._dense:
            # The runtime's names are positional ("dense", "dense_1", ... as model_graph names unnamed layers),
            # so checkpoints and saved weights fit any model of the same layers, whatever its Python names.
            native.add_dense(layer.units, layer.activation, layer.use_bias, "", layer.dtype_policy.name)
        opt = getattr(_optimizers, {"adam": "Adam", "sgd": "SGD"}[self._compiled["optimizer"]["name"]])(
            **self._compiled["optimizer"]["config"]
        )
        native.compile(
            **opt._native_args(),
            loss=self._compiled["loss"]["name"],
            from_logits=self._compiled["loss"]["from_logits"],
            seed=self._compiled["seed"],
            policy=self._compiled["policy"],
            strategy=native_strategy,
        )
        return native

    def _require_compiled(self, where):
        if self._native is None:
            raise RuntimeError(f"{where}: you must compile your model before using it (call model.compile())")

    def _variables_exist(self):
        try:
            self._require_variables("")
            return True
        except ValueError:
            return False

    def _require_variables(self, where):
        self._require_compiled(where)
        if not self._has_variables:
            try:  # a fit that ended in an exception (or is running this callback) may have created them
                self._native.variables()
                self._has_variables = True
                return
            except ValueError:
                pass
            raise ValueError(
                f"{where}: the model has no variables yet: the runtime creates them (and the optimizer's state) at "
                "the first training step; call fit() (or load_weights()) first"
            )

    # --- data ---

    def _check_features(self, features, where, what):
        expected = self._input.input_shape
        if tuple(features.shape[1:]) != expected:
            got = features.shape[1:]
            if len(got) == 1 and len(expected) == 1:
                raise ValueError(
                    f"{where}: {what} has {got[0]} features per example; the model's input_shape is {expected}"
                )
            raise ValueError(
                f"{where}: {what} has examples of shape {tuple(got)}; the model's input_shape is {expected}"
            )

    def _check_targets_shape(self, shape, where, what):
        expected = (self._dense[-1].units,)
        if tuple(shape) != expected:
            raise ValueError(
                f"{where}: {what} has targets of shape {tuple(shape)} per example; the last layer gives {expected}"
            )

    def _check_labels(self, labels, where, what):
        units = self._dense[-1].units
        if labels.size and int(labels.max()) >= units:
            raise ValueError(
                f"{where}: {what} holds class {int(labels.max())}, but the last layer has {units} units (classes "
                f"0..{units - 1})"
            )

    def _dataset(self, x, y, batch_size, where, shuffle_seed=None):
        """A batched _tensorpool.Dataset of (x, y): numpy arrays, or a batched tensorpool.data.Dataset."""
        if isinstance(x, _data.Dataset):
            if y is not None:
                raise ValueError(f"{where}: y must be None when x is a Dataset (it holds the labels)")
            if batch_size is not None:
                raise ValueError(f"{where}: batch_size must be None when x is a Dataset; batch the Dataset instead")
            if not x._batched:
                raise ValueError(f"{where}: x is an unbatched Dataset; call .batch(32) on it")
            if x.example_shape != self._input.input_shape:
                raise ValueError(
                    f"{where}: the Dataset's examples have shape {x.example_shape}; the model's input_shape is "
                    f"{self._input.input_shape}"
                )
            regression = self._compiled["loss"]["name"] == "mean_squared_error"
            if regression and x._targets is None:
                raise ValueError(f"{where}: loss 'mean_squared_error' needs float targets; the Dataset holds class labels")
            if not regression and x._targets is not None:
                raise ValueError(
                    f"{where}: the Dataset's labels are float targets; loss '{self._compiled['loss']['name']}' "
                    "needs integer class labels (cast them, e.g. y.astype('int32'))"
                )
            if regression:
                self._check_targets_shape(tuple(x._targets), where, "the Dataset's labels")
            return x._native()
        if y is None:
            raise ValueError(f"{where}: give y (the labels) with numpy x, or a Dataset of (x, y)")
        features = _data._features_array(x, where, "x")
        regression = self._compiled["loss"]["name"] == "mean_squared_error"
        if regression:
            labels = _data._targets_array(y, where, "y")
            if labels.ndim == 1:
                labels = labels.reshape(-1, 1)  # (N,) targets of a one-unit output, as Keras expands them
            self._check_targets_shape(labels.shape[1:], where, "y")
        else:
            labels = _data._labels_array(y, where, "y")
        self._check_features(features, where, "x")
        if features.shape[0] != labels.shape[0]:
            raise ValueError(f"{where}: x holds {features.shape[0]} examples but y holds {labels.shape[0]}")
        if not regression:
            self._check_labels(labels, where, "y")
        if batch_size is None:
            batch_size = 32
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"{where}: batch_size {batch_size!r} must be a positive integer")
        if regression:
            dataset = _tensorpool.Dataset.with_targets(features, labels)
        else:
            dataset = _tensorpool.Dataset.from_numpy(features, labels)
        if shuffle_seed is not None:
            dataset = dataset.shuffle(shuffle_seed)
        return dataset.batch(int(batch_size)).prefetch(_PREFETCH)

    # --- fit, evaluate, predict ---

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, initial_epoch=0, steps_per_epoch=None, **kwargs):
        """Trains for `epochs` epochs; returns the History."""
        for key in kwargs:
            if key not in ("class_weight", "sample_weight", "validation_steps", "validation_batch_size",
                           "validation_freq"):
                raise TypeError(f"fit: unexpected argument '{key}'")
            if kwargs[key] not in (None, 1):
                raise ValueError(f"fit: {key}={kwargs[key]!r} is not supported")
        self._require_compiled("fit")
        if initial_epoch != 0 or steps_per_epoch is not None:
            raise ValueError("fit: initial_epoch and steps_per_epoch are not supported (BackupAndRestore resumes)")
        if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
            raise ValueError(f"fit: epochs {epochs!r} must be a non-negative integer")
        verbose = 1 if verbose == "auto" else verbose
        if verbose not in (0, 1, 2):
            raise ValueError(f"fit: verbose {verbose!r} must be 0, 1, 2 or 'auto'")
        if not 0.0 <= validation_split < 1.0:
            raise ValueError(f"fit: validation_split {validation_split!r} must be in [0, 1)")
        if validation_split and validation_data is not None:
            raise ValueError("fit: give validation_data or validation_split, not both")
        if validation_split:
            if isinstance(x, _data.Dataset):
                raise ValueError("fit: validation_split needs numpy x and y, not a Dataset")
            x, y = np.asarray(x), np.asarray(y)
            split = int(len(x) * (1.0 - validation_split))
            if split < 1 or split >= len(x):
                raise ValueError(f"fit: validation_split {validation_split} leaves no examples on one side")
            x, y, validation_data = x[:split], y[:split], (x[split:], y[split:])
        if shuffle not in (True, False):
            raise ValueError(f"fit: shuffle {shuffle!r} must be True or False")
        callback_list = list(callbacks or [])
        for callback in callback_list:
            if not isinstance(callback, _callbacks.Callback):
                raise TypeError(f"fit: callbacks must be keras Callback objects, not {type(callback).__name__}")
        backups = [c for c in callback_list if isinstance(c, _callbacks.BackupAndRestore)]
        if len(backups) > 1:
            raise ValueError("fit: give at most one BackupAndRestore")
        # The CLI shuffles with its --seed: the first fit visits the order `tensorpool train` does, later ones
        # new orders. A run that resumes from a backup visits the order its checkpoint was taken in.
        seed = None
        if shuffle:
            seed = self._compiled["seed"] + (0 if backups else self._fits)
        train = self._dataset(x, y, batch_size, "fit", shuffle_seed=seed)
        validation = None
        if validation_data is not None:
            if isinstance(validation_data, _data.Dataset):
                validation = self._dataset(validation_data, None, None, "fit: validation_data")
            elif isinstance(validation_data, (tuple, list)) and len(validation_data) == 2:
                validation = self._dataset(validation_data[0], validation_data[1], batch_size,
                                           "fit: validation_data")
            else:
                raise ValueError("fit: validation_data must be (x_val, y_val) or a batched Dataset")
        history = _callbacks.History()
        params = {"verbose": verbose, "epochs": epochs, "steps": train.batches_per_epoch}
        # The parameter-server loop has no progress bar (its workers' steps interleave): one line per epoch.
        print_epochs = bool(verbose) and self._native.strategy_name == "parameter_server"
        dispatcher = _callbacks._Dispatcher(callback_list + [history], self, params, self._metric_key, print_epochs)
        self.stop_training = False
        self.history = history
        self._fits += 1
        if verbose:
            sys.stdout.flush()  # the progress bar writes to the process's stdout from C++
        result = self._native.fit(
            train=train,
            epochs=int(epochs),
            validation=validation,
            dispatcher=dispatcher,
            batch_hooks=dispatcher.batch_hooks,
            verbose=verbose,
            checkpoint_dir=backups[0].backup_dir if backups else "",
            checkpoint_every_steps=backups[0]._every_steps() if backups else 0,
            steps_in_flight=1 if dispatcher.batch_hooks else _STEPS_IN_FLIGHT,
        )
        self._has_variables = self._has_variables or result["steps"] > 0
        if result["stopped"]:
            dispatcher._on_train_end()
        elif backups:
            backups[0]._after_success()
        history.params = params
        history.model = self
        self._fit_result = result
        return history

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", return_dict=False, **kwargs):
        """[loss, accuracy] with metrics=['accuracy'], else the loss; a dict with return_dict=True."""
        for key in kwargs:
            if key not in ("sample_weight", "steps", "callbacks"):
                raise TypeError(f"evaluate: unexpected argument '{key}'")
            if kwargs[key] is not None:
                raise ValueError(f"evaluate: {key}={kwargs[key]!r} is not supported")
        self._require_compiled("evaluate")
        verbose = 1 if verbose == "auto" else verbose
        if verbose not in (0, 1, 2):
            raise ValueError(f"evaluate: verbose {verbose!r} must be 0, 1, 2 or 'auto'")
        dataset = self._dataset(x, y, batch_size, "evaluate")
        loss, accuracy, _ = self._native.evaluate(dataset)
        logs = {"loss": loss}
        if self._metric_key is not None:
            logs[self._metric_key] = accuracy
        if verbose:
            steps = dataset.batches_per_epoch
            print(f"{steps}/{steps} - " + " - ".join(f"{key}: {value:.4f}" for key, value in logs.items()))
        if return_dict:
            return logs
        return [loss, accuracy] if self._metric_key is not None else loss

    def predict(self, x, batch_size=None, verbose="auto", **kwargs):
        """The last layer's outputs for every example of x (numpy, or a Dataset's features), as float32 numpy."""
        for key in kwargs:
            if key not in ("steps", "callbacks"):
                raise TypeError(f"predict: unexpected argument '{key}'")
        self._require_compiled("predict")
        if isinstance(x, _data.Dataset):
            parts = [features for features, _ in x]
            if not parts:
                return np.zeros((0, self._dense[-1].units), np.float32)
            features = np.concatenate([p.reshape((-1,) + self._input.input_shape) for p in parts])
            batch_size = batch_size or (x._native().batch_size if x._batched else 32)
        else:
            features = _data._features_array(x, "predict", "x")
        self._check_features(features, "predict", "x")
        if batch_size is None:
            batch_size = 32
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"predict: batch_size {batch_size!r} must be a positive integer")
        features = np.ascontiguousarray(features, dtype=np.float32)
        return self._native.predict(features, int(batch_size))

    def __call__(self, x):
        return self.predict(x, verbose=0)

    # --- weights, summary, save ---

    def get_weights(self):
        """The layers' kernels and biases, in layer order, as numpy arrays."""
        self._require_variables("get_weights")
        values = dict(self._native.variables())
        weights = []
        for index, layer in enumerate(self._dense):
            weights.append(values[f"{_native_name(index)}/kernel"])
            if layer.use_bias:
                weights.append(values[f"{_native_name(index)}/bias"])
        return weights

    def set_weights(self, weights):
        """Sets the layers' kernels and biases (the list get_weights returns); the optimizer state stays."""
        self._require_variables("set_weights")
        current = self._native.variables()
        names = []
        for index, layer in enumerate(self._dense):
            names.append(f"{_native_name(index)}/kernel")
            if layer.use_bias:
                names.append(f"{_native_name(index)}/bias")
        weights = list(weights)
        if len(weights) != len(names):
            raise ValueError(f"set_weights: the model has {len(names)} weights (kernels and biases); got {len(weights)}")
        values = dict(current)
        for name, weight in zip(names, weights):
            array = np.ascontiguousarray(np.asarray(weight, dtype=np.float32))
            if array.shape != values[name].shape:
                raise ValueError(f"set_weights: {name} has shape {values[name].shape}; got {array.shape}")
            values[name] = array
        self._native.assign_variables([(name, values[name]) for name, _ in current])

    def summary(self, line_length=None, print_fn=None):
        """Keras's table, plus each layer's bytes (float32 variables) and, once compiled, the optimizer state."""
        self._check_buildable("summary")
        print_fn = print_fn or print
        widths = [29, 26, 12, 14]
        rule = "_" * sum(widths)

        def row(*cells):
            return "".join(f" {str(cell):<{width - 1}}" for cell, width in zip(cells, widths)).rstrip()

        lines = [f'Model: "{self.name}"', rule, row("Layer (type)", "Output Shape", "Param #", "Bytes"),
                 "=" * sum(widths)]
        total = 0
        for index, (layer, count) in enumerate(self._layer_params()):
            total += count
            policy = "" if layer.dtype_policy.name == "float32" else f" [{layer.dtype_policy.name}]"
            lines.append(row(f"{layer.name} (Dense){policy}", f"(None, {layer.units})", count, count * 4))
            if index + 1 < len(self._dense):
                lines.append("")
        lines.append("=" * sum(widths))
        lines.append(f"Total params: {total} ({_format_bytes(total * 4)})")
        lines.append(f"Trainable params: {total} ({_format_bytes(total * 4)})")
        lines.append("Non-trainable params: 0 (0 B)")
        if self._native is not None and self._variables_exist():
            names = {f"{_native_name(index)}/{part}" for index in range(len(self._dense)) for part in ("kernel", "bias")}
            state = sum(value.nbytes for name, value in self._native.variables() if name not in names)
            lines.append(f"Optimizer state: {_format_bytes(state)} (per replica, on {', '.join(self._native.devices)})")
        lines.append(rule)
        for line in lines:
            print_fn(line)

    def _config(self):
        return {
            "format": "tensorpool.keras.Sequential/1",
            "name": self.name,
            "input_shape": list(self._input.input_shape),
            "layers": [layer.get_config() for layer in self._dense],
            "compile": self._compiled,
        }

    def save(self, filepath, overwrite=True):
        """Writes a directory: config.json (layers and compile settings) and variables/ (an atomic checkpoint
        of the weights and optimizer state). load_model(filepath) rebuilds the compiled model."""
        self._require_variables("save")
        path = os.fspath(filepath)
        if os.path.exists(path) and not overwrite:
            raise FileExistsError(f"save: {path} exists and overwrite=False")
        self.save_weights(os.path.join(path, _WEIGHTS_DIR))  # first: collective in a multi-worker job
        if self._native.rank != 0:
            return  # rank 0 writes, as fit's checkpoints
        os.makedirs(path, exist_ok=True)
        config_path = os.path.join(path, _CONFIG_FILE)
        temporary = config_path + ".tmp"
        with open(temporary, "w") as out:
            json.dump(self._config(), out, indent=2)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, config_path)

    def save_weights(self, filepath, overwrite=True):
        """The variables (weights and optimizer state) as an atomic checkpoint directory."""
        self._require_variables("save_weights")
        self._native.save_weights(os.fspath(filepath), getattr(self, "_fit_result", {}).get("steps", 0),
                                  {"model": self.name})

    def load_weights(self, filepath):
        """Restores variables save_weights (or BackupAndRestore's checkpoints) wrote; the layers must match."""
        self._require_compiled("load_weights")
        path = os.fspath(filepath)
        if os.path.isfile(os.path.join(path, _CONFIG_FILE)):
            path = os.path.join(path, _WEIGHTS_DIR)
        self._native.load_weights(path)
        self._has_variables = True


def load_model(filepath, compile=True):  # noqa: A002  (Keras's argument name)
    """The compiled model model.save(filepath) wrote, with its weights and optimizer state."""
    path = os.fspath(filepath)
    config_path = os.path.join(path, _CONFIG_FILE)
    if not os.path.isfile(config_path):
        raise OSError(f"load_model: {path} holds no {_CONFIG_FILE}; give a directory model.save() wrote")
    with open(config_path) as source:
        config = json.load(source)
    if config.get("format") != "tensorpool.keras.Sequential/1":
        raise ValueError(f"load_model: {config_path} is not a tensorpool Sequential model's config")
    model = Sequential(name=config["name"])
    model.add(_layers.InputLayer(shape=tuple(config["input_shape"])))
    for layer in config["layers"]:
        model.add(_layers.Dense(layer["units"], activation=layer["activation"], use_bias=layer["use_bias"],
                                name=layer["name"], dtype=layer["dtype"]))
    if compile and config.get("compile"):
        settings = config["compile"]
        optimizer = {"adam": _optimizers.Adam, "sgd": _optimizers.SGD}[settings["optimizer"]["name"]](
            **settings["optimizer"]["config"]
        )
        loss = {"sparse_categorical_crossentropy": _losses.SparseCategoricalCrossentropy,
                "mean_squared_error": _losses.MeanSquaredError}[settings["loss"]["name"]]
        loss_object = loss(settings["loss"]["from_logits"]) if loss is _losses.SparseCategoricalCrossentropy else loss()
        previous = _mixed_precision.global_policy()
        _mixed_precision.set_global_policy(settings["policy"])
        try:
            model.compile(optimizer=optimizer, loss=loss_object, metrics=settings["metrics"], seed=settings["seed"])
        finally:
            _mixed_precision.set_global_policy(previous)
        model.load_weights(os.path.join(path, _WEIGHTS_DIR))
    return model
