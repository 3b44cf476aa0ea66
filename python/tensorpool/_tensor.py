# SPDX-License-Identifier: Apache-2.0
"""Tensors and dtypes: numpy in and out."""
