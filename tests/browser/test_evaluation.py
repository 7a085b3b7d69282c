"""The console's evaluation page in a real browser (app/static/evaluation.js): issue 34.

The real service (uvicorn on 127.0.0.1, the real `atelier` pipeline and judges, SQLite)
with the scripted model of tests/app/test_evaluation.py on loopback: the writer writes
the marker 青禾 unless its prompt asks for 玻尿酸精华 (version 2 of the preset must
include it), the pairwise judge prefers the post with 青禾 wherever it is shown, the
post judge scores posts. The browser makes a dataset from briefs typed in (and one
from a post of the library), runs an experiment of the preset's two versions, watches
it run (the writers are held until the page shows the runs under way), reads the
comparison and the posts side by side with the judge's reasons, makes the winning
version the latest, then sets the preset's online sampling rate and reads its report;
each step is checked through the API, in both languages, on a desktop and a phone
width. Chromium as in tests/browser/test_console.py.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright import sync_api

from tests.app.harness import LiveServer, service_settings
from tests.app.test_evaluation import BRIEFS, MARKER, TERM, EvaluationModel
from tests.browser.test_console import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS, TIMEOUT_MS
from tests.browser.test_schedules import assert_in_language, language
from tests.support.judges import content_judge
from tests.support.scripted_openai import ScriptedOpenAIServer

if not CHROMIUM.exists() and os.environ.get("CI") != "true":
    pytest.skip("needs Debian's chromium at /usr/bin/chromium", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

#: An experiment of 2 briefs × 2 arms and its judge, with the pipeline's real stages.
EXPERIMENT_MS = 150_000
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def model() -> EvaluationModel:
    model = EvaluationModel()
    model.pairwise = content_judge(MARKER)
    return model


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, model: EvaluationModel) -> Iterator[str]:
    with ScriptedOpenAIServer(model) as llm:
        settings = service_settings(tmp_path_factory.mktemp("evaluation") / "data", llm.base_url)
        with LiveServer(settings, None) as live:  # None: the real atelier pipeline
            yield live.url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(params=["zh", "en"])
def page(request: pytest.FixtureRequest, browser: Any, server: str) -> Iterator[Any]:
    """A console page in the parameter's language, with nothing left of an earlier test."""
    with httpx.Client(base_url=server, timeout=30) as http:
        for experiment in http.post("/experiments/search", json={"limit": 100}).json():
            http.delete(f"/experiments/{experiment['experiment_id']}").raise_for_status()
        for dataset in http.post("/datasets/search", json={"limit": 100}).json():
            http.delete(f"/datasets/{dataset['dataset_id']}").raise_for_status()
        for preset in presets(http):
            http.delete(f"/assistants/{preset['assistant_id']}").raise_for_status()
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
    context.add_init_script(f"localStorage.setItem('atelier.lang', '{request.param}')")
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("dialog", lambda dialog: dialog.accept())
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield page
    context.close()
    assert not errors, f"errors on the page: {errors}"


def presets(http: httpx.Client) -> list[dict[str, Any]]:
    found = http.post("/assistants/search", json={"graph_id": "atelier", "limit": 100}).json()
    return [a for a in found if a["assistant_id"] != "atelier"]


def two_versions(http: httpx.Client) -> str:
    """A preset whose version 2 must include TERM, which the writer never writes."""
    preset = http.post(
        "/assistants",
        json={"graph_id": "atelier", "name": "青禾护肤", "context": {"brand_name": "青禾护肤"}},
    ).json()
    changed = http.patch(
        f"/assistants/{preset['assistant_id']}",
        json={"context": {"brand_name": "青禾护肤", "must_include": [TERM]}},
    )
    assert changed.json()["version"] == 2
    return str(preset["assistant_id"])


def post_once(http: httpx.Client, assistant_id: str, request: str) -> str:
    """Write a post with the assistant; return its run's id."""
    thread_id = http.post("/threads", json={}).json()["thread_id"]
    body = {
        "assistant_id": assistant_id,
        "input": {"request": request, "auto_confirm": True, "fast_mode": True},
    }
    answer = http.post(f"/threads/{thread_id}/runs/wait", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.headers["Content-Location"].split("/")[4]


def pick_arm(page: Any, index: int, assistant_id: str, version: int, name: str) -> None:
    arm = page.locator("#eval-arms .eval-arm").nth(index)
    arm.locator("select.arm-assistant").select_option(assistant_id)
    arm = page.locator("#eval-arms .eval-arm").nth(index)  # drawn again for the preset
    arm.locator(f"select.arm-version option[value='{version}']").wait_for(state="attached")
    arm.locator("select.arm-version").select_option(str(version))
    arm.locator("input.arm-name").fill(name)


def no_sideways_scroll(page: Any) -> None:
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"the page is {width}px wide"


def test_compare_two_versions_watch_it_run_use_the_winner_and_sample_the_preset(
    page: Any, server: str, model: EvaluationModel
) -> None:
    http = httpx.Client(base_url=server, timeout=30)
    preset_id = two_versions(http)
    page.goto(f"{server}/#evaluate")
    page.wait_for_selector("#evaluation:not([hidden])")
    assert page.is_hidden("main.layout")
    assert_in_language(page, "#evaluation")

    # A dataset from two briefs typed in.
    page.fill("#eval-dataset-name", "护肤简报")
    page.fill("#eval-briefs", "\n".join(BRIEFS[:2]))
    page.click("#eval-create-briefs")
    page.wait_for_selector("#eval-examples:not([hidden]) #eval-example-list li >> nth=1")
    (dataset,) = http.post("/datasets/search", json={}).json()
    assert dataset["name"] == "护肤简报" and dataset["example_count"] == 2
    examples = http.get(f"/datasets/{dataset['dataset_id']}/examples").json()
    assert [e["input"]["request"] for e in examples] == BRIEFS[:2]
    assert all(e["input"]["fast_mode"] and e["input"]["platform"] for e in examples)
    assert BRIEFS[0] in page.inner_text("#eval-example-list")

    # An experiment of the preset's two versions; the writers wait until it is watched.
    assert page.input_value("#eval-exp-dataset") == dataset["dataset_id"]
    pick_arm(page, 0, preset_id, 1, "v1")
    pick_arm(page, 1, preset_id, 2, "v2")
    model.hold.clear()
    try:
        page.click("#eval-start")
        page.wait_for_selector(
            "#eval-experiment:not([hidden]) #eval-exp-status[data-status='running']"
        )
        (experiment,) = http.post("/experiments/search", json={}).json()
        arms = [(a["name"], a["assistant_id"], a["version"]) for a in experiment["arms"]]
        assert arms == [("v1", preset_id, 1), ("v2", preset_id, 2)]
        bars = page.locator("#eval-progress .eval-bar")
        bars.nth(2).wait_for()
        assert [bars.nth(i).get_attribute("data-total") for i in range(3)] == ["2", "2", "2"]
        assert [bars.nth(i).get_attribute("data-done") for i in range(3)] == ["0", "0", "0"]
        assert_in_language(page, "#eval-experiment")
    finally:
        model.hold.set()
    page.wait_for_selector("#eval-exp-status[data-status='success']", timeout=EXPERIMENT_MS)
    page.wait_for_function(
        "() => [...document.querySelectorAll('#eval-progress .eval-bar')]"
        ".every((bar) => bar.dataset.done === bar.dataset.total)"
    )

    # The comparison: v1 wins both pairs and passes its checks; v2 fails must_include.
    detail = http.get(f"/experiments/{experiment['experiment_id']}").json()
    summary = {arm["name"]: arm for arm in detail["summary"]["arms"]}
    assert (summary["v1"]["wins"], summary["v2"]["losses"]) == (2, 2)
    row = page.locator("#eval-summary tr[data-arm='v1']")
    assert row.get_attribute("class") == "winner"
    assert row.locator(".record").inner_text() == "2 / 0 / 0"
    assert row.locator(".pass-rate").inner_text() == "100%"
    low, high = (round(summary["v1"][k] * 100) for k in ("win_rate_low", "win_rate_high"))
    assert row.locator(".win-rate").inner_text() == f"100% [{low}%–{high}%]"
    other = page.locator("#eval-summary tr[data-arm='v2']")
    assert other.locator(".record").inner_text() == "0 / 0 / 2"
    assert other.locator(".pass-rate").inner_text() == "0%"
    assert other.locator("button.use").count() == 0
    settled = "差别还不能确定" if language(page) == "zh" else "not settled yet"
    assert settled in page.inner_text("#eval-verdict")  # 2 of 2: the interval includes 50 %

    # The posts side by side, with the judge's reasons in both orders.
    cards = page.locator("#eval-results .eval-example")
    assert cards.count() == 2
    for index in range(2):
        card = cards.nth(index)
        assert BRIEFS[index] in card.locator(".brief").inner_text()
        assert card.locator(".eval-post[data-arm='v1'][data-passed='true']").count() == 1
        failed = card.locator(".eval-post[data-arm='v2'][data-passed='false']")
        assert ("必含内容" if language(page) == "zh" else "Must include") in failed.inner_text()
        assert MARKER in card.locator(".eval-post[data-arm='v1'] .eval-post-body").inner_text()
        assert card.locator(".eval-pair[data-winner='v1']").count() == 1
        picked = "选了 v1" if language(page) == "zh" else "picked v1"
        orders = card.locator(".eval-orders li")
        assert orders.count() == 2 and all(picked in orders.nth(i).inner_text() for i in range(2))
        reasons = card.locator(".eval-orders .reasons")
        assert reasons.count() == 2 and all(
            f"写到了{MARKER}" in reasons.nth(i).inner_text() for i in range(2)
        )
    assert_in_language(page, "#evaluation")
    page.screenshot(
        path=str(SCREENSHOTS / f"console-evaluation-{language(page)}.png"), full_page=True
    )
    page.set_viewport_size(PHONE)
    no_sideways_scroll(page)
    page.screenshot(
        path=str(SCREENSHOTS / f"console-evaluation-phone-{language(page)}.png"), full_page=True
    )
    page.emulate_media(color_scheme="dark")
    page.screenshot(path=str(SCREENSHOTS / f"console-evaluation-phone-dark-{language(page)}.png"))
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 1280, "height": 900})

    # "Use this version" on the winner: version 1 becomes the one posts use.
    assert http.get(f"/assistants/{preset_id}").json()["version"] == 2
    row.locator("button.use").click()
    page.wait_for_selector("#eval-note:not([hidden])")
    assert http.get(f"/assistants/{preset_id}").json()["version"] == 1

    # The preset's online evaluation, from the brand presets panel.
    page.click("#evaluation .eval-head a")
    page.wait_for_selector("main.layout:not([hidden])")
    page.click("#brands summary")
    page.click(f"#brands-list li[data-assistant='{preset_id}'] button.evaluation")
    page.wait_for_selector("#online-evaluation:not([hidden])")
    assert page.input_value("#online-rate") == "0"
    page.fill("#online-rate", "100")
    page.click("#online-save")
    page.wait_for_selector("#online-note:not([hidden])")
    assert http.get(f"/assistants/{preset_id}/evaluation").json()["sample_rate"] == 1.0
    run_id = post_once(http, preset_id, BRIEFS[2])
    http.post(f"/runs/{run_id}/feedback", json={"key": "quality", "score": 1}).raise_for_status()
    deadline = time.monotonic() + 60
    while (report := http.get(f"/assistants/{preset_id}/evaluation").json())["judge"]["judged"] < 1:
        assert time.monotonic() < deadline, "the sampled run was not judged"
        time.sleep(0.5)
    page.click("#online-refresh")
    page.wait_for_selector("#online-report dd[data-metric='judged']:text-is('1')")
    metric = lambda key: page.inner_text(f"#online-report dd[data-metric='{key}']")  # noqa: E731
    assert metric("mean") == f"{report['judge']['mean_score']:.2f}"
    assert metric("thumbs").startswith("100%")
    agreement = report["agreement"]
    assert agreement["n"] == 1
    assert metric("agreement").startswith(f"{round(agreement['rate'] * 100)}%")
    assert ("1 篇两者都有" if language(page) == "zh" else "on 1 with both") in metric("agreement")
    assert_in_language(page, "#online-evaluation")
    page.locator("#brands").screenshot(
        path=str(SCREENSHOTS / f"console-online-evaluation-{language(page)}.png")
    )
    other_language = "en" if language(page) == "zh" else "zh"
    page.select_option("#lang", other_language)  # the switch redraws the report too
    assert_in_language(page, "#online-evaluation")
    http.close()


def test_a_dataset_from_picked_posts_then_deleted(page: Any, server: str) -> None:
    http = httpx.Client(base_url=server, timeout=30)
    post_once(http, "atelier", BRIEFS[3])
    page.goto(f"{server}/#evaluate")
    item = page.locator("#eval-posts li", has_text=BRIEFS[3]).first
    thread_id = item.locator("input").get_attribute("value")
    item.locator("input").check()
    page.fill("#eval-dataset-name", "从作品来")
    page.click("#eval-create-posts")
    page.wait_for_selector("#eval-example-list li")
    (dataset,) = http.post("/datasets/search", json={}).json()
    (example,) = http.get(f"/datasets/{dataset['dataset_id']}/examples").json()
    assert example["input"]["request"] == BRIEFS[3]
    assert example["source"]["thread_id"] == thread_id
    assert_in_language(page, "#eval-datasets")
    page.locator(f"#eval-dataset-list li[data-dataset='{dataset['dataset_id']}'] .delete").click()
    page.wait_for_selector("#eval-datasets-empty:not([hidden])")
    assert http.post("/datasets/search", json={}).json() == []
    http.close()
