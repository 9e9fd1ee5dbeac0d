"""``python -m murk.report.export``: a run's per-sample read-outs (JSON Lines, Parquet, JSON Schema) and one model
card per model, under ``<output root>/export/`` (``make export``; :func:`murk.report.write_export`)."""

from __future__ import annotations

from murk import core
from murk.report._export import ExportRefused, write_export

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """``python -m murk.report.export [--output-dir DIR]``: write the export of an analysed run.

    A run not analysed yet, a cube and numbers file of two runs, or a missing pyarrow is refused in one line on
    stderr (exit status 2) and nothing is written; a full disk keeps the previous export (exit status 1).
    """
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m murk.report.export", description=main.__doc__)
    ap.add_argument("--output-dir", default=None, help="output root (default: outputs/ or $MURK_OUTPUT_DIR)")
    args = ap.parse_args(argv)
    root = core.output_dir(args.output_dir)
    try:
        written = write_export(root)
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
