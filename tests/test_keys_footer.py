"""The keys footer keeps its key widgets while the keys it shows stay the same, and rebuilds them
as soon as a key is shown, hidden, enabled or disabled; its keys are compact from the start."""

from __future__ import annotations

from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static
from textual.widgets._footer import FooterKey

from paella_tui.widgets.keys_footer import KeysFooter


class Keys(App[None]):
    """``s`` shown, hidden or greyed out as the test says; ``g`` always there."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("g", "gates", "gates"),
        Binding("s", "stop", "stop"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.stop_state: bool | None = True

    def compose(self) -> ComposeResult:
        yield Static("body", id="body")
        yield KeysFooter(compact=True, show_command_palette=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.stop_state if action == "stop" else True


def keys(app: Keys) -> list[FooterKey]:
    return list(app.screen.query_one(KeysFooter).query(FooterKey))


def footer_line(app: Keys) -> str:
    """The bottom line of the screen as the terminal shows it."""
    return app.screen._compositor.render_strips()[-1].text


def shown(app: Keys) -> list[tuple[str, bool]]:
    return [(key.key, key.has_class("-disabled")) for key in keys(app)]


async def test_the_footer_follows_the_keys_and_keeps_them_while_they_stay() -> None:
    app = Keys()
    async with app.run_test(size=(60, 5)) as pilot:
        await pilot.pause()
        before = keys(app)
        assert shown(app) == [("g", False), ("s", False)]
        assert all(key.has_class("-compact") for key in before)
        assert "g gates" in footer_line(app) and "s stop" in footer_line(app)

        app.refresh_bindings()  # nothing changed: the same widgets
        await pilot.pause()
        assert keys(app) == before

        app.stop_state = None  # greyed out
        app.refresh_bindings()
        await pilot.pause()
        assert shown(app) == [("g", False), ("s", True)]

        app.stop_state = False  # hidden
        app.refresh_bindings()
        await pilot.pause()
        assert shown(app) == [("g", False)]
        assert "s stop" not in footer_line(app)

        app.stop_state = True
        app.refresh_bindings()
        await pilot.pause()
        assert shown(app) == [("g", False), ("s", False)]
        assert all(key.has_class("-compact") for key in keys(app))
