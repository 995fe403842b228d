"""Transcription with speakers (``EngineConfig.diarize_model``): the engines' strategy driver
with a diarizer beside it.

``Diarizing`` wraps what the engines drive (the ``VadSplitter``, or ``Punctuating`` around it)
as ``Punctuating`` wraps the splitter. The life of a request that asks for speakers
(``TranscribeOptions.diarize``, on by default when the engine has a diarizer):

1. ``prepare`` (off the engine loop) decodes its audio once, at the model's rate, and hands the
   samples on as the request's source (the strategy decodes nothing again); the diarizer's copy
   is resampled where its rate differs, and ``known_speakers``' references are decoded and
   checked (2 to 10 s, at most 4, a diarizer that embeds voices);
2. ``add_request`` admits it and queues it for diarization;
3. the next ``step`` first diarizes every request queued since the step before in one
   ``DiarizationService.run`` (requests with the same speaker constraints share each
   ``Diarizer.diarize`` call, ``max_batch_size`` recordings a call), then steps the transcription:
   a request's turns are known before any of its segments is decoded, so each ``segment`` event
   goes out with its speakers (``oasr.diarization.assign``: WhisperX's rule), and the
   ``finished`` output carries them and the turns (``RequestOutput.diarization``);
4. a request whose diarization fails fails alone (an ``error`` event, its transcription aborted).

Options that need a diarizer (``diarize=True``, speaker counts, known speakers) are refused on
an engine without one (``check_speaker_options``), so none is silently ignored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oasr.diarization.assign import SpeakerIndex, assign_segment
from oasr.diarization.service import DiarizationJob, SpeakerConstraints, check_known_speakers
from oasr.engine.config import TranscribeOptions
from oasr.engine.decode.base import Request, StepEvent

if TYPE_CHECKING:
    from oasr.diarization.service import DiarizationService
    from oasr.diarization.types import Diarization

JOB = "oasr.diarization_job"  # Request.metadata key of a request's DiarizationJob


def wants_speakers(options: TranscribeOptions | None, service: DiarizationService | None) -> bool:
    """Whether a request with ``options`` is diarized on an engine with ``service``."""
    if options is None or service is None:
        return False
    return options.diarize is not False


def check_speaker_options(options: TranscribeOptions, service: DiarizationService | None) -> TranscribeOptions:
    """Refuse speaker options the engine cannot honour.

    Raises:
        ValueError: speakers asked of an engine without a diarizer, bad counts, a count the
            model cannot give, known speakers without a diarizer that embeds voices.
    """
    asked = [
        name
        for name in ("num_speakers", "min_speakers", "max_speakers", "known_speakers")
        if getattr(options, name) is not None
    ]
    if service is None:
        if options.diarize:
            asked.insert(0, "diarize")
        if asked:
            raise ValueError(
                f"{', '.join(asked)}: the engine has no diarization model (EngineConfig.diarize_model, "
                f"oasr transcribe --diarize MODEL, oasr serve --diarize-model DIR)"
            )
        return options
    if options.diarize is False and asked:
        raise ValueError(f"{', '.join(asked)} with diarize=False: speakers are not found")
    constraints = constraints_of(options)
    constraints.check(service.diarizer)
    known = options.known_speakers
    if known is not None:
        if not isinstance(known, dict) or not all(isinstance(k, str) for k in known):
            raise ValueError("known_speakers must map speaker names to reference audio")
        if not callable(getattr(service.diarizer, "embed", None)):
            check_known_speakers(service.diarizer, {})  # raises: no speaker embeddings
    return options


def constraints_of(options: TranscribeOptions) -> SpeakerConstraints:
    return SpeakerConstraints(options.num_speakers, options.min_speakers, options.max_speakers)


class Diarizing:
    """The engines' strategy driver with speakers (see the module's docstring).

    Args:
        inner: the driver it wraps (``VadSplitter`` or ``Punctuating``).
        service: the shared diarizer.
        sampling_rate: the ASR model's rate (a waveform source is at it).
        max_audio_s: ``EngineConfig.max_audio_s``, enforced as the audio is decoded.
    """

    def __init__(self, inner: Any, service: DiarizationService, sampling_rate: int, max_audio_s: float | None) -> None:
        self.inner = inner
        self.service = service
        self.sampling_rate = sampling_rate
        self.max_audio_s = max_audio_s
        self.queued: dict[str, DiarizationJob] = {}  # admitted, not yet diarized
        self.turns: dict[str, tuple[Diarization, SpeakerIndex]] = {}  # diarized, not yet finished
        self.diarized = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def streams_text(self) -> bool:
        return self.inner.streams_text

    @property
    def prompt_option(self) -> str | None:
        return self.inner.prompt_option

    def validate(self, options: TranscribeOptions) -> TranscribeOptions:
        return check_speaker_options(self.inner.validate(options), self.service)

    def prepare(self, request: Request) -> Request:
        """Decode the audio once (see the module's docstring), then the inner driver's prepare.

        Raises:
            ValueError: bad audio, or a known speaker's reference that is refused.
        """
        if not wants_speakers(request.options, self.service) or request.features is not None:
            return self.inner.prepare(request)
        from oasr.audio.io import load_audio

        samples = load_audio(request.source, self.sampling_rate, max_duration_s=self.max_audio_s)
        rate = self.service.sampling_rate
        audio = samples
        if rate != self.sampling_rate:
            audio = load_audio(samples, rate, input_sampling_rate=self.sampling_rate)
        known = None
        if request.options.known_speakers:
            known = {
                name: load_audio(source, rate, max_duration_s=60.0)
                for name, source in request.options.known_speakers.items()
            }
            check_known_speakers(self.service.diarizer, known)
        request.source = samples
        prepared = self.inner.prepare(request)
        prepared.metadata[JOB] = DiarizationJob(audio, constraints_of(request.options), known)
        return prepared

    def add_request(self, request: Request) -> None:
        job = request.metadata.get(JOB)
        if job is None and wants_speakers(request.options, self.service):
            request = self.prepare(request)  # admitted unprepared: prepare it here, as the splitter does
            job = request.metadata.get(JOB)
        self.inner.add_request(request)
        if job is not None:
            self.queued[request.request_id] = job

    def abort(self, request_id: str) -> bool:
        queued = self.queued.pop(request_id, None) is not None
        diarized = self.turns.pop(request_id, None) is not None
        return self.inner.abort(request_id) or queued or diarized

    def num_unfinished(self) -> int:
        return self.inner.num_unfinished()

    def stats(self) -> dict[str, float]:
        return {
            **self.inner.stats(),
            "requests_diarized": self.diarized,
            "diarize_calls": self.service.calls,
        }

    def step(self) -> list[StepEvent]:
        """Diarize the requests queued since the last step (one batched run), then one step of
        the inner driver with speakers written into its segments and outputs."""
        events: list[StepEvent] = []
        if self.queued:
            jobs, self.queued = self.queued, {}
            self.service.run(list(jobs.values()))
            for rid, job in jobs.items():
                if job.error is not None or job.result is None:
                    self.inner.abort(rid)
                    error = job.error or RuntimeError("the diarizer returned no result")
                    events.append(StepEvent(rid, "error", error=error))
                    continue
                self.diarized += 1
                self.turns[rid] = (job.result, SpeakerIndex(job.result.turns))
        for event in self.inner.step():
            known = self.turns.get(event.request_id)
            if known is not None:
                diarization, index = known
                if event.kind == "segment" and event.segment is not None:
                    assign_segment(event.segment, index)
                elif event.kind == "finished" and event.output is not None:
                    for segment in event.output.segments:
                        assign_segment(segment, index)
                    event.output.diarization = diarization
                    del self.turns[event.request_id]
                elif event.kind == "error":
                    del self.turns[event.request_id]
            events.append(event)
        return events


__all__ = ["Diarizing", "check_speaker_options", "wants_speakers"]
