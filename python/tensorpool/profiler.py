# SPDX-License-Identifier: Apache-2.0
"""The memory profiler as a context manager (tensorpool.profiler)."""
