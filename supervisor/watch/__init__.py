"""Watching the work tree: which changes matter and when the tree has settled."""
