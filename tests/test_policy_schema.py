"""GENAI_SCHEMA in veadk_mem/policy/genai.py matches the installed google-genai (a dev dependency)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from veadk_mem.policy import GENAI_SCHEMA

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.skipif(importlib.util.find_spec("google.genai") is None, reason="google-genai is not installed")
def test_embedded_genai_schema_is_current() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        from genai_schema import genai_schema
    finally:
        sys.path.remove(str(BENCH))
    assert genai_schema() == GENAI_SCHEMA, "google-genai changed: regenerate with bench/genai_schema.py"
