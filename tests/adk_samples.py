"""Sessions built with the real google-adk classes, covering every part and event kind."""

from __future__ import annotations

from typing import Any


def rich_adk_session(session_id: str = "s-rich", app: str = "demo_app", user: str = "u-1") -> Any:
    """An ADK Session holding text, thoughts, tools, media, code, transcriptions, errors and deltas."""
    from google.adk.events import Event, EventActions
    from google.adk.sessions import Session
    from google.genai import types

    t0 = 1_764_000_000.25
    events = [
        Event(
            id="e1",
            invocation_id="inv-1",
            author="user",
            timestamp=t0,
            content=types.Content(role="user", parts=[types.Part(text="I'm allergic to peanuts — 花生过敏.")]),
        ),
        Event(
            id="e2",
            invocation_id="inv-1",
            author="chef_agent",
            timestamp=t0 + 1,
            content=types.Content(
                role="model",
                parts=[
                    types.Part(text="Thinking about safe dishes", thought=True, thought_signature=b"\x00\xffsig"),
                    types.Part(
                        function_call=types.FunctionCall(
                            id="fc-1", name="find_recipes", args={"diet": "vegetarian", "n": 3}
                        )
                    ),
                ],
            ),
        ),
        Event(
            id="e3",
            invocation_id="inv-1",
            author="chef_agent",
            timestamp=t0 + 2,
            content=types.Content(
                role="user",
                parts=[
                    types.Part(
                        function_response=types.FunctionResponse(
                            id="fc-1", name="find_recipes", response={"result": ["dal", "ratatouille"]}
                        )
                    )
                ],
            ),
            actions=EventActions(state_delta={"user:diet": "vegetarian", "last_tool": "find_recipes"}),
        ),
        Event(
            id="e4",
            invocation_id="inv-2",
            author="user",
            timestamp=t0 + 3,
            content=types.Content(
                role="user",
                parts=[
                    types.Part(inline_data=types.Blob(mime_type="image/png", data=b"\x89PNG\r\n\x1a\n\x00")),
                    types.Part(file_data=types.FileData(mime_type="application/pdf", file_uri="gs://bucket/menu.pdf")),
                ],
            ),
        ),
        Event(
            id="e5",
            invocation_id="inv-2",
            author="coder",
            timestamp=t0 + 4,
            content=types.Content(
                role="model",
                parts=[
                    types.Part(executable_code=types.ExecutableCode(code="print(1+1)", language="PYTHON")),
                    types.Part(code_execution_result=types.CodeExecutionResult(outcome="OUTCOME_OK", output="2\n")),
                ],
            ),
        ),
        Event(
            id="e6",
            invocation_id="inv-3",
            author="user",
            timestamp=t0 + 5,
            input_transcription=types.Transcription(text="what can I eat", finished=True),
            output_transcription=types.Transcription(text="try the dal"),
        ),
        Event(
            id="e7",
            invocation_id="inv-3",
            author="chef_agent",
            timestamp=t0 + 6,
            error_code="RESOURCE_EXHAUSTED",
            error_message="quota exceeded",
            turn_complete=True,
            custom_metadata={"trace": {"id": "abc", "tags": ["x"]}},
        ),
    ]
    return Session(
        id=session_id,
        app_name=app,
        user_id=user,
        state={"user:diet": "vegetarian", "app:version": 2, "nested": {"snake_key": [1, 2]}},
        events=events,
        last_update_time=t0 + 6,
    )
