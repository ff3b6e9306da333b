"""`llmcompare report RUN...`: the report, from saved run files only (build.py puts it together)."""

from llmcompare.report.build import build_report

__all__ = ["build_report"]
