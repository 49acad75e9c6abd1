"""The keys at the bottom of every screen: Textual's Footer, rebuilt only when its keys change.

Textual's Footer removes and mounts all its key widgets again whenever the bindings may have
changed (a focus move, a screen pushed or popped, ``refresh_bindings``), and every rebuild styles
the new widgets and lays the whole screen out again. Most of those times the footer would show
exactly the keys it shows already: then this one keeps them. And a compact footer's keys are
born compact, rather than styled once and then again as they mount.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Footer
from textual.widgets._footer import FooterKey  # not exported; Textual is pinned to 8.2.x

_NOT_COMPOSED = object()


class KeysFooter(Footer):
    """A :class:`~textual.widgets.Footer` that skips a rebuild which would show the same keys."""

    def __init__(self, *, compact: bool = False, show_command_palette: bool = True) -> None:
        super().__init__(compact=compact, show_command_palette=show_command_palette)
        self._composed: object = _NOT_COMPOSED
        """What the keys were composed from (see :meth:`_shown_keys`)."""

    def _shown_keys(self) -> object:
        """Everything Footer.compose reads: whether the bindings are ready, each shown binding
        with its state, tooltip and key display, and the command palette's key if shown."""
        if not self._bindings_ready:
            return None
        app = self.app
        active = self.screen.active_bindings
        keys = tuple(
            (binding, enabled, tooltip, app.get_key_display(binding))
            for (_, binding, enabled, tooltip) in active.values()
            if binding.show
        )
        palette = None
        if self.show_command_palette and app.ENABLE_COMMAND_PALETTE:
            found = active.get(app.COMMAND_PALETTE_BINDING)
            if found is not None:
                palette = (found.binding, found.enabled, app.get_key_display(found.binding))
        return keys, palette

    def compose(self) -> ComposeResult:
        """Footer's keys, noting what they were composed from."""
        self._composed = self._shown_keys()
        for widget in super().compose():
            if self.compact and isinstance(widget, FooterKey):
                # A key's compact watcher adds this class as it mounts, and restyles the key
                # (its CSS matched again) after it was styled: with the class already there,
                # the key is styled once, as it ends up.
                widget.add_class("-compact", update=False)
            yield widget

    async def recompose(self) -> None:
        """Rebuild the keys, unless they would be the ones shown already."""
        if self.is_attached and not self._pruning and self._shown_keys() == self._composed:
            return
        await super().recompose()
