"""The body of `POST /v1/audio/speech`, as OpenAI defines it.

Only the request's shape is checked here (types, ranges, known fields, known formats); what
the loaded model can honour (its voices, its pace, its text limit) is `offer.Offer`'s call,
because it depends on the pipeline and not on the protocol. Unknown fields are refused rather
than ignored: a knob the client sets must act, or say why not.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lab.serve.audio import FORMATS

SPEED_RANGE = (0.25, 4.0)


class VoiceRef(BaseModel):
    """OpenAI's form for a custom voice: `{"id": "..."}`."""

    model_config = ConfigDict(extra="forbid")
    id: str


class SpeechRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    input: str
    voice: str | VoiceRef
    instructions: str | None = None
    response_format: str = "wav"
    speed: float = Field(1.0, ge=SPEED_RANGE[0], le=SPEED_RANGE[1], allow_inf_nan=False)
    stream_format: Literal["audio", "sse"] = "audio"

    @field_validator("response_format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in FORMATS:
            raise ValueError(f"{value!r} is not written by this server; choose one of "
                             f"{list(FORMATS)}")
        return value

    @property
    def voice_name(self) -> str:
        return self.voice.id if isinstance(self.voice, VoiceRef) else self.voice
