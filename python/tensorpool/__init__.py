# SPDX-License-Identifier: Apache-2.0
"""tensorpool: TensorFlow's and Keras's training API over tensorpool's C++ runtime.

    import tensorpool as tf

Submodules follow TensorFlow's names (config, distribute, keras, data, errors); tensorpool.memory and
tensorpool.profiler are tensorpool's own. docs/python.md lists what matches TensorFlow and what differs.
"""

from tensorpool import _tensorpool  # noqa: F401  (the C++ runtime; fails early when the build is missing)
from tensorpool import errors  # noqa: F401  (first: the others raise its classes)
from tensorpool import _runtime  # noqa: F401
from tensorpool._tensor import *  # noqa: F401,F403
from tensorpool import config, data, distribute, keras, memory, profiler  # noqa: F401

__version__ = "0.1.0"
