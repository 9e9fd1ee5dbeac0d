"""``python -m murk.report.export``: a run's per-sample read-outs (JSON Lines, Parquet, JSON Schema) and one model
card per model, under ``<output root>/export/`` (``make export``; :func:`murk.report.write_export`)."""

from __future__ import annotations

from murk import core
from murk.report._export import ExportRefused, write_export

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """``python -m murk.report.export [--output-dir DIR]``: write the export of an analysed run.

    A run not analysed yet, a cube and numbers file of two runs, or a missing pyarrow is refused in one line on
    stderr (exit status 2) and nothing is written, and so is a root that another live process writes
    (:func:`murk.core.hold_root_writer`); a full disk keeps the previous export (exit status 1).
    """
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m murk.report.export", description=main.__doc__)
    ap.add_argument("--output-dir", default=None, help="output root (default: outputs/ or $MURK_OUTPUT_DIR)")
    args = ap.parse_args(argv)
    root = core.output_dir(args.output_dir)
    words = "python -m murk.report.export"
    command = " ".join([words, *(sys.argv[1:] if argv is None else argv)])
    held = []

    def hold() -> None:  # right before the first write
        held.append(core.hold_root_writer(root, kind="murk.report.export", command=command, words=words))

    try:  # one writer per root: refused while another process writes it, unless this is a job of that run
        core.refuse_root_writer(root, words=words)  # before write_export's checks (it creates nothing)
        return _export(root, hold)
    except core.RootLocked as e:
        print(e, file=sys.stderr)
        return 2
    finally:
        if "taken" in held:  # an export by hand holds the root while it writes, not for its process's lifetime
            core.release_root_writer(root)


def _export(root, hold) -> int:
    """The export of ``root`` (``main``'s work; ``hold()`` takes the root's writer lock before the first write)."""
    import sys

    try:
        written = write_export(root, hold=hold)
    except ExportRefused as e:
        print(f"murk: make export (python -m murk.report.export) cannot export {root}: {e}; nothing was written",
              file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"murk: make export (python -m murk.report.export) needs {e.name or 'pyarrow'} for samples.parquet and "
              f"it is not installed; nothing was written; fix: make env (pyproject.toml lists it), then the same "
              f"command again", file=sys.stderr)
        return 2
    except core.DiskFullError as e:
        print(e, file=sys.stderr)
        return 1
    cards = [p for k, p in written.items() if k.startswith("card:")]
    print(f"exported {root / 'export'}: samples.jsonl, samples.parquet, samples.schema.json and "
          f"{len(cards)} model card(s) in model-cards/")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
