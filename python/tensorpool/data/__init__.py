# SPDX-License-Identifier: Apache-2.0
"""tf.data: Dataset over numpy arrays."""
