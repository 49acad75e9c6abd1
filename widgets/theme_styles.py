"""Rich styles written with the Textual theme's variables, resolved against the running app's theme.

The tables and the header draw Rich ``Text``, which knows nothing of Textual's variables. Their
styles are written like CSS (``"bold $text-success"``, ``"bold reverse $error"``) and turned into
colours of the current theme when a cell is drawn; each widget redraws when the theme changes, so
the palette's theme switcher reaches every colour. Attributes (bold, dim, italic, reverse) pass
through unchanged: with ``NO_COLOR`` they, and the symbols, still say everything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.color import ColorType
from rich.style import Style
from rich.text import Span, Text

# The app whose message is being handled (what textual.active_app re-exports; named at its source
# for the type checker). Textual is pinned to 8.2.x, so this stays where it is.
from textual._context import active_app
from textual.app import App
from textual.markup import parse_style

# spec -> (the variables it was resolved with, the style). Keyed on the variables themselves, not
# the theme's name: between `app.theme = ...` and the CSS refresh the name is new but the
# variables are still the old theme's, and a style resolved then must not outlive them.
_cache: dict[str, tuple[dict[str, str], Style]] = {}

# The standard ANSI colours an agent's output (and the engine's decoded lines: ✗ red, ✓ green,
# $ and ● cyan, ✎ yellow) use, and the theme variable each one stands for (cyan, the commonest,
# gets the primary colour: in several themes the accent is the warning colour). Black and white (0, 7,
# 8, 15) stay: they mean "the terminal's own", not a state.
_ANSI_VARIABLES = {
    1: "$text-error",
    2: "$text-success",
    3: "$text-warning",
    4: "$text-secondary",
    5: "$text-accent",
    6: "$text-primary",
}


def theme_style(spec: str, app: App[Any] | None = None) -> Style:
    """``spec`` (``"bold $text-success"``) as a Rich style in the current theme's colours.

    Outside a running app (no theme to read) the variables are dropped and the attributes kept.
    """
    if app is None:
        try:
            app = active_app.get()
        except LookupError:
            app = None
    if app is None:
        plain = " ".join(word for word in spec.split() if not word.startswith("$"))
        return Style.parse(plain or "none")
    variables = app.theme_variables
    cached = _cache.get(spec)
    if cached is not None and cached[0] is variables:
        return cached[1]
    style = parse_style(spec, variables).rich_style
    _cache[spec] = (variables, style)
    return style


def on_theme_change(widget: Any, redraw: Callable[[], None]) -> None:
    """Call ``redraw`` whenever the app's theme changes (for as long as ``widget`` is mounted)."""
    widget.app.theme_changed_signal.subscribe(widget, lambda _theme: redraw())


def themed_ansi(text: Text, app: App[Any] | None = None) -> Text:
    """``text`` (read with ``Text.from_ansi``) with its standard ANSI colours (red, green, yellow,
    blue, magenta, cyan, bright or not) replaced by the theme's: the error, success, warning,
    secondary, accent and primary text colours. Attributes and other colours are kept."""
    spans = []
    for span in text.spans:
        style = span.style
        if isinstance(style, Style) and style.color is not None:
            color = style.color
            if color.type in (ColorType.STANDARD, ColorType.EIGHT_BIT) and color.number is not None:
                variable = _ANSI_VARIABLES.get(color.number % 8) if color.number < 16 else None
                if variable is not None:
                    style = style + Style(color=theme_style(variable, app).color)
        spans.append(Span(span.start, span.end, style))
    text.spans = spans
    return text
