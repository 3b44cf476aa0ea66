# SPDX-License-Identifier: Apache-2.0
"""TensorFlow's exception classes (tf.errors), raised for the C++ runtime's errors."""
