"""The API's browsable pages, ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), served offline."""

from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["offline_docs", "DOCS_ASSETS_PATH", "DOCS_CSP"]

#: Where the API pages' scripts, styles and icon are served from (files of the ``fastapi-offline`` package).
DOCS_ASSETS_PATH = "/docs-assets"

#: The API pages' Content-Security-Policy: everything from this server (inline scripts and styles, as
#: Swagger UI's page and ReDoc's styles need; ReDoc's search worker from a blob).
DOCS_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'")


def offline_docs(app: FastAPI) -> None:
    """Serve ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) with every asset from this server, none from a CDN.

    The assets are the static files of the ``fastapi-offline`` package (Swagger UI, Apache-2.0; ReDoc,
    MIT), a dependency of the policer extra; only its files are used.  ReDoc's Google fonts are left out.
    """
    def local_only(page: HTMLResponse) -> HTMLResponse:
        # The browser fetches nothing from elsewhere, even what the assets themselves would (ReDoc's logo
        # from cdn.redoc.ly: the image is then hidden).
        page.headers["Content-Security-Policy"] = DOCS_CSP
        return page

    static = files("fastapi_offline") / "static"
    app.mount(DOCS_ASSETS_PATH, StaticFiles(directory=str(static)), name="docs-assets")
    a = DOCS_ASSETS_PATH

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return local_only(get_swagger_ui_html(openapi_url="/openapi.json", title="XTC policer - Swagger UI",
                                   swagger_js_url=f"{a}/swagger-ui-bundle.js", swagger_css_url=f"{a}/swagger-ui.css",
                                   swagger_favicon_url=f"{a}/favicon.png"))

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return local_only(get_redoc_html(openapi_url="/openapi.json", title="XTC policer - ReDoc",
                              redoc_js_url=f"{a}/redoc.standalone.js", redoc_favicon_url=f"{a}/favicon.png",
                              with_google_fonts=False))
