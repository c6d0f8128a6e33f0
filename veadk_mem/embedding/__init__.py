"""Embedders behind one embed_batch contract."""
