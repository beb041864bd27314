"""Only an admin gets anything of the dashboard: no token, a user's token or a forged one get an error and nothing else."""

from __future__ import annotations

from typing import Any

from service.settings import Settings
from tests.admin.helpers import admin_client, csrf_of
from tests.callers import ADMIN, ALICE, forged, token_of

READS = ["/admin/api/overview", "/admin/api/series", "/admin/api/workers", "/admin/api/index", "/admin/api/jobs", "/admin/api/jobs/some-job", "/admin/chart.svg"]
ACTIONS = ["/admin/api/jobs/some-job/retry", "/admin/api/jobs/some-job/abort", "/admin/api/sweep", "/admin/api/warm"]
FORGED = forged("root", admin=True)


async def _refused(response: Any, status: int) -> None:
    body = await response.json()
    assert response.status == status, (response.url, response.status, body)
    assert set(body) == {"error"} and set(body["error"]) <= {"code", "message"}, body


async def test_api_refuses_missing_forged_and_user_tokens(settings: Settings) -> None:
    async with admin_client(settings) as client:
        for path in READS:
            await _refused(await client.get(path), 401)
            await _refused(await client.get(path, headers=FORGED), 401)
            await _refused(await client.get(path, headers=ALICE), 403)
            await _refused(await client.get(path, cookies={"agentsearch_admin": "not-a-token"}), 401)
            await _refused(await client.get(path, headers={"Authorization": "Basic cm9vdDpyb290"}), 401)
        for path in ACTIONS:
            await _refused(await client.post(path, json={}), 401)
            await _refused(await client.post(path, json={}, headers=ALICE), 403)
            await _refused(await client.post(path, json={}, headers=FORGED), 401)
        # The pages send a browser without a session to the login form.
        for path in ("/admin", "/admin/jobs/some-job"):
            response = await client.get(path, allow_redirects=False)
            assert response.status == 303 and response.headers["Location"] == "/admin/login"
        for path in ("/admin", "/admin/jobs/some-job"):
            response = await client.get(path, headers=ALICE, allow_redirects=False)
            assert response.status == 403 and "admin token" in await response.text()
        # Nothing of the admin API leaked into the refusals above; an admin gets the data.
        assert (await client.get("/admin/api/overview", headers=ADMIN)).status == 200


async def test_login_cookie_is_httponly_strict_and_actions_need_csrf(settings: Settings) -> None:
    async with admin_client(settings) as client:
        response = await client.get("/admin/login")
        assert response.status == 200 and 'name="token"' in await response.text()

        user = await client.post("/admin/login", data={"token": token_of(ALICE)}, allow_redirects=False)
        assert user.status == 403 and "admin token" in await user.text()
        assert "agentsearch_admin" not in user.cookies
        bad = await client.post("/admin/login", data={"token": "garbage"}, allow_redirects=False)
        assert bad.status == 401 and "malformed token" in await bad.text()

        login = await client.post("/admin/login", data={"token": token_of(ADMIN)}, allow_redirects=False)
        assert login.status == 303 and login.headers["Location"] == "/admin"
        cookie_header = login.headers["Set-Cookie"]
        for attribute in ("agentsearch_admin=", "HttpOnly", "SameSite=Strict", "Path=/admin", "Max-Age="):
            assert attribute in cookie_header, cookie_header
        cookies = {"agentsearch_admin": login.cookies["agentsearch_admin"].value}

        page = await client.get("/admin", cookies=cookies)
        html = await page.text()
        assert page.status == 200 and "signed in as <b>root</b>" in html
        assert '<meta http-equiv="refresh"' in html and page.headers["X-Frame-Options"] == "DENY"
        csrf = csrf_of(html)

        # An action with the cookie alone, or a wrong token, or from another site, is refused.
        await _refused(await client.post("/admin/api/sweep", cookies=cookies, json={}), 403)
        await _refused(await client.post("/admin/api/sweep", cookies=cookies, headers={"X-CSRF-Token": "0" * 40}), 403)
        cross = await client.post("/admin/api/sweep", cookies=cookies, headers={"X-CSRF-Token": csrf, "Origin": "https://evil.example"})
        await _refused(cross, 403)
        # With the page's token: as a fetch (JSON answer) and as a plain form (redirect back with a notice).
        fetched = await client.post("/admin/api/sweep", cookies=cookies, headers={"X-CSRF-Token": csrf, "Accept": "application/json"}, data={"csrf": csrf})
        assert fetched.status == 202 and (await fetched.json())["function"] == "sweep"
        posted = await client.post("/admin/api/sweep", cookies=cookies, data={"csrf": csrf}, allow_redirects=False)
        assert posted.status == 303 and posted.headers["Location"] == "/admin"
        notice = posted.cookies["agentsearch_admin_notice"].value
        shown = await client.get("/admin", cookies={**cookies, "agentsearch_admin_notice": notice})
        assert "Enqueued the sweep as job" in await shown.text()

        # A session cookie of another secret's token is refused like no cookie.
        forged = await client.get("/admin/api/overview", cookies={"agentsearch_admin": FORGED["Authorization"][7:]})
        await _refused(forged, 401)

        logout = await client.post("/admin/logout", cookies=cookies, data={"csrf": csrf}, allow_redirects=False)
        assert logout.status == 303 and logout.headers["Location"] == "/admin/login"
        assert 'agentsearch_admin=""' in logout.headers["Set-Cookie"] or "Max-Age=0" in logout.headers["Set-Cookie"]
