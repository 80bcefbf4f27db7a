"""A user approving a device login through Keycloak's own HTML pages, over HTTP (no shortcut grant).

``approve(verification_uri_complete, username, password)`` does what a person in a browser does: opens
the link, fills the login form found on the page (its own ``action`` URL, hidden fields and cookies),
and presses "Yes" on the consent page ("Grant Access to <client>", which Keycloak shows for a device login). Pages are read with the stdlib
``html.parser``. Cookies: Keycloak marks its login cookies ``Secure`` (and ``Version=1``); a browser
still sends them to ``http://127.0.0.1`` (a potentially trustworthy origin), so this client does too.
"""

from __future__ import annotations

import http.cookiejar
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.request import Request

import httpx


@dataclass
class Form:
    """One ``<form>``: where it posts, its fields (hidden ones with their values) and its submit buttons."""

    action: str
    method: str
    attrs: dict[str, str]
    fields: dict[str, str] = field(default_factory=dict)
    buttons: dict[str, str] = field(default_factory=dict)  # name -> value of each named submit button


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[Form] = []
        self.title = ""
        self._in_title = False
        self._skip = 0  # inside <script>/<style>: not page text
        self._texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append(Form(a.get("action", ""), a.get("method", "get").lower(), a))
        elif tag in ("input", "button") and self.forms and a.get("name"):
            kind = a.get("type", "text" if tag == "input" else "submit").lower()
            target = self.forms[-1].buttons if kind == "submit" else self.forms[-1].fields
            target[a["name"]] = a.get("value", "")
        elif tag == "h1" and a.get("id") == "kc-page-title":
            self._in_title = True
        elif tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "h1":
            self._in_title = False
        elif tag in ("script", "style"):
            self._skip = max(0, self._skip - 1)

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        if data.strip() and not self._skip:
            self._texts.append(data.strip())

    @property
    def text(self) -> str:
        return " ".join(self._texts)


def parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    page.close()
    page.title = " ".join(page.title.split())
    return page


class _LoopbackIsTrustworthy(http.cookiejar.DefaultCookiePolicy):
    """Send ``Secure`` cookies to loopback over plain HTTP, as browsers do, and accept Keycloak's ``Version=1``."""

    def return_ok_secure(self, cookie: http.cookiejar.Cookie, request: Request) -> bool:
        return cookie.domain in ("127.0.0.1", "localhost", "localhost.local") or super().return_ok_secure(
            cookie, request
        )

    def return_ok_version(self, cookie: http.cookiejar.Cookie, request: Request) -> bool:
        return True


class Browser:
    """An httpx client that keeps cookies the way a browser would on loopback (httpx copies a client's
    jar with the default policy per request, so the jar is applied by event hooks instead)."""

    def __init__(self) -> None:
        self.cookies = httpx.Cookies(http.cookiejar.CookieJar(policy=_LoopbackIsTrustworthy()))
        self.http = httpx.Client(
            follow_redirects=True,
            timeout=30,
            event_hooks={"request": [self._send_cookies], "response": [self._keep_cookies]},
        )

    def _send_cookies(self, request: httpx.Request) -> None:
        request.headers.pop("cookie", None)
        self.cookies.set_cookie_header(request)

    def _keep_cookies(self, response: httpx.Response) -> None:
        self.cookies.extract_cookies(response)

    def close(self) -> None:
        self.http.close()


class ApprovalFailed(AssertionError):
    """Keycloak's pages did not lead to an approved device login (the page's title and text say why)."""


def _submit(browser: Browser, url: httpx.URL, form: Form, values: dict[str, str], button: str | None) -> httpx.Response:
    data = {**form.fields, **values}
    if button is not None:
        data[button] = form.buttons.get(button, "")
    action = url.join(form.action) if form.action else url
    return browser.http.post(action, data=data)


def approve(verification_uri_complete: str, username: str, password: str, *, deny: bool = False) -> str:
    """Sign in as ``username`` on Keycloak's device pages and approve (or deny) the login; the final page's title."""
    browser = Browser()
    try:
        resp = browser.http.get(verification_uri_complete)
        for _ in range(5):  # login form, then possibly the consent ("grant") page, then the result
            page = parse(resp.text)
            forms = {f.attrs.get("id", ""): f for f in page.forms}
            if "kc-form-login" in forms:
                resp = _submit(
                    browser, resp.url, forms["kc-form-login"], {"username": username, "password": password}, "login"
                )
            elif "kc-oauth" in forms or any("accept" in f.buttons for f in page.forms):
                form = forms.get("kc-oauth") or next(f for f in page.forms if "accept" in f.buttons)
                resp = _submit(browser, resp.url, form, {}, "cancel" if deny else "accept")
            elif "kc-user-verify-device-user-code-form" in forms:  # the code was not in the link: type it
                code = httpx.URL(verification_uri_complete).params.get("user_code", "")
                form = forms["kc-user-verify-device-user-code-form"]
                resp = _submit(browser, resp.url, form, {"device_user_code": code}, None)
            else:
                if resp.status_code != 200:
                    raise ApprovalFailed(f"HTTP {resp.status_code} at {resp.url}: {page.title}: {page.text[:300]}")
                return page.title
        raise ApprovalFailed(f"no end after five pages (last: {page.title!r} at {resp.url})")
    finally:
        browser.close()
