"""A real headless Chromium for the dashboard tests and screenshots: Debian's `chromium`
and `chromium-driver`, driven by Selenium, with a fresh profile, downloads into a given
folder, and nothing fetched from the internet by the browser itself."""

from __future__ import annotations

import tempfile
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage")


def chromium(downloads: Path, width: int = 1280, height: int = 900,  # noqa: ANN201
             javascript: bool = True):
    """A selenium.webdriver.Chrome on /usr/bin/chromium (quit() it when done)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}")
    options.add_argument(f"--window-size={width},{height}")
    options.add_experimental_option("prefs", {
        "download.default_directory": str(downloads), "download.prompt_for_download": False,
        "profile.managed_default_content_settings.javascript": 1 if javascript else 2})
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
