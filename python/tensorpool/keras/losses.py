# SPDX-License-Identifier: Apache-2.0
"""tf.keras.losses: sparse categorical cross-entropy and mean squared error, by object or by name."""

__all__ = ["Loss", "SparseCategoricalCrossentropy", "MeanSquaredError", "get"]


class Loss:
    native_name = ""

    def __init__(self, from_logits=False):
        self.from_logits = bool(from_logits)

    def get_config(self):
        return {"from_logits": self.from_logits}


class SparseCategoricalCrossentropy(Loss):
    """Integer class labels; from_logits=True when the last layer has no softmax."""

    native_name = "sparse_categorical_crossentropy"


class MeanSquaredError(Loss):
    native_name = "mean_squared_error"

    def __init__(self):
        super().__init__(False)


_BY_NAME = {
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "mse": MeanSquaredError,
    "mean_squared_error": MeanSquaredError,
}


def get(identifier):
    if isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, str):
        cls = _BY_NAME.get(identifier.lower())
        if cls is None:
            raise ValueError(
                f"compile: loss '{identifier}' is not 'sparse_categorical_crossentropy' or 'mse' "
                "(mean_squared_error)"
            )
        return cls()
    raise TypeError(f"compile: loss must be a name or a loss object, not {type(identifier).__name__}")
