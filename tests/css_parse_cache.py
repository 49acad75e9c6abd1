"""Textual's parsed CSS, kept for the whole test process rather than for one App.

Every App parses its stylesheet afresh: the App's own files and the ``DEFAULT_CSS`` of each widget
class as it first mounts, and all of it again when the theme's variables are set (``reparse``
starts from an empty cache). Textual keeps the parsed rules per ``Stylesheet`` only, so a test
process that starts a hundred Apps parsed the same text, with the same variables, a hundred times
(about 12 ms of an App's ~130 ms start at 120x36). A person's ``paella run`` starts one App.

Parsing is a pure function of the text, where it was read from, its kind, tie breaker and scope,
and the variables substituted into it; Textual reads the resulting rule sets and never changes
them (``Stylesheet.apply`` only reads ``rule.styles``). So the rule sets of the same key are
shared between Apps, and everything else (the rules map, the styles applied to each node, the
per-App caches) is still each App's own.
"""

from __future__ import annotations

from typing import Any

from textual.css.model import RuleSet
from textual.css.stylesheet import Stylesheet

_PARSED: dict[tuple[Any, ...], list[RuleSet]] = {}
_VARIABLES: dict[int, tuple[dict[str, str], tuple[tuple[str, str], ...]]] = {}


def _variables_key(sheet: Stylesheet) -> tuple[tuple[str, str], ...]:
    """The sheet's variables as a key, worked out once per variables mapping (a theme's are
    set as a new dict, never changed in place)."""
    variables = sheet._variables
    kept = _VARIABLES.get(id(variables))
    if kept is None or kept[0] is not variables:
        kept = (variables, tuple(sorted(variables.items())))
        _VARIABLES[id(variables)] = kept
    return kept[1]


def install() -> None:
    """Share parsed rule sets between every App this process starts (idempotent)."""
    if getattr(Stylesheet._parse_rules, "_shared", False):
        return
    parse_rules = Stylesheet._parse_rules

    def shared_parse_rules(
        self: Stylesheet,
        css: str,
        read_from: Any,
        is_default_rules: bool = False,
        tie_breaker: int = 0,
        scope: str = "",
    ) -> list[RuleSet]:
        key = (css, read_from, is_default_rules, tie_breaker, scope, _variables_key(self))
        rules = _PARSED.get(key)
        if rules is None:
            rules = parse_rules(self, css, read_from, is_default_rules, tie_breaker, scope)
            _PARSED[key] = rules
        return rules

    shared_parse_rules._shared = True  # type: ignore[attr-defined]
    Stylesheet._parse_rules = shared_parse_rules  # type: ignore[method-assign]
