"""`margin train` (start a training job, optionally following it) and `margin jobs`: list,
show, cancel and follow jobs; registered on the `margin` parser by
`margin_client.cli.add_commands`."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import TYPE_CHECKING, Any

from margin_client import output
from margin_client.cli_datasets import add_limit, add_upload_options, dataset_refs, plain_int

if TYPE_CHECKING:
    from margin_client.cli import AddCommand

TRAIN_FLAGS = {  # flag -> (parameter, type, help); the defaults are the service's (LinearSVC's)
    "--C": ("C", float, "the loss term's weight (default 1; --search chooses it)"),
    "--loss": ("loss", str, "squared_hinge (default), hinge; squared_error; LinearSVR: "
               "epsilon_insensitive (default), squared_epsilon_insensitive"),
    "--multi-class": ("multi_class", str, "ovr (default), crammer_singer, weston_watkins"),
    "--tol": ("tol", float, "stopping tolerance (default 0.1, LIBLINEAR's; LinearSVR 0.0001) "
              "on the solver's gap, which the job reports; the model also has its duality gap"),
    "--max-iter": ("max_iter", plain_int, "passes over the data at most (default 1000)"),
    "--epsilon": ("epsilon", float, "LinearSVR: width of the insensitive zone (default 0)"),
    "--time-limit": ("time_limit", float, "seconds the whole job may take (default: the "
                     "service's MAX_JOB_SECONDS)"),
}
LOOSE_CERTIFICATE = 0.01  # a model's relative duality gap above which its summary says so
# what a loose model stopped by a bound (its status) needs, rather than a lower tol
CUT_SHORT_ADVICE = {
    "max_iter": "raise --max-iter (or scale the features)",
    "time_limit": "raise --time-limit (or scale the features)",
}


def add_train(commands: argparse._SubParsersAction, command: AddCommand) -> None:
    train = command(commands, "train", cmd_train, "start a training job")
    train.add_argument("dataset", help="a dataset id, or a file to upload first")
    train.add_argument("--estimator", default="LinearSVC", help="LinearSVC, LinearSVR, ...")
    for flag, (name, kind, help) in TRAIN_FLAGS.items():
        train.add_argument(flag, dest=f"param_{name}", type=kind, metavar=name.upper(), help=help)
    train.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE",
        help="any other parameter (VALUE read as JSON when it parses), e.g. shrinking=false",
    )
    search = train.add_argument_group(
        "choosing C", "any of these makes the job a search: k-fold cross-validation along a "
        "warm-started path of C values; its model is calibrated unless --calibration none")
    search.add_argument("--search", action="store_true",
                        help="search C on the default grid (from LIBLINEAR's start value upward)")
    search.add_argument("--Cs", type=_positive_floats, metavar="C1,C2,...",
                        help="the values of C to try")
    search.add_argument("--cv", type=plain_int, metavar="K", help="folds (default 5)")
    search.add_argument("--scoring",
                        choices=("accuracy", "balanced_accuracy", "f1_macro", "roc_auc"))
    train.add_argument("--probability", action="store_true",
                       help="calibrate probabilities by an internal 5-fold at this C")
    train.add_argument("--calibration",
                       choices=("auto", "sigmoid", "softmax", "isotonic", "none"))
    train.add_argument("--validation", metavar="DATASET",
                       help="a classifier's validation dataset: an id, or a file to upload "
                       "first, read by the same options as DATASET's file")
    train.add_argument("--follow", action="store_true", help="draw the progress until it ends")
    add_upload_options(train, " (when DATASET or --validation is a file)")


def add_jobs(commands: argparse._SubParsersAction, command: AddCommand) -> None:
    jobs = commands.add_parser("jobs", help="list, show, cancel, follow jobs")
    sub = jobs.add_subparsers(dest="jobs_command", required=True)
    listing = command(sub, "list", cmd_jobs_list, "list jobs, newest first")
    listing.add_argument("--status", action="append", help="only jobs in this status")
    add_limit(listing)
    command(sub, "show", cmd_jobs_show, "show a job").add_argument("id")
    command(sub, "cancel", cmd_jobs_cancel, "cancel a job").add_argument("id")
    command(sub, "follow", cmd_jobs_follow, "draw a job's progress").add_argument("id")


def _positive_floats(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers separated by commas, got {text!r}"
        ) from None
    if not all(v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"every C must be > 0, got {text!r}")
    if not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(f"every C must be a finite number, got {text!r}")
    return values


def _train_params(args) -> dict[str, Any]:
    params = {
        name: getattr(args, f"param_{name}")
        for name, _, _ in TRAIN_FLAGS.values()
        if getattr(args, f"param_{name}") is not None
    }
    for item in args.param:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"margin train: --param expects NAME=VALUE, got {item!r}")
        try:
            params[name] = json.loads(raw)
        except ValueError:
            params[name] = raw
    search = {
        name: value
        for name, value in (("Cs", args.Cs), ("cv", args.cv), ("scoring", args.scoring))
        if value is not None
    }
    if search or args.search:
        params["search"] = {**(params.get("search") or {}), **search}
    if args.probability:
        params["probability"] = True
    if args.calibration:
        params["calibration"] = args.calibration
    return params


def cmd_train(client, args) -> int:
    refs = [args.dataset, args.validation] if args.validation else [args.dataset]
    dataset, *validation = dataset_refs(client, args, refs)
    job = client.jobs.create(
        dataset, args.estimator, _train_params(args),
        validation_dataset=validation[0] if validation else None,
    )
    if not args.follow:
        output.emit(args, job.info, job_fields)
        return 0
    return _follow(client, args, job)


def _follow(client, args, job) -> int:
    job.wait(progress=True)
    output.emit(args, job.info, _job_summary)
    if not args.json and job.status == "succeeded" and job.model_id:
        import httpx

        from margin_client._http import MarginError

        try:
            _certificate_note(client.models.get(job.model_id))
        except (MarginError, httpx.HTTPError):  # the job's outcome is the answer, not the hint
            pass
    return 0 if job.status == "succeeded" else 1


def _certificate_note(model: dict) -> None:
    """A line when the stored weights are certified only loosely: the stopping rule can hold on
    unscaled features while the objective is still far from the optimum."""
    gap = model.get("duality_gap")
    if gap is not None and gap > LOOSE_CERTIFICATE:
        # a solve cut short by its bound is loose for that reason: a lower tol would not help
        advice = CUT_SHORT_ADVICE.get(model.get("status"), "scale the features or lower --tol")
        print(f"note: the model's duality gap is {output.text(gap)}: its objective is within "
              f"{output.text(100 * gap)}% of the optimum; {advice} for a tighter model",
              file=sys.stderr)


def _job_summary(job: dict) -> None:
    console = output.console()
    progress = job.get("progress") or {}
    line = f"{job['id']} {job['status']}"
    if job.get("cancel_requested") and job["status"] == "running":
        line += " (cancel requested: it stops within one iteration)"
    if progress:
        gap = output.text(progress.get("gap"))
        line += f" after {progress.get('iteration')} iterations, gap {gap}"
        if (job.get("params") or {}).get("search") and progress.get("stage") == "refit":
            line += f" (refit at the chosen C {output.text(progress.get('C'))})"
    if job["status"] == "succeeded" and job.get("converged") is False:
        line += f"; not converged ({job.get('stop_reason')}: gap above tol {job.get('tol')})"
    if job.get("model_id"):
        line += f" -> model {job['model_id']}"
    console.print(output.plain(line), soft_wrap=True)  # the model id stays on its line
    if job.get("error"):
        console.print(output.plain(f"error: {job['error']}"))


def cmd_jobs_list(client, args) -> None:
    items = client.jobs.list(status=args.status, limit=args.limit)
    output.emit(args, items, lambda rows: output.table(rows, output.JOB_COLUMNS))


def job_fields(job: dict) -> None:
    """A job as name and value lines. A search's params.C is the service's default (or the C
    asked), which the search does not train: C shows as the search's, with the C it chose once
    the refit at it has begun (the API's params stay as stored)."""
    params = job.get("params") or {}
    if params.get("search") is not None:
        progress = job.get("progress") or {}
        chosen = progress.get("C") if progress.get("stage") == "refit" else None
        C = "chosen by the search" + ("" if chosen is None else f": {output.text(chosen)}")
        job = {**job, "params": {**params, "C": C}}
    output.fields(job)


def cmd_jobs_show(client, args) -> None:
    output.emit(args, client.jobs.get(args.id).info, job_fields)


def cmd_jobs_cancel(client, args) -> None:
    job = client.jobs.get(args.id).cancel()
    output.emit(args, job.info, _job_summary)


def cmd_jobs_follow(client, args) -> int:
    return _follow(client, args, client.jobs.get(args.id))
