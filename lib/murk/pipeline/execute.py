"""Run a stage notebook with papermill, quietly: ``python -m murk.pipeline.execute NOTEBOOK OUTPUT [papermill options]``.

This is papermill's own command line (its options and parameter parsing: ``-p name
value``, ``-y YAML``, ``--cwd``, ...), run with three changes that make a
successful run print nothing alarming and a failed one say what failed:

- a ``.py`` notebook (jupytext percent) is converted to ``<OUTPUT without .ipynb>.input.ipynb``
  beside the executed notebook and removed afterwards (papermill cannot read a ``.py``
  notebook; reading it from a pipe, papermill warns ``the file is not specified
  with any extension : -``);
- the kernel is managed by :class:`QuietKernelManager`: it talks to the kernel over
  Unix sockets in a private directory (ZeroMQ's ``ipc`` transport), not TCP ports
  (jupyter_client picks free ports and closes them before the kernel binds them, so
  kernels started at once by parallel jobs or test workers can take each other's
  port: the kernel dies at start-up and the run ends in ``Kernel didn't respond in
  60 seconds``; ipykernel also warns ``Kernel is running over TCP without
  encryption``), and it is not sent SIGINT at shutdown when it is idle
  (jupyter_client interrupts every kernel before shutting it down, and ipykernel 7
  logs ``ERROR | KeyboardInterrupt caught in kernel`` for it);
- the executed notebook is saved when the run starts, at a cell's start or end only
  when :data:`SAVE_EVERY_S` seconds have passed since the last save, during a long
  cell every 30 s (papermill's autosave), and when the run ends, failed or not
  (``PacedSaves``, :func:`_paced_saves`); papermill saves the whole notebook at every cell's start and
  end, which re-encodes every figure already in it twice a cell (the analyse
  notebook: 67 code cells, 4.9 MB at the end of the offline demo);
- papermill's cell-count bar is off: the stage's own loops draw their bars on the
  terminal (:mod:`murk.core`, through :data:`murk.core.ENV`), and papermill
  logs at WARNING (its ``Input Notebook:`` lines repeat Snakemake's job header);
  the kernel ignores tqdm's ``IProgress not found`` warning (:data:`IPROGRESS_WARNING`):
  libraries' ``tqdm.auto`` bars (transformers' ``Loading weights``) fall back to
  text in a headless notebook without ipywidgets, which is what it should show.

A cell that raises ends the run with exit status 1 and, on standard error, the
exception's name and message, the cell (its ``In [n]`` and source) and the path of
the executed notebook, which holds the whole traceback.

One writer per output root (:func:`murk.pipeline.hold_for_stage`): before papermill writes
anything (the executed notebook, the converted notebook), a stage notebook's run (one
whose parameters cell has ``output_dir``) holds the output root that ``-p output_dir``
names (default ``outputs/``) for its kernel, unless it is a job of the Snakemake run that
holds it. While another run holds that root (Snakemake, a stage run
by hand, a JupyterLab kernel), or holds the root that OUTPUT lies in, the run is refused
with exit status :data:`REFUSED` and one line naming that run, and writes nothing.

The Snakefile's rules run every stage this way; so does ``tests/stages.py``.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager

from murk import core

#: lines of a failed cell's source printed on the terminal (the executed notebook has it all)
SOURCE_LINES = 15

#: the kernel's warnings filter (PYTHONWARNINGS) for tqdm.auto's ``TqdmWarning: IProgress not found`` (no ipywidgets)
IPROGRESS_WARNING = "ignore:IProgress not found:Warning"

_kernel_idle = False   # set between cells by the engine's hooks (one notebook per process)

#: seconds between two saves of the executed notebook at cell boundaries (:func:`_paced_saves`); papermill's own
#: autosave during a cell that runs long is every 30 s
SAVE_EVERY_S = 10.0


class QuietKernelManager(AsyncKernelManager):
    """jupyter_client's kernel manager on Unix sockets, with no interrupt of an idle kernel at shutdown.

    The connection uses ZeroMQ's ``ipc`` transport: the kernel's five channels are
    sockets ``<dir>/kernel-1`` ... ``-5`` in a directory of its own
    (:func:`tempfile.mkdtemp`, mode 0700, so only the user can connect; removed at
    shutdown). No TCP port is chosen, so no other process can take one between
    jupyter_client choosing it and the kernel binding it (with TCP, kernels started
    at the same time by parallel Snakemake jobs or pytest workers occasionally die
    at start-up with ``Address already in use``). Where Unix sockets are not
    available (Windows) the transport stays TCP, encrypted with CurveZMQ keys the
    manager provisions where pyzmq has them (ipykernel otherwise warns ``Kernel is
    running over TCP without encryption``).

    ``shutdown_kernel`` interrupts the kernel first (SIGINT, so that a busy kernel
    can take the shutdown request); a kernel between cells is skipped, so ipykernel
    logs no KeyboardInterrupt. A busy kernel (a timeout, papermill interrupted) is
    interrupted as before.
    """

    def __init__(self, **kwargs):
        import tempfile

        import zmq

        super().__init__(**kwargs)
        self._ipc_dir = None
        if os.name == "posix" and zmq.has("ipc"):
            self._ipc_dir = tempfile.mkdtemp(prefix="murk-kernel-")
            self.transport = "ipc"
            self.ip = os.path.join(self._ipc_dir, "kernel")
        elif zmq.has("curve"):
            self.transport_encryption = "auto"

    async def _async_interrupt_kernel(self) -> None:
        if self.shutting_down and _kernel_idle:
            return
        await super()._async_interrupt_kernel()

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if not restart and self._ipc_dir is not None:
            import shutil

            shutil.rmtree(self._ipc_dir, ignore_errors=True)

    cleanup_resources = _async_cleanup_resources


@functools.lru_cache(maxsize=None)
def _paced_saves():
    """papermill's execution manager with paced saves (a class made once, on first use: :func:`main` imports
    papermill only after leaving out jsonschema's IRI check)."""
    from papermill.engines import NotebookExecutionManager

    class PacedSaves(NotebookExecutionManager):
        """papermill's execution manager, saving the executed notebook at a cell's start or end only when
        :data:`SAVE_EVERY_S` seconds have passed since the last save.

        The run's start and end (``notebook_start``, ``notebook_complete``: also after a cell raised, with its
        traceback) and papermill's autosave during a long cell (every ``autosave_cell_every`` s) save as
        before. A run killed between saves leaves the notebook as it was at most :data:`SAVE_EVERY_S`
        seconds earlier (at most 30 s within one long cell); its outputs are written by the stage itself.
        """

        _paced = False   # True while a cell boundary's bookkeeping runs (its save is then paced)

        def save(self, **kwargs):
            if self._paced and (self.now() - self.last_save_time).total_seconds() < SAVE_EVERY_S:
                return
            super().save(**kwargs)

        def _at_boundary(self, update, *args, **kwargs):
            self._paced = True
            try:
                update(*args, **kwargs)
            finally:
                self._paced = False

        def cell_start(self, cell, cell_index=None, **kwargs):
            self._at_boundary(super().cell_start, cell, cell_index, **kwargs)

        def cell_complete(self, cell, cell_index=None, **kwargs):
            self._at_boundary(super().cell_complete, cell, cell_index, **kwargs)

    return PacedSaves


def _engine():
    """papermill's nbclient engine, with :class:`QuietKernelManager`, merged stream outputs and paced saves."""
    from papermill.engines import NBClientEngine

    def busy(**_):
        global _kernel_idle
        _kernel_idle = False

    def idle(**_):
        global _kernel_idle
        _kernel_idle = True

    class QuietEngine(NBClientEngine):
        @classmethod
        def execute_notebook(cls, nb, kernel_name, output_path=None, progress_bar=True, log_output=False,
                             autosave_cell_every=30, **kwargs):
            # papermill's Engine.execute_notebook (2.7), with the execution manager that paces its saves
            nb_man = _paced_saves()(nb, output_path=output_path, progress_bar=progress_bar, log_output=log_output,
                                    autosave_cell_every=autosave_cell_every)
            nb_man.notebook_start()
            try:
                cls.execute_managed_notebook(nb_man, kernel_name, log_output=log_output, **kwargs)
            finally:
                nb_man.cleanup_pbar()
                nb_man.notebook_complete()
            return nb_man.nb

        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, **kwargs):
            # coalesce_streams: a text progress bar's redraws (\r) collapse to its last line in the notebook
            kwargs = {"kernel_manager_class": QuietKernelManager, "coalesce_streams": True,
                      "on_cell_execute": busy, "on_cell_executed": idle, "on_notebook_start": idle, **kwargs}
            return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)

    return QuietEngine


#: exit status of a run refused because another run holds its output root (:func:`murk.pipeline.hold_for_stage`)
REFUSED = 3

#: the name under which :func:`register_engine` registers murk's papermill engine
ENGINE = "murk-quiet"


def register_engine() -> str:
    """Register murk's papermill engine (:class:`QuietKernelManager`, merged streams) and return its name.

    ``papermill.execute_notebook(..., engine_name=register_engine())`` runs a notebook
    as ``python -m murk.pipeline.execute`` does (``tests/stages.py`` does so).
    """
    from papermill.engines import papermill_engines

    papermill_engines.register(ENGINE, _engine())
    return ENGINE


def input_notebook(notebook: str | os.PathLike, output: str | os.PathLike) -> Path:
    """The notebook papermill reads: ``notebook`` itself if it is an ``.ipynb``, else its conversion.

    A jupytext notebook (``.py``) is written as ``<output without .ipynb>.input.ipynb``
    beside ``output``.

    Raises
    ------
    FileNotFoundError
        ``notebook`` does not exist.
    """
    notebook = Path(notebook)
    if not notebook.is_file():
        raise FileNotFoundError(f"notebook {notebook} not found")
    if notebook.suffix == ".ipynb":
        return notebook
    import jupytext
    import nbformat

    out = Path(output)
    src = out.with_name((out.name[:-len(".ipynb")] if out.name.endswith(".ipynb") else out.name) + ".input.ipynb")
    src.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(jupytext.read(notebook), src)
    return src


def parameters_of(notebook: str | os.PathLike) -> set[str]:
    """The names a notebook's ``parameters`` cell assigns (``name = value`` lines), read without writing anything.

    Parameters
    ----------
    notebook : path
        A jupytext ``.py`` notebook or an ``.ipynb``.

    Returns
    -------
    set of str
        Empty when the notebook has no cell tagged ``parameters``.
    """
    import re

    import jupytext

    nb = jupytext.read(notebook)
    cells = [c for c in nb.cells if c.cell_type == "code" and "parameters" in c.get("metadata", {}).get("tags", [])]
    return {m.group(1) for c in cells for m in re.finditer(r"^([A-Za-z_]\w*)\s*=", c.source, re.M)}


def failure_report(err, notebook: str | os.PathLike, output: str | os.PathLike) -> str:
    """The terminal's lines for a cell that raised: its exception, the cell, the executed notebook.

    Parameters
    ----------
    err : papermill.PapermillExecutionError
        What papermill raised (``ename``, ``evalue``, ``exec_count``, ``source``).
    notebook, output : path
        The notebook run and its executed copy.

    Returns
    -------
    str
        Lines ending in a newline.
    """
    src = (err.source or "").rstrip("\n").splitlines()
    shown = src[:SOURCE_LINES] + ([f"... ({len(src) - SOURCE_LINES} more lines)"] if len(src) > SOURCE_LINES else [])
    cell = "\n".join("    " + line for line in shown)
    return (f"murk: {notebook} failed in cell In [{err.exec_count}]:\n{cell}\n"
            f"{err.ename}: {err.evalue}\n"
            f"murk: the executed notebook, with the traceback: {output}\n")


def main(argv: list[str] | None = None) -> int:
    """``python -m murk.pipeline.execute NOTEBOOK OUTPUT [papermill options]``; returns the exit status."""
    # jsonschema's optional IRI format check (rfc3987-syntax, which JupyterLab's jupyter-events installs) builds
    # a grammar when nbformat imports jsonschema: importing papermill and jupytext took 2.2 s of CPU with it and
    # 0.6 s without (2026-12-03), at the start of every stage. The notebook schema has no "format" keyword, so
    # nothing here uses the check: this process does without it (a module already imported is kept).
    sys.modules.setdefault("rfc3987_syntax", None)
    import click
    from papermill.cli import papermill as papermill_cli
    from papermill.exceptions import PapermillExecutionError

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0].startswith("-") or args[1].startswith("-"):
        print("usage: python -m murk.pipeline.execute NOTEBOOK OUTPUT [papermill options, e.g. -p name value]\n"
              "  NOTEBOOK: notebooks/<stage>.py (or an .ipynb); OUTPUT: the executed notebook (.ipynb)",
              file=sys.stderr)
        return 2
    notebook, output, rest = args[0], args[1], args[2:]
    if not Path(notebook).is_file():
        print(f"murk: notebook {notebook} not found", file=sys.stderr)
        return 2
    os.environ[core.ENV] = "terminal"   # inherited by the kernel: its loops draw their bars here too
    # a headless notebook wants text bars, which is what tqdm.auto falls back to without ipywidgets (imported by
    # transformers and huggingface_hub): its warning to install ipywidgets is not for this run
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), IPROGRESS_WARNING]))
    import papermill.cli as papermill_module

    from murk.pipeline import _locks as runlock

    converted: list[Path] = []
    execute_notebook = papermill_module.execute_notebook

    def hold_then_execute(input_path, output_path, parameters=None, **kwargs):
        # papermill has read its options (parameters as the kernel gets them) and written nothing yet: the output
        # root is held (or the run refused) first, then the .py notebook converted, then papermill runs
        stage, writes, command = Path(notebook).stem, [output_path], _command_line(args)
        if "output_dir" in parameters_of(notebook):   # a stage: it writes into its output root
            runlock.hold_for_stage((parameters or {}).get("output_dir"), stage=stage, writes=writes, command=command)
        else:
            runlock.refuse_writes(writes, stage=stage, command=command)
        converted.append(input_notebook(notebook, output))
        return execute_notebook(input_path=str(converted[0]), output_path=output_path, parameters=parameters,
                                **kwargs)

    papermill_module.execute_notebook = hold_then_execute
    try:
        papermill_cli.main([str(notebook), str(output), "--engine", register_engine(), "--no-progress-bar",
                            "--log-level", "WARNING", *rest], prog_name="python -m murk.pipeline.execute",
                           standalone_mode=False)
    except runlock.RootInUse as e:
        print(e, file=sys.stderr)
        return REFUSED
    except PapermillExecutionError as e:
        sys.stderr.write(failure_report(e, notebook, output))
        return 1
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Abort:
        return 130
    finally:
        papermill_module.execute_notebook = execute_notebook
        for src in converted:
            if Path(src) != Path(notebook):
                Path(src).unlink(missing_ok=True)
    return 0


def _command_line(args: list[str]) -> str:
    """``python -m murk.pipeline.execute ARGS``, for the output root's record (at most 300 characters)."""
    import shlex

    text = " ".join(["python -m murk.pipeline.execute", *map(shlex.quote, args)])
    return text if len(text) <= 300 else text[:297] + "..."


if __name__ == "__main__":
    sys.exit(main())
