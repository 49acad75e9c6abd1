"""Textual widgets of paella-tui, one per file, each showing one part of a run from the engine's events and state."""
