# SPDX-License-Identifier: Apache-2.0
"""tf.config: devices, visibility, logical splits and memory growth."""
