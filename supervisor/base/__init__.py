"""Small pieces every room uses: errors a person reads, durations, safe file writes, owned locks, path globs."""
