"""The web dashboard at /ui: static pages shipped in the package (no CDN, no build step).

The pages (app/ui/static) are plain HTML, CSS and JavaScript modules that call the /v1 API from
the browser with the same API keys (asked once, kept in session storage); the plots use uPlot,
vendored with its licence in app/ui/static/vendor (scripts/vendor_ui_assets.sh re-fetches it).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).resolve().parent / "static"


def install(app: FastAPI) -> None:
    """Serve the dashboard at /ui (and /ui/static), and point / at it."""
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")

    @app.get("/ui", include_in_schema=False)
    @app.get("/ui/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)
