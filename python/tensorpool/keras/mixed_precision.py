# SPDX-License-Identifier: Apache-2.0
"""tf.keras.mixed_precision: the global dtype policy (train/dtype_policy.hpp).

Layers take the global policy when they are created (as Keras's), or their own `dtype=`; compile() gives the
model the global policy of that moment (CompileOptions::policy). mixed_float16 trains with dynamic loss scaling,
applied by the runtime (no LossScaleOptimizer to wrap).
"""

__all__ = ["Policy", "set_global_policy", "global_policy"]

_NAMES = ("float32", "mixed_float16", "mixed_bfloat16")
_COMPUTE = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}


class Policy:
    """A dtype policy: 'float32', 'mixed_float16' or 'mixed_bfloat16'."""

    def __init__(self, name):
        if not isinstance(name, str):
            raise TypeError(f"Policy: name must be a str, not {type(name).__name__}")
        if name not in _NAMES:
            raise ValueError(f"Policy: '{name}' is not one of {', '.join(_NAMES)}")
        self._name = name

    @property
    def name(self):
        return self._name

    @property
    def compute_dtype(self):
        return _COMPUTE[self._name]

    @property
    def variable_dtype(self):
        return "float32"

    def __eq__(self, other):
        return isinstance(other, Policy) and other._name == self._name

    def __hash__(self):
        return hash(self._name)

    def __repr__(self):
        return f'<Policy "{self._name}">'


_global = Policy("float32")


def _policy_of(policy):
    if isinstance(policy, Policy):
        return policy
    return Policy(policy)


def set_global_policy(policy):
    """Sets the policy of layers created from now on and of models compiled from now on (None: float32)."""
    global _global
    _global = Policy("float32") if policy is None else _policy_of(policy)


def global_policy():
    return _global
