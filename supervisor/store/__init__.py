"""The git store: the workspace, snapshots into private trees, checkpoints, steps, rollbacks, tree diffs and the mirror."""
