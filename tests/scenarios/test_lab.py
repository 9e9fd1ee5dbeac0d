"""`make lab` as users drive it (issue 22): the real JupyterLab server, started the way `make lab` starts it.

`make lab` runs ``lab/jupyter-lab`` on ``notebooks/``; this test runs the same script on a copy of the
notebooks (the tracked files are never written) and asks the server, through its REST API, what a browser
would get: the default viewer of a ``.py`` file (``GET /lab/api/settings/...``) and what a save writes
(``GET`` then ``PUT /api/contents/...``, the request that Lab's save and autosave send).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from murk.core import _paths as paths

ROOT = paths.project_root()
LAUNCHER = ROOT / "lab" / "jupyter-lab"
DOCMANAGER = "@jupyterlab/docmanager-extension:plugin"
#: jupytext's notebook view of a text file (its JupyterLab extension registers this factory)
JUPYTEXT_FACTORY = "Jupytext Notebook"
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("*.py"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_lab_runs_the_launcher_this_test_runs():
    """The Makefile's lab recipe starts JupyterLab through lab/jupyter-lab (the one place its settings live)."""
    make = (ROOT / "Makefile").read_text()
    recipe = make.split("\nlab:", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"^\t.*\blab/jupyter-lab\b.*\bnotebooks/", recipe, re.M), recipe
    assert "jupyter lab" not in recipe, "make lab must start JupyterLab through lab/jupyter-lab, as this test does"


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory):
    """lab/jupyter-lab serving a copy of notebooks/ on a free port with a token: (base URL, token, copy)."""
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed: pip install -e '.[lab]' (make lab does)")
    tmp = tmp_path_factory.mktemp("lab")
    copy = tmp / "notebooks"
    shutil.copytree(ROOT / "notebooks", copy, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               # the developer's own Jupyter config, runtime files and Lab settings stay out of it
               JUPYTER_CONFIG_DIR=str(tmp / "jupyter-config"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp / "user-settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"))
    env.pop("JUPYTER_CONFIG_PATH", None)
    for var in ("MURK_OFFLINE", "MURK_COCO_DIR", "HF_HUB_OFFLINE", "MURK_OUTPUT_DIR"):   # `make lab` as printed
        env.pop(var, None)
    args = [str(LAUNCHER), "--no-browser", f"--port={port}", "--ServerApp.port_retries=0",
            "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", str(copy)]
    if os.geteuid() == 0:
        args.insert(1, "--allow-root")  # as make lab adds it
    log = open(tmp / "server.log", "w")
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"lab/jupyter-lab exited with {proc.returncode}:\n{(tmp / 'server.log').read_text()}")
            try:
                _request(base, token, "GET", "/api/status")
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer in 120 s:\n{(tmp / 'server.log').read_text()}")
                time.sleep(0.5)
        yield base, token, copy
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def _request(base: str, token: str, method: str, path: str, body=None, raw: bool = False):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, method=method, data=data,
                                 headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        text = r.read().decode()
    return text if raw else json.loads(text)


@pytest.mark.slow
def test_python_files_open_as_notebooks(lab_server):
    base, token, _ = lab_server
    plugin = _request(base, token, "GET", f"/lab/api/settings/{DOCMANAGER}")
    default = plugin["schema"]["properties"]["defaultViewers"]["default"]
    assert default.get("python") == JUPYTEXT_FACTORY, (
        f"default viewer of .py files: {default.get('python')!r}; lab/labconfig/default_setting_overrides.json "
        "was not read")
    assert "defaultViewers" not in plugin["settings"], "the user settings of this test's server are empty"
    # the factory's provider, jupytext's JupyterLab extension, is loaded into the page
    page = _request(base, token, "GET", "/lab", raw=True)
    config = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                  page, re.S).group(1))
    names = [e["name"] for e in config["federated_extensions"]]
    assert "jupyterlab-jupytext" in names, names
    assert "@jupyter-widgets/jupyterlab-manager" in names, f"ipywidgets' extension (tqdm bars): {names}"
    assert "jupyterlab-jupytext" not in config.get("disabledExtensions", [])


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_save_leaves_the_notebook_byte_identical(lab_server, name):
    """Open (GET as a notebook), attach the kernel as Lab does, save (PUT): the file is unchanged."""
    base, token, copy = lab_server
    before = (ROOT / "notebooks" / name).read_bytes()
    model = _request(base, token, "GET", f"/api/contents/{name}?type=notebook&content=1")
    assert model["type"] == "notebook" and model["format"] == "json", (model["type"], model["format"])
    nb = model["content"]
    assert len(nb["cells"]) > 3 and any(c["cell_type"] == "markdown" for c in nb["cells"])
    # what the browser adds when the notebook's kernel starts: the kernelspec from the server, language_info
    specs = _request(base, token, "GET", "/api/kernelspecs")
    kernel = nb["metadata"]["kernelspec"]["name"]
    assert kernel in specs["kernelspecs"], f"{name} asks for kernel {kernel!r}: {sorted(specs['kernelspecs'])}"
    spec = specs["kernelspecs"][kernel]["spec"]
    nb["metadata"]["kernelspec"] = {"display_name": spec["display_name"], "language": spec["language"],
                                    "name": kernel}
    nb["metadata"]["language_info"] = {"name": "python", "version": ".".join(map(str, sys.version_info[:3])),
                                       "mimetype": "text/x-python", "file_extension": ".py"}
    _request(base, token, "PUT", f"/api/contents/{name}", {"type": "notebook", "format": "json", "content": nb})
    after = (copy / name).read_bytes()
    assert after == before, (
        f"saving notebooks/{name} in JupyterLab rewrites it:\n"
        + "\n".join(difflib.unified_diff(before.decode().splitlines(), after.decode().splitlines(),
                                         "tracked", "saved", lineterm=""))[:3000])


# --- one writer per output root (issue 37): a JupyterLab kernel running a stage takes the root's lock ----------

def _lab_session(base: str, token: str, copy: Path, name: str):
    """A kernel for ``name`` as Lab starts it (``POST /api/sessions``) and a client on its connection file:
    (session id, client)."""
    from jupyter_client import BlockingKernelClient

    session = _request(base, token, "POST", "/api/sessions",
                       {"path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}})
    cf = copy.parent / "runtime" / f"kernel-{session['kernel']['id']}.json"
    deadline = time.monotonic() + 60
    while not cf.is_file() and time.monotonic() < deadline:
        time.sleep(0.2)
    kc = BlockingKernelClient(connection_file=str(cf))
    kc.load_connection_file()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    return session["id"], kc


def _execute(kc, code: str) -> tuple[dict, str]:
    """Run ``code`` in the kernel as a Lab cell: (the reply's content, its printed text)."""
    out: list[str] = []

    def hook(msg):
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    reply = kc.execute_interactive(code, timeout=600, output_hook=hook)
    return reply["content"], "".join(out)


def _first_cells(copy: Path, name: str, output_dir: Path) -> tuple[str, str]:
    """The notebook's parameters cell with ``output_dir`` set as a user sets it, and its first code cell after it."""
    import jupytext

    cells = [c for c in jupytext.read(copy / name).cells if c.cell_type == "code"]
    i = next(k for k, c in enumerate(cells) if "parameters" in c.metadata.get("tags", []))
    return cells[i].source + f"\noutput_dir = {str(output_dir)!r}\n", cells[i + 1].source


def _files(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_lab_kernel_is_refused_a_root_a_live_run_holds(lab_server, tmp_path):
    """Run All of the analyse notebook in Lab while a run holds its root: its first code cell refuses, naming the
    run and the parameters cell, and the root is unchanged."""
    from test_stagelock import SNAKEMAKE_HOLDER, _end, _popen

    base, token, copy = lab_server
    root = tmp_path / "outputs"
    (root / "notebooks").mkdir(parents=True)
    (root / "notebooks" / "04_analyse.ipynb").write_text("the live run's notebook\n")
    live = _popen(SNAKEMAKE_HOLDER, ROOT / ".snakemake", root)   # as the Snakefile's main process takes it
    sid = None
    try:
        json.loads(live.stdout.readline())
        before = _files(root)
        sid, kc = _lab_session(base, token, copy, "04_analyse.py")
        params, first = _first_cells(copy, "04_analyse.py", root)
        assert _execute(kc, params)[0]["status"] == "ok"
        reply, _ = _execute(kc, first)
        kc.stop_channels()
        assert reply["status"] == "error" and reply["ename"] == "RootInUse", reply
        assert f"pid {live.pid}" in reply["evalue"] and "parameters cell" in reply["evalue"], reply["evalue"]
        assert _files(root) == before
    finally:
        if sid:
            _request(base, token, "DELETE", f"/api/sessions/{sid}", raw=True)
        _end(live)


@pytest.mark.slow
def test_snakemake_is_refused_a_root_a_lab_kernel_holds_until_it_is_shut_down(lab_server, tmp_path):
    """A stage run in Lab keeps its root for the kernel's life: make demo into it is refused naming the kernel
    and its notebook; shutting the kernel down frees the root."""
    import stages
    from murk.pipeline import _locks as runlock

    base, token, copy = lab_server
    root = tmp_path / "outputs"
    sid, kc = _lab_session(base, token, copy, "01_select.py")
    try:
        params, first = _first_cells(copy, "01_select.py", root)
        assert _execute(kc, params)[0]["status"] == "ok"
        reply, _ = _execute(kc, first)
        assert reply["status"] == "ok", reply
        pid = int(_execute(kc, "import os; print(os.getpid())")[1])
        kc.stop_channels()
        r = stages.snakemake(root, n_items=1)
        text = r.stdout + r.stderr
        assert r.returncode != 0, text[-3000:]
        assert f"a JupyterLab kernel (pid {pid}, notebook 01_select.py" in text, text[-3000:]
        assert "Shut Down Kernel" in text, text[-3000:]
        assert not (root / "items.json").exists()
    finally:
        _request(base, token, "DELETE", f"/api/sessions/{sid}", raw=True)
    deadline = time.monotonic() + 60
    while runlock.root_holder(root, ROOT / ".snakemake") is not None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert runlock.root_holder(root, ROOT / ".snakemake") is None


# --- Run All in the browser after the offline demo (issue 39 item 5) ----------------------------------------------

def _browser():
    """Headless Chromium driven by selenium (:func:`stages.browser`)."""
    import stages

    return stages.browser()


def _until(driver, cond, timeout: float, what: str, shot: Path):
    """Poll ``cond()`` until it is truthy; on timeout save a screenshot to ``shot`` and fail naming ``what``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.5)
    driver.save_screenshot(str(shot))
    pytest.fail(f"JupyterLab in Chromium: {what} not seen in {timeout:.0f} s (screenshot {shot})")


@pytest.mark.slow
def test_run_all_of_the_analyse_notebook_in_chromium_after_the_offline_demo(lab_server, demo, tmp_path):
    """`make lab` as the README prints it (no MURK_OFFLINE, MURK_COCO_DIR or MURK_OUTPUT_DIR in Lab's
    environment) after the offline demo, driven as a user drives it: headless Chromium opens the analyse notebook
    (the .py file, in jupytext's notebook view), the menu's Run → Run All Cells runs every cell, and the page shows
    no error and no warning (stages.text_problems' rule over every stderr output), the one line that says where
    the models came from, and every code cell executed. The notebook's parameters cell is pointed at a copy of
    the demo's root, as a user edits it (the demo itself writes to outputs/ of the project, which Lab's default
    finds)."""
    from selenium.webdriver.common.by import By

    import stages

    base, token, copy = lab_server
    root = stages.copy_root(demo, tmp_path / "outputs")
    sub = copy / "run-all"
    sub.mkdir(exist_ok=True)
    text = (copy / "04_analyse.py").read_text(encoding="utf-8")
    assert "\noutput_dir = None\n" in text, "the analyse notebook's parameters cell sets output_dir = None"
    (sub / "04_analyse.py").write_text(text.replace("\noutput_dir = None\n", f"\noutput_dir = {str(root)!r}\n", 1),
                                       encoding="utf-8")
    # every cell rendered in the page (Lab 4 renders only the cells in view by default): a view setting only
    settings = copy.parent / "user-settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    import jupytext

    n_code = sum(c.cell_type == "code" for c in jupytext.read(sub / "04_analyse.py").cells)
    shot = tmp_path / "lab.png"
    driver = _browser()
    try:
        driver.get(f"{base}/lab/tree/run-all/04_analyse.py?token={token}")
        _until(driver, lambda: driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-CodeCell"), 120,
               "the notebook view of 04_analyse.py", shot)
        _until(driver, lambda: "Idle" in driver.find_element(By.CSS_SELECTOR, "#jp-main-statusbar").text, 120,
               "an idle kernel", shot)
        _until(driver, lambda: [e for e in driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-itemLabel")
                                if e.text == "Run"], 30, "the Run menu", shot)[0].click()
        _until(driver, lambda: [e for e in driver.find_elements(By.CSS_SELECTOR, ".lm-Menu-itemLabel")
                                if e.text == "Run All Cells"], 30, "Run All Cells", shot)[0].click()

        def finished():
            prompts = [e.text.strip() for e in driver.find_elements(By.CSS_SELECTOR, ".jp-CodeCell .jp-InputArea-prompt")]
            errors = driver.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output[data-mime-type="
                                                           "'application/vnd.jupyter.stderr'] .jp-RenderedText, "
                                                           ".jp-OutputArea-output .jp-RenderedText[data-mime-type="
                                                           "'application/vnd.jupyter.stderr']")
            busy = "[*]:" in prompts
            if not busy and len(prompts) == n_code and all(p not in ("", "[ ]:") for p in prompts):
                return prompts
            # Run All stops at an error: the cells after it keep their empty prompt
            if not busy and errors and any("Error" in e.text for e in errors) and "Idle" in driver.find_element(
                    By.CSS_SELECTOR, "#jp-main-statusbar").text:
                return prompts
            return None

        _until(driver, finished, 900, "every code cell executed", shot)
        stderr = [e.text for e in driver.find_elements(
            By.CSS_SELECTOR, "[data-mime-type='application/vnd.jupyter.stderr']")]
        page = driver.find_element(By.CSS_SELECTOR, ".jp-Notebook").text
        prompts = [e.text.strip() for e in driver.find_elements(By.CSS_SELECTOR, ".jp-CodeCell .jp-InputArea-prompt")]
        driver.save_screenshot(str(shot))
    finally:
        driver.quit()
    problems = [p for t in stderr for p in stages.text_problems(t)]
    problems += [t[:300] for t in stderr if "Traceback" in t or "Error" in t.split("\n", 1)[0]]
    assert not problems, f"Run All in Lab (screenshot {shot}):\n" + "\n".join(problems)
    assert len(prompts) == n_code and all(p not in ("", "[ ]:", "[*]:") for p in prompts), prompts
    assert "murk: models = None" in page, "the notebook says where its models came from"
    from murk import report
    from murk.core import _paths as mpaths

    models = json.loads(report.load_numbers(mpaths.numbers_file(root))["analysis.models"])
    assert [m["id"] for m in models] == [m["id"] for m in stages.DEMO_MODELS]   # the demo's three models
