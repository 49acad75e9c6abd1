"""paella-tui: the command line, the Textual app, its screens and the wiring between engine and UI."""

__version__ = "0.1.0"
