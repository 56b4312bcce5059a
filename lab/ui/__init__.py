"""The lab's Gradio app, tab by tab; each tab calls only the public `lab` API."""

from __future__ import annotations

from pathlib import Path

from tqdm import tqdm


def launch(host: str = "127.0.0.1", port: int = 7860, data_dir: str | Path | None = None,
           warm: bool = True) -> None:
    """Build the app and serve it until interrupted.

    The default pipeline is loaded before the server opens, behind a progress bar, so the
    first click in the browser does not wait for weights.
    """
    from lab.ui.blocks import CSS, LabContext, build_app, data_dir_from_env

    steps = ["data directory", "default pipeline", "interface"]
    with tqdm(total=len(steps), desc="starting lab", unit="step") as bar:
        bar.set_postfix_str(steps[0])
        ctx = LabContext(Path(data_dir) if data_dir else data_dir_from_env())
        bar.update()
        bar.set_postfix_str(steps[1])
        if warm:
            ctx.cache.get(ctx.default, on_load=bar.set_postfix_str)
        bar.update()
        bar.set_postfix_str(steps[2])
        demo = build_app(ctx)
        bar.update()
    demo.queue(default_concurrency_limit=2)
    demo.launch(server_name=host, server_port=port, css=CSS, footer_links=[], show_error=True)
