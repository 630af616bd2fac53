"""The web dashboard at /ui: static pages shipped in the package (no CDN, no build step).

The pages (app/ui/static) are plain HTML, CSS and JavaScript modules that call the /v1 API from
the browser with the same API keys (asked once, kept in session storage); the plots use uPlot,
vendored with its licence in app/ui/static/vendor (scripts/vendor_ui_assets.sh re-fetches it).
BrowserHeaders sends the browser's pages (these and /docs, /redoc) with a policy that keeps them
out of frames and, for the dashboard, runs none but its own scripts.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATIC = Path(__file__).resolve().parent / "static"

# The headers of every page and asset of the browser (the dashboard, /docs, /redoc): a page is
# never framed by another site (clickjacking), a file is never sniffed into another type (an
# uploaded name is never served, but a static file's type is what it says), no URL of the service
# (a dashboard fragment names a dataset or model) goes out as a Referer.
BROWSER_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]
# The dashboard's own pages also run no script but its files (no inline script, no eval), and
# reach only the service: text a tenant stored that ever ended up as markup could run nothing.
# /docs and /redoc are FastAPI's pages, whose inline script starts them: they are only kept out
# of frames.
DASHBOARD_CSP = (
    b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    b"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    b"frame-ancestors 'none'"
)
DOCS_CSP = b"frame-ancestors 'none'"
BROWSER_PATHS = ("/ui", "/docs", "/redoc")


class BrowserHeaders:
    """ASGI middleware: the headers above on the browser's pages and assets (not on /v1)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not (path == "/" or path.startswith(BROWSER_PATHS)):
            await self.app(scope, receive, send)
            return
        csp = DASHBOARD_CSP if path == "/" or path.startswith("/ui") else DOCS_CSP

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), *BROWSER_HEADERS]
                message = {**message, "headers": [*headers, (b"content-security-policy", csp)]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def install(app: FastAPI) -> None:
    """Serve the dashboard at /ui (and /ui/static), and point / at it; the browser's pages get
    the headers of BrowserHeaders."""
    app.add_middleware(BrowserHeaders)
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")

    @app.get("/ui", include_in_schema=False)
    @app.get("/ui/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)
