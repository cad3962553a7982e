"""Injective data-movement ops: reshape, transpose, concatenate, layout_transform (to be filled)."""
