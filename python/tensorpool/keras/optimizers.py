# SPDX-License-Identifier: Apache-2.0
"""tf.keras.optimizers: Adam and SGD with Keras's defaults (train/layers.hpp), by object or by name."""

__all__ = ["Optimizer", "Adam", "SGD", "get"]


def _positive(value, what, where):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{where}: {what} {value!r} must be a positive number")
    return float(value)


class Optimizer:
    """The base of Adam and SGD; `_native_args()` is what compile() gives the runtime."""

    name = "optimizer"

    def get_config(self):
        raise NotImplementedError

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class Adam(Optimizer):
    name = "adam"

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-07, amsgrad=False, name="Adam"):
        if amsgrad:
            raise ValueError("Adam: amsgrad=True is not supported; leave it False")
        self.learning_rate = _positive(learning_rate, "learning_rate", "Adam")
        for what, value in (("beta_1", beta_1), ("beta_2", beta_2)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ValueError(f"Adam: {what} {value!r} must be in [0, 1)")
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = _positive(epsilon, "epsilon", "Adam")

    def get_config(self):
        return {"learning_rate": self.learning_rate, "beta_1": self.beta_1, "beta_2": self.beta_2,
                "epsilon": self.epsilon}

    def _native_args(self):
        return dict(optimizer="adam", learning_rate=self.learning_rate, beta_1=self.beta_1, beta_2=self.beta_2,
                    epsilon=self.epsilon, momentum=0.0, nesterov=False)

    def __repr__(self):
        return f"Adam(learning_rate={self.learning_rate})"


class SGD(Optimizer):
    name = "sgd"

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name="SGD"):
        self.learning_rate = _positive(learning_rate, "learning_rate", "SGD")
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0 <= momentum <= 1:
            raise ValueError(f"SGD: momentum {momentum!r} must be in [0, 1]")
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)

    def get_config(self):
        return {"learning_rate": self.learning_rate, "momentum": self.momentum, "nesterov": self.nesterov}

    def _native_args(self):
        return dict(optimizer="sgd", learning_rate=self.learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-07,
                    momentum=self.momentum, nesterov=self.nesterov)

    def __repr__(self):
        return f"SGD(learning_rate={self.learning_rate}, momentum={self.momentum})"


_BY_NAME = {"adam": Adam, "sgd": SGD}


def get(identifier):
    """An optimizer from an object or a name ('adam', 'sgd'); ValueError/TypeError naming it otherwise."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str):
        cls = _BY_NAME.get(identifier.lower())
        if cls is None:
            raise ValueError(f"compile: optimizer '{identifier}' is not 'adam' or 'sgd' (nor an Adam/SGD object)")
        return cls()
    raise TypeError(f"compile: optimizer must be 'adam', 'sgd' or an optimizer object, not {type(identifier).__name__}")
