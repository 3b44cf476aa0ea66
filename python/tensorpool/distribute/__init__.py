# SPDX-License-Identifier: Apache-2.0
"""tf.distribute: the distribution strategies and their scopes."""
