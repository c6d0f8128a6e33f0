"""Print the google-genai field table that veadk_mem/policy/genai.py embeds as GENAI_SCHEMA.

VeADK dumps `event.content` with google-genai's pydantic models, so the memory string
depends on genai's field order, bytes fields, enums and float fields. vmem does not
depend on google-genai at run time; it carries this table instead. Regenerate it with
`.venv/bin/python bench/genai_schema.py` when google-genai changes (tests/test_policy_schema.py
fails when the table and the installed google-genai disagree).
"""

from __future__ import annotations

import enum
import pprint
import types as pytypes
import typing
from typing import Any

from pydantic import BaseModel


def _unwrap(annotation: Any) -> Any:
    """Drop Optional[...] around an annotation."""
    if typing.get_origin(annotation) in (typing.Union, pytypes.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _kind(annotation: Any, todo: list[type[BaseModel]]) -> tuple[str, Any]:
    """One field's kind: model, list, bytes, enum, float or any."""
    ann = _unwrap(annotation)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        todo.append(ann)
        return ("model", ann.__name__)
    if typing.get_origin(ann) is list:
        (item,) = typing.get_args(ann)
        item = _unwrap(item)
        if isinstance(item, type) and issubclass(item, BaseModel):
            todo.append(item)
            return ("list", item.__name__)
        return ("any", None)
    if ann is bytes:
        return ("bytes", None)
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return ("enum", tuple(str(m.value) for m in ann))
    if ann is float:
        return ("float", None)
    return ("any", None)


def genai_schema() -> dict[str, list[tuple[str, str, Any]]]:
    """For every genai model reachable from Content and Transcription: (field, kind, arg) in order."""
    from google.genai import types

    todo: list[type[BaseModel]] = [types.Content, types.Transcription]
    schema: dict[str, list[tuple[str, str, Any]]] = {}
    while todo:
        cls = todo.pop(0)
        if cls.__name__ in schema:
            continue
        schema[cls.__name__] = [(name, *_kind(info.annotation, todo)) for name, info in cls.model_fields.items()]
    return schema


if __name__ == "__main__":
    print("GENAI_SCHEMA: dict[str, list[tuple[str, str, Any]]] = ", end="")
    pprint.pprint(genai_schema(), width=116, sort_dicts=False)
