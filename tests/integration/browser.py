"""A real headless browser for the web page's tests: the OS's Chromium, driven by
Selenium through the OS's chromedriver (no browser or driver is downloaded).

``.ci/run`` installs ``chromium`` and ``chromium-driver``; where they are missing a test
skips saying so, except under CI=true, where that is a failure.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
# what Chromium needs as root in a container, and what keeps it off the network
FLAGS = (
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


def _found() -> tuple[str, str] | str:
    """(browser, driver) paths, or why they cannot be used."""
    browser = next((p for p in map(shutil.which, CHROMIUM) if p), None)
    driver = shutil.which("chromedriver")
    missing = []
    if browser is None:
        missing.append("chromium")
    if driver is None:
        missing.append("chromedriver")
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package (pip install -e '.[dev]')")
    if missing:
        return (
            f"no {' or '.join(missing)} here: apt-get install -y chromium chromium-driver "
            "(.ci/run does)"
        )
    assert browser is not None and driver is not None
    return browser, driver


def need_browser() -> tuple[str, str]:
    found = _found()
    if isinstance(found, str):
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but the browser test cannot run: {found}")
        pytest.skip(found)
    return found


@contextmanager
def chromium(width: int = 1100, height: int = 850) -> Iterator[Any]:
    """A fresh headless Chromium (its own profile directory), quit afterwards."""
    browser, driver_path = need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="corral-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(options=opts, service=Service(driver_path))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
