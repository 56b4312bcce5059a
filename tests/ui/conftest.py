"""The whole app, built once per module on a temporary data directory, for wiring tests."""

from __future__ import annotations

import pytest

from lab.ui.blocks import LabContext, build_app


class BuiltApp:
    """A built (never launched) app, with its components looked up by elem_id."""

    panels = ("synth", "ab-a", "ab-b", "bench", "profile")  # the elem_id prefix of each panel

    def __init__(self, ctx: LabContext) -> None:
        self.ctx = ctx
        self.demo = build_app(ctx)
        self.ids = {b.elem_id: b for b in self.demo.blocks.values()
                    if getattr(b, "elem_id", None)}

    def component(self, elem_id: str):
        return self.ids[elem_id]

    def handlers(self, elem_id: str, event: str) -> list:
        """The functions Gradio runs when `event` fires on the component `elem_id`."""
        target = (self.component(elem_id)._id, event)
        return [fn for fn in self.demo.fns.values() if target in fn.targets]


@pytest.fixture(scope="module")
def built_app(tmp_path_factory) -> BuiltApp:
    app = BuiltApp(LabContext(tmp_path_factory.mktemp("lab-data")))
    yield app
    app.ctx.telemetry.stop()
