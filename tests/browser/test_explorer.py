"""Notebook 06's explorer, rendered in a real browser: JupyterLab serves the notebook, headless Chromium
(Debian's, driven by Playwright) runs it, the sliders render, and moving the scale along the strongest
receptor flips the pronoun the explorer prints. Its screenshot is docs/explorer.png
(``SAVE_EXPLORER_SCREENSHOT=1`` rewrites it).

Needs the `chromium` package (``make test`` installs it on Debian, see the Makefile); a missing browser
fails the test with what to install, it never skips."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from papermill.iorw import load_notebook_node
from papermill.parameterize import parameterize_notebook

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("SVDIRS_CHROMIUM", "/usr/bin/chromium")
SCREENSHOT = ROOT / "docs" / "explorer.png"
PORT = 8917

pytestmark = pytest.mark.slow


def prepared_notebook(folder: Path) -> Path:
    """Notebook 06 with its parameters set as a person exploring would: the embedded model, the committed
    gender circuit, the explorer on; the reference run's prompts, so that the explorer opens on its strongest
    receptor (L26.H2, OV direction 2) and a prompt it flips, with one steering scale and one random control so
    that it runs in about a minute."""
    notebook = load_notebook_node(str(ROOT / "notebooks" / "06_steering.ipynb"))
    circuit = ROOT / "figures" / "02_masking-gender-smollm2-135m" / "circuits" / "gender-ours-alpha0.000195.safetensors"
    notebook = parameterize_notebook(notebook, dict(model_name="smollm2-135m", scales=[1], n_random=1, interactive=True,
                                                    circuit=str(circuit), out_dir=str(folder / "out")))
    path = folder / "06_steering.ipynb"
    nbformat.write(notebook, path)
    return path


def chromium_version() -> int:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no browser at {CHROMIUM}: install Debian's chromium (apt-get install chromium) or set "
                    "SVDIRS_CHROMIUM to a Chromium binary")
    out = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout
    return int(out.split()[1].split(".")[0])


@pytest.fixture
def jupyter_lab(tmp_path):
    """A JupyterLab server on localhost, no token, serving ``tmp_path``; stopped after the test."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "OMP_NUM_THREADS": "2"}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={PORT}", "--port-retries=0",
         "--IdentityProvider.token=", "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True", "--allow-root",
         "--LabApp.news_url=", "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={tmp_path}"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "server.log", "w"))
    yield f"http://127.0.0.1:{PORT}", tmp_path / "server.log", server
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()


def open_lab(page, url: str, server, deadline: float):
    while True:  # the server takes a few seconds to listen
        if server.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with status {server.returncode}")
        try:
            page.goto(url, timeout=10_000)
            return
        except Exception:
            if time.time() > deadline:
                raise
            time.sleep(1)


def test_the_explorer_renders_and_moving_the_scale_along_its_receptor_flips_the_pronoun(tmp_path, jupyter_lab):
    from playwright.sync_api import expect, sync_playwright

    major = chromium_version()
    url, log, server = jupyter_lab
    prepared_notebook(tmp_path)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=2)  # a screenshot for slides
        try:
            open_lab(page, f"{url}/lab/tree/06_steering.ipynb", server, time.time() + 90)
            page.locator(".jp-Notebook").first.wait_for(timeout=90_000)
            expect(page.get_by_text("Python 3 (ipykernel) | Idle").first).to_be_visible(timeout=120_000)
            started = page.locator(".jp-InputArea-prompt").filter(has_text="[1]")
            for attempt in range(3):  # a click that lands before the kernel's session is wired up runs nothing
                page.get_by_role("menuitem", name="Run", exact=True).click()
                page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
                try:
                    expect(started.first).to_be_visible(timeout=30_000)
                    break
                except AssertionError:
                    if attempt == 2:
                        raise
            printed = page.locator(".widget-output").filter(has_text="OV direction").first
            expect(printed).to_contain_text("scale +0.0", timeout=600_000)
            sliders = page.locator(".widget-slider")
            assert sliders.count() == 4, "the explorer shows layer, head, direction and scale sliders"
            before = printed.inner_text()
            readout = sliders.nth(3).locator(".widget-readout")
            readout.click()
            page.keyboard.press("Control+A")
            page.keyboard.type("10")  # on the full run's strongest receptor (L26.H2, OV 2), flips he to she
            page.keyboard.press("Enter")
            expect(printed).to_contain_text("scale +10.0", timeout=60_000)
            after = printed.inner_text()
            assert after != before
            top = {key.strip(): tokens.split("|")[0].strip()  # partition at the first ": ": a token may hold ":"
                   for key, _, tokens in (line.partition(": ") for line in after.splitlines())
                   if key.strip() in ("before", "after")}
            assert top["after"] != top["before"], f"the receptor at +10 flips the first prompt's answer:\n{after}"
            explorer = page.locator(".widget-interact").first
            explorer.scroll_into_view_if_needed()
            shot = tmp_path / "explorer.png"
            explorer.screenshot(path=str(shot))
            if os.environ.get("SAVE_EXPLORER_SCREENSHOT"):
                shutil.copy(shot, SCREENSHOT)
        except Exception as error:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            raise AssertionError(f"{error}\nChromium {major}; page screenshot: {tmp_path / 'failure.png'}; "
                                 f"server log: {log.read_text()[-2000:]}") from None
        finally:
            browser.close()
    assert SCREENSHOT.exists(), "docs/explorer.png is missing: rerun with SAVE_EXPLORER_SCREENSHOT=1"
