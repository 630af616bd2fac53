"""`margin datasets`: upload, list, show and rm of datasets, and the reading of a DATASET
argument that `train`, `runs start` and `evaluate` take (a dataset id, or a file to upload
first); registered on the `margin` parser by `margin_client.cli.add_commands`."""

from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from margin_client import output

if TYPE_CHECKING:
    from margin_client.cli import AddCommand

UPLOAD_FORMATS = ("libsvm", "csv", "tsv", "parquet", "npz")


def add_datasets(commands: argparse._SubParsersAction, command: AddCommand) -> None:
    datasets = commands.add_parser("datasets", help="upload, list, show, remove datasets")
    sub = datasets.add_subparsers(dest="datasets_command", required=True)
    upload = command(sub, "upload", cmd_datasets_upload,
                     "upload a LIBSVM, CSV, TSV, Parquet or npz file")
    upload.add_argument("file", type=Path)
    upload.add_argument("--name", help="the dataset's name (default: the file's)")
    add_upload_options(upload)
    listing = command(sub, "list", cmd_datasets_list, "list datasets, newest first")
    add_limit(listing)
    command(sub, "show", cmd_datasets_show, "show a dataset").add_argument("id")
    command(sub, "rm", cmd_datasets_rm, "remove a dataset").add_argument("id")


def add_upload_options(parser: argparse.ArgumentParser, file_note: str = "") -> None:
    """How a file is read when uploaded: by `datasets upload`, and by the commands that take
    a dataset id or a file to upload first (`file_note` says so in their help)."""
    group = parser.add_argument_group(f"reading the file{file_note}")
    group.add_argument("--format", choices=UPLOAD_FORMATS,
                       help="default: from the file's extension, else recognised")
    group.add_argument("--label-column",
                       help="CSV, TSV, Parquet: the label column (default: label, else the first)")
    group.add_argument("--empty-cells", choices=("error", "zero"),
                       help="CSV, TSV, Parquet: an empty cell is an error (default) or 0")


def _upload(client, path: Path, **options: Any) -> dict:
    from margin_client.progress import upload_bar

    with upload_bar(path) as on_bytes:
        return client.datasets.upload(path, on_bytes=on_bytes, **options)


def dataset_ref(client, args, ref: str, model: str | None = None) -> str:
    """A dataset id as given, or the id of the file `ref` once uploaded: `dataset_refs` of one."""
    return dataset_refs(client, args, [ref], model)[0]


def dataset_refs(client, args, refs: list[str], model: str | None = None) -> list[str]:
    """The dataset ids of `refs`: each id as given, or the id of a file once uploaded. Every
    ref is checked before any file is uploaded, so that a bad one leaves nothing stored. With
    the `model` the datasets are for, a table lacking some of its features is named on stderr."""
    # the read options apply to each file given; an id beside a file is not refused for them
    options_read_a_file = any(not ref.startswith("ds_") for ref in refs)
    paths = [_checked_ref(args, ref, options_read_a_file) for ref in refs]
    # the model is asked before any upload, so that a wrong model id stores nothing either
    model_info = None if model is None or paths == [None] * len(refs) else client.models.get(model)
    return [ref if path is None else _stored(client, args, path, model_info)
            for ref, path in zip(refs, paths, strict=True)]  # fmt: skip


def _read_options(args) -> dict[str, Any]:
    return {"format": args.format, "label_column": args.label_column,
            "empty_cells": args.empty_cells}  # fmt: skip


def _checked_ref(args, ref: str, options_read_a_file: bool) -> Path | None:
    """None for a dataset id, else the file to upload. The read options given with stored
    datasets alone are refused: they were read when those were uploaded."""
    if ref.startswith("ds_"):
        if not options_read_a_file and any(v is not None for v in _read_options(args).values()):
            raise SystemExit(f"margin: --format, --label-column and --empty-cells read a file to "
                             f"upload; {ref} is a stored dataset, read when it was uploaded")
        return None
    path = Path(ref)
    if not path.is_file():  # every dataset id starts with ds_: this was meant as a file
        raise FileNotFoundError(errno.ENOENT, "No such file (nor a dataset id)", ref)
    return path


def _stored(client, args, path: Path, model: dict | None) -> str:
    dataset = _upload(client, path, **_read_options(args))
    if dataset.created:
        print(f"uploaded {path} as {dataset['id']}", file=sys.stderr)
    else:  # the same bytes, read the same way, were stored before: no second copy
        print(f"{path} was already stored as {dataset['id']} (named {dataset['name']!r}); "
              f"using it", file=sys.stderr)
    if model is not None:
        _warn_missing_features(path, dataset, model)
    return dataset["id"]


def _warn_missing_features(path: Path, dataset: dict, model: dict) -> None:
    """The service reads a table by name when all its columns are the model's features, and
    a feature it lacks as 0: the mistake this catches is the first column of an unlabelled
    file taken as the label, which the service would then leave out as silently."""
    columns, features = dataset.get("feature_names"), model.get("feature_names")
    if not columns or not features or not set(columns) <= set(features):
        return
    missing = [name for name in features if name not in set(columns)]
    if missing:
        shown = ", ".join(repr(name) for name in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        print(f"warning: {path} has no feature column for the model's {shown}{more}, read as 0 "
              f"(its label is the column --label-column names, else 'label', else the first)",
              file=sys.stderr)


def cmd_datasets_upload(client, args) -> None:
    dataset = _upload(client, args.file, name=args.name, format=args.format,
                      label_column=args.label_column, empty_cells=args.empty_cells)
    asked = args.name or args.file.name
    if dataset["name"] != asked:  # the same bytes and options again answer the stored dataset
        print(f"note: {args.file} was already stored as {dataset['id']}, named "
              f"{dataset['name']!r}: that dataset is shown, not one named {asked!r}",
              file=sys.stderr)
    output.emit(args, dataset, output.fields)


def cmd_datasets_list(client, args) -> None:
    items = client.datasets.list(limit=args.limit)
    output.emit(args, items, lambda rows: output.table(rows, output.DATASET_COLUMNS))


def cmd_datasets_show(client, args) -> None:
    output.emit(args, client.datasets.get(args.id), output.fields)


def cmd_datasets_rm(client, args) -> None:
    client.datasets.delete(args.id)
    output.emit(args, {"id": args.id, "deleted": True}, lambda _: print(f"removed {args.id}"))


def add_limit(parser: argparse.ArgumentParser, help: str = "items listed at most (50)") -> None:
    """`--limit`, in plain decimal digits; 0 is refused by the client's list, in one line."""
    parser.add_argument("--limit", type=plain_int, default=50, help=help)


def plain_int(text: str) -> int:
    """The type of every integer option: plain decimal digits, as the service reads them
    (int() also read `5_0` as 50, and `+5`, ` 5` or `٥` as 5)."""
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"expected a whole number in plain digits, got {text!r}")
    return int(text)
