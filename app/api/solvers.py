"""Self-description: the estimators, their formulations and parameters (from the job schemas)."""

from __future__ import annotations

from fastapi import APIRouter

from app.schemas.params import ESTIMATORS, describe_params

router = APIRouter(tags=["solvers"])


@router.get("/solvers")
def list_solvers() -> dict:
    """Each estimator a job can train, with its parameters' types, ranges and defaults."""
    return {
        "items": [
            {
                "name": spec.name,
                "kind": spec.kind,
                "available": spec.available,
                "description": (spec.params.__doc__ or "").strip(),
                "formulations": spec.formulations,
                "params": describe_params(spec.params),
                "schema": spec.params.model_json_schema(),
            }
            for spec in ESTIMATORS.values()
        ],
        "next": None,
    }
