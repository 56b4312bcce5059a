"""What the loaded pipeline can honour, and the refusal, with its reason, of what it cannot.

A request field that cannot act is refused, never ignored, and the reason comes from the
family's own declaration (`lab.models.backend.Family`), so the server, the app and the CLI
give the same sentence:

- `voice`: a single-speaker family answers to the names in `SINGLE_SPEAKER_VOICES` only; a
  family with voices renders the one its config names, since a pipeline speaks one voice.
- `speed`: the pace of the Piper voice is its `length_scale` knob, fixed when the pipeline is
  built; a per-request speed would need a second pipeline, and resampling would shift the pitch
  along with the pace, so any speed but 1.0 is refused with the knob that does act.
- `instructions`: no family takes a style prompt.
- `input`: the frontend's own checks (`lab.frontend.validation.check_text`) with the config's
  `max_chars`, run before the request takes a slot.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.frontend.errors import TextError
from lab.frontend.validation import check_text
from lab.models.backend import Family
from lab.pipeline import Pipeline
from lab.serve.errors import invalid
from lab.serve.schema import SpeechRequest

SINGLE_SPEAKER_VOICES = ("default",)
NATURAL_SPEED = 1.0


@dataclass(frozen=True)
class Offer:
    """The models, voices and limits one server speaks with."""

    models: tuple[str, ...]
    voices: tuple[str, ...]
    family: Family
    configured_voice: str
    max_chars: int
    sample_rate: int

    @classmethod
    def of(cls, pipeline: Pipeline, model_name: str | None = None) -> Offer:
        family, config = pipeline.family, pipeline.config
        names = (model_name, family.name) if model_name else (family.name,)
        voices = (config.voice,) if family.supports("voice") else SINGLE_SPEAKER_VOICES
        return cls(tuple(dict.fromkeys(names)), voices, family, config.voice, config.max_chars,
                   pipeline.sample_rate)

    def vet(self, request: SpeechRequest) -> None:
        """Raise ApiError (400) naming the first field this server cannot honour."""
        for check in (self._model, self._voice, self._instructions, self._speed, self._input):
            check(request)

    def _model(self, request: SpeechRequest) -> None:
        if request.model not in self.models:
            raise invalid("model", f"unknown model {request.model!r}; this server serves "
                                   f"{list(self.models)}")

    def _voice(self, request: SpeechRequest) -> None:
        name = request.voice_name
        if name in self.voices:
            return
        if self.family.supports("voice"):
            why = (f"this server renders the voice its config names ({self.configured_voice!r}); "
                   "start another with --set voice=NAME")
        else:
            why = f"{self.family.name} has one: {self.family.unsupported['voice']}"
        raise invalid("voice", f"unknown voice {name!r}; {why}; ask for one of "
                               f"{list(self.voices)}")

    def _instructions(self, request: SpeechRequest) -> None:
        if request.instructions:
            raise invalid("instructions", f"instructions cannot act on {self.family.name}: it "
                                          "takes no style prompt; leave the field out")

    def _speed(self, request: SpeechRequest) -> None:
        speed = request.speed
        if speed == NATURAL_SPEED:
            return
        if not self.family.supports("length_scale"):
            why = f"{self.family.name} has no pace knob: {self.family.unsupported['length_scale']}"
        else:
            why = (f"the pace of {self.family.name} is its length_scale knob, fixed when the "
                   "model is loaded; for this speed start a server with length_scale divided "
                   f"by {speed:g} (--set length_scale=...)")
        raise invalid("speed", f"speed={speed:g} cannot act per request: {why}; send "
                               f"speed={NATURAL_SPEED:g} or leave it out")

    def _input(self, request: SpeechRequest) -> None:
        try:
            check_text(request.input, self.max_chars)
        except TextError as err:
            raise invalid("input", f"input: {err}") from err

