# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures of the Python package's tests (run by ctest with PYTHONPATH=build/python)."""
