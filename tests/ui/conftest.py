"""The whole app, built once per module on a temporary data directory, for wiring tests; and,
for browser tests, the app running as a subprocess with a headless Chromium per module."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from browser import CHROME_ARGS, CHROMIUM, App
from playwright.sync_api import sync_playwright

from lab.ui.blocks import build_app
from lab.ui.context import LabContext

APPS_BEFORE = pytest.StashKey[int]()  # how many apps had started before a test's set-up


class BuiltApp:
    """A built (never launched) app, with its components looked up by elem_id."""

    panels = ("synth", "ab-a", "ab-b", "bench", "profile", "serve")  # each panel's elem_id prefix

    def __init__(self, ctx: LabContext) -> None:
        self.ctx = ctx
        self.demo = build_app(ctx)
        self.ids = {b.elem_id: b for b in self.demo.blocks.values()
                    if getattr(b, "elem_id", None)}

    def component(self, elem_id: str):
        return self.ids[elem_id]

    def handlers(self, elem_id: str, event: str) -> list:
        """The Python functions Gradio runs when `event` fires on the component `elem_id`,
        following `.then` past a browser-only step (a `js=` with no Python function)."""
        target = (self.component(elem_id)._id, event)
        found = [fn for fn in self.demo.fns.values() if target in fn.targets]
        while found and all(fn.fn is None for fn in found):
            ids = {fn._id for fn in found}
            found = [fn for fn in self.demo.fns.values() if fn.trigger_after in ids]
        return found


@pytest.fixture(scope="module")
def built_app(tmp_path_factory) -> BuiltApp:
    app = BuiltApp(LabContext(tmp_path_factory.mktemp("lab-data")))
    yield app
    app.ctx.telemetry.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report ends with the log of every app it could have talked to: those
    still running, and those it started itself (a browser test fails on what the page shows;
    the reason is often in the server's log)."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    since = item.stash.get(APPS_BEFORE, len(App.started))
    for n, app in enumerate(App.started):
        if n >= since or app.proc.poll() is None:
            report.sections.append((f"app log ({app.url}, last 4000 characters)",
                                    app.log_tail()))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[APPS_BEFORE] = len(App.started)


@pytest.fixture(scope="module")
def browser(request):
    assert Path(CHROMIUM).exists(), "install Chromium: apt-get install -y chromium"
    with sync_playwright() as pw:
        profile = f"chromium-{os.getpid()}-{request.module.__name__}"
        context = pw.chromium.launch_persistent_context(
            user_data_dir=Path(os.environ.get("TMPDIR", "/tmp")) / profile,
            executable_path=CHROMIUM, headless=True, args=CHROME_ARGS,
            viewport={"width": 1400, "height": 1000},
        )
        yield context
        context.close()


@pytest.fixture
def page(browser):
    page = browser.new_page()
    yield page
    page.close()


@pytest.fixture(scope="module")
def app(tmp_path_factory, request):
    root = tmp_path_factory.mktemp(request.module.__name__)
    running = App(root / "lab-data", root / "app.log")
    yield running
    running.kill()
