# SPDX-License-Identifier: Apache-2.0
"""Per-device memory: summaries, snapshots and estimates (tensorpool.memory)."""
