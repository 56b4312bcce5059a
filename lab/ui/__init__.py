"""The lab's Gradio app, tab by tab; each tab calls only the public `lab` API."""

from __future__ import annotations

from pathlib import Path

from tqdm import tqdm


def launch(host: str = "127.0.0.1", port: int = 7860, data_dir: str | Path | None = None,
           warm: bool = True) -> None:
    """Build the app and serve it until interrupted.

    The default pipeline is loaded before the server opens, behind a progress bar, so the
    first click in the browser does not wait for weights; loading it also runs the pre-load
    estimate once (its sizes and device probe are cached), so the first click's estimate is
    instant too.
    """
    from lab.data_dir import data_dir as default_data_dir
    from lab.ui.blocks import build_app
    from lab.ui.context import LabContext

    steps = ["data directory", "default pipeline", "interface"]
    with tqdm(total=len(steps), desc="starting lab", unit="step") as bar:
        bar.set_postfix_str(steps[0])
        ctx = LabContext(default_data_dir(data_dir))
        bar.update()
        bar.set_postfix_str(steps[1])
        if warm:
            ctx.cache.get(ctx.default, on_load=bar.set_postfix_str)
        bar.update()
        bar.set_postfix_str(steps[2])
        demo = build_app(ctx)
        bar.update()
    serve(demo, ctx, host, port)


def serve(demo, ctx, host: str, port: int) -> None:
    """Serve the UI and the player's PCM route from one server on one port.

    The route must sit beside Gradio's own, so the app is a FastAPI app with Gradio mounted
    at its root rather than Gradio's own launcher.
    """
    import gradio as gr
    import uvicorn
    from fastapi import FastAPI

    from lab.ui import player
    from lab.ui.blocks import CSS

    app = FastAPI()
    player.mount(app, ctx.player)
    demo.queue(default_concurrency_limit=2)
    gr.mount_gradio_app(app, demo, path="/", css=CSS, head=player.head(), footer_links=[],
                        show_error=True)
    print(f"TTS Optimization Lab on http://{host}:{port}/", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
