# SPDX-License-Identifier: Apache-2.0
"""The process's devices: configured once, before the first is materialised."""
