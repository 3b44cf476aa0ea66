# SPDX-License-Identifier: Apache-2.0
"""tf.keras: Sequential models, Dense layers, optimizers, losses, metrics and callbacks."""
