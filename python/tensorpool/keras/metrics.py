# SPDX-License-Identifier: Apache-2.0
"""tf.keras.metrics: accuracy (of integer class labels), by name or object; the loss is always reported."""

__all__ = ["Metric", "Accuracy", "SparseCategoricalAccuracy", "get"]


class Metric:
    def __init__(self, name):
        self.name = name


class SparseCategoricalAccuracy(Metric):
    def __init__(self, name="sparse_categorical_accuracy"):
        super().__init__(name)


class Accuracy(SparseCategoricalAccuracy):
    def __init__(self, name="accuracy"):
        super().__init__(name)


_ACCURACY_NAMES = ("accuracy", "acc", "sparse_categorical_accuracy")


def get(identifier):
    """The key a metric has in the logs ('accuracy', 'acc', ...); ValueError for metrics the runtime lacks."""
    if isinstance(identifier, SparseCategoricalAccuracy):
        return identifier.name
    if isinstance(identifier, str) and identifier.lower() in _ACCURACY_NAMES:
        return identifier
    raise ValueError(
        f"compile: metric {identifier!r} is not supported; give 'accuracy' (or 'acc', "
        "'sparse_categorical_accuracy'); the loss is always reported"
    )
