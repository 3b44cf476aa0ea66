# SPDX-License-Identifier: Apache-2.0
"""tensorpool: TensorFlow's and Keras's training API over tensorpool's C++ runtime.

    import tensorpool as tf
"""

from tensorpool import _tensorpool  # noqa: F401  (the C++ runtime; fails early when the build is missing)
