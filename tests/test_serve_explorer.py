"""The explorer page in a real browser: Debian's chromium, headless, driven by selenium through chromedriver.

The page loads from the server alone (no CDN, nothing fetched elsewhere), runs TOUR on an example query,
and draws the rank trajectories; ``make browser`` installs chromium where it is missing (CI does).
``SERVE_SCREENSHOT=docs/serve-explorer.png`` keeps the browser's screenshot.
"""

from __future__ import annotations

import os
import shutil

import pytest

pytestmark = pytest.mark.slow

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,900",
)


def browser(profile):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def run_example(driver, url: str, topic: int = 1) -> None:
    """Open the explorer, pick an example query, run it, and wait for the answer."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver.get(f"{url}/explore")
    wait = WebDriverWait(driver, 120)
    wait.until(lambda d: len(Select(d.find_element(By.ID, "topic")).options) > 1)
    Select(driver.find_element(By.ID, "topic")).select_by_index(topic)
    driver.find_element(By.ID, "run").click()
    wait.until(
        lambda d: d.find_element(By.ID, "status").text in ("done",) or "error" in d.find_element(By.ID, "status").text
    )


@pytest.mark.skipif(
    not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)),
    reason="chromium and chromedriver are not installed (make browser installs them)",
)
def test_the_explorer_runs_tour_and_plots_the_trajectories(server, tmp_path):
    from selenium.webdriver.common.by import By

    driver = browser(tmp_path / "profile")
    try:
        run_example(driver, server.url)
        assert driver.find_element(By.ID, "status").text == "done"
        lines = driver.find_elements(By.CSS_SELECTOR, "#plot svg polyline.trajectory")
        assert lines, "no trajectory drawn"
        assert all(line.get_attribute("points").count(",") >= 3 for line in lines)  # one point per stage
        columns = driver.find_elements(By.CSS_SELECTOR, "#columns .column")
        titles = [c.find_element(By.TAG_NAME, "h3").text for c in columns]
        assert titles[0] == "first search" and "TOUR's ranking" in titles[-2] and "re-ranking" in titles[-1]
        assert driver.find_elements(By.CSS_SELECTOR, "#columns .label")  # the teacher's labels
        assert driver.find_elements(By.CSS_SELECTOR, "#columns .rel")  # relevance marks from --qrels
        assert "teacher calls" in driver.find_element(By.ID, "summary").text
        png = driver.get_screenshot_as_png()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        if os.environ.get("SERVE_SCREENSHOT"):  # docs/serve-explorer.png is made so
            with open(os.environ["SERVE_SCREENSHOT"], "wb") as f:
                f.write(png)
        logs = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not logs, logs  # no script error, nothing the page failed to load
    finally:
        driver.quit()


@pytest.mark.skipif(
    not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)),
    reason="chromium and chromedriver are not installed (make browser installs them)",
)
def test_the_explorer_asks_a_keyed_server_for_its_key(dense_index, bm25_index, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
    from serve_server import Server

    key = "explorer-key-0123456789abcdef"
    (tmp_path / "keys").write_text(key + "\n")
    with Server(
        "--index",
        str(dense_index),
        "--teacher",
        "bm25",
        "--api-keys",
        str(tmp_path / "keys"),
        "--threads",
        "1",
        "--data-dir",
        str(tmp_path / "data"),
        "--no-mcp",
    ) as server:
        driver = browser(tmp_path / "profile")
        try:
            driver.get(f"{server.url}/explore")
            wait = WebDriverWait(driver, 120)
            wait.until(lambda d: "API key" in d.find_element(By.ID, "status").text)
            assert driver.find_element(By.ID, "key-label").is_displayed()
            field = driver.find_element(By.ID, "key")
            field.send_keys(key)
            driver.find_element(By.ID, "query").click()  # leaving the field commits it
            wait.until(lambda d: len(Select(d.find_element(By.ID, "index")).options) == 1)
            driver.find_element(By.ID, "query").send_keys("vitamin D and bone density")
            driver.find_element(By.ID, "run").click()
            wait.until(
                lambda d: (
                    d.find_element(By.ID, "status").text == "done" or "error" in d.find_element(By.ID, "status").text
                )
            )
            assert driver.find_element(By.ID, "status").text == "done"
            assert driver.find_elements(By.CSS_SELECTOR, "#plot svg polyline.trajectory")
        finally:
            driver.quit()
