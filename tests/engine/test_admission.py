"""The admission model (``oasr.engine.admission``) against processor sharing worked by hand:
which requests fit their budgets, which would push an admitted one past its own, and when a
refused one is told to come back. No model, no clock: every call is given its ``now``."""

from __future__ import annotations

import math

import pytest

from oasr.engine.admission import HEADROOM, Admission, DecodeRate


def _rate(audio_per_s: float, speed: float = 1000.0, batch: int = 8, measured: int = 2) -> DecodeRate:
    """A ``DecodeRate`` that has measured ``measured`` times an engine rate of ``audio_per_s``
    (attributed both ways) and one request's ``speed`` (by default too fast to matter)."""
    rate = DecodeRate(batch)
    for i in range(measured):
        rate.finished(audio_per_s * 10.0, 10.0, 10.0, audio_per_s * 10.0 / speed, 10.0 * (i + 1))
    return rate


def test_a_burst_of_equal_requests_fills_the_budget_and_no_more():
    # Rate 1 s of audio per s, 10-s requests, budget 100 s (HEADROOM 0.8: predicted within 80 s).
    # Sharing: the k-th admitted finishes, with the others, after 10 k s: 8 fit, the 9th does not.
    adm = Admission(_rate(1.0))
    assert HEADROOM == 0.8
    for i in range(8):
        assert adm.refusal(10.0, 100.0, now=0.0) is None
        adm.admit(f"r{i}", 10.0, 100.0, now=0.0)
    retry = adm.refusal(10.0, 100.0, now=0.0)
    # The 9th fits once the 8 are done: 80 s from now.
    assert retry == pytest.approx(80.0)
    adm.promise(10.0, retry, now=0.0)
    # The 10th comes back after the 9th is served too: 8 x 10 + 10 more seconds of audio.
    assert adm.refusal(10.0, 100.0, now=0.0) == pytest.approx(90.0)
    assert adm.backlog_s == pytest.approx(80.0)


def test_a_short_request_beside_a_long_recording_is_not_held_behind_it():
    # A 1-h recording without deadline is being decoded; a 10-s request with a 100-s budget
    # shares the engine with it: (min(3600, 10) + 10) / 1 = 20 s <= 80 s.
    adm = Admission(_rate(1.0))
    adm.admit("long", 3600.0, None, now=0.0)
    assert adm.refusal(10.0, 100.0, now=0.0) is None
    # A 50-s request would need (50 + 50) / 1 = 100 s > 80 s: refused, and told to come back
    # when the recording is far enough along that it fits.
    assert adm.refusal(50.0, 100.0, now=0.0) is not None


def test_a_request_that_would_make_an_admitted_one_miss_is_refused():
    # A: 50 s of audio, budget 70 s (target 56 s); alone it is predicted at 50 s. A 10-s
    # request beside it would finish at 20 s (well within its own budget) but delay A by 10 s
    # to 60 s > 56 s: refused. A 5-s one delays A to 55 s: admitted.
    adm = Admission(_rate(1.0))
    adm.admit("a", 50.0, 70.0, now=0.0)
    assert adm.refusal(10.0, 1000.0, now=0.0) is not None
    assert adm.refusal(5.0, 1000.0, now=0.0) is None


def test_a_request_already_predicted_late_does_not_block_others():
    # Admitted alone into an empty engine although it cannot make its 4-s budget (600 s of
    # audio at 10 s/s): refusing others would not save it.
    adm = Admission(_rate(10.0))
    assert adm.refusal(600.0, 4.0, now=0.0) is None  # the engine holds nothing: admitted
    adm.admit("doomed", 600.0, 4.0, now=0.0)
    # An 11-s request with a 4-s budget beside it: (11 + 11) / 10 = 2.2 s <= 3.2 s.
    assert adm.refusal(11.0, 4.0, now=0.0) is None


def test_served_audio_follows_the_sharing_over_time():
    # Two 40-s requests at 1 s/s: after 30 s each has been served 15 s (25 s left each).
    # A 10-s request then finishes after (10 + 10 + 10) / 1 = 30 s, within 80 s of a 100-s
    # budget, and delays each of them by 10 s: from 30 + 50 = 80 s to 90 s, within their
    # targets of 0.8 x 200 = 160 s.
    adm = Admission(_rate(1.0))
    adm.admit("a", 40.0, 200.0, now=0.0)
    adm.admit("b", 40.0, 200.0, now=0.0)
    assert adm.refusal(10.0, 100.0, now=30.0) is None
    # The same request at t = 0 with a 40-s budget (target 32 s): (10 + 10 + 10) / 1 = 30 s fits ...
    adm2 = Admission(_rate(1.0))
    adm2.admit("a", 40.0, 200.0, now=0.0)
    adm2.admit("b", 40.0, 200.0, now=0.0)
    assert adm2.refusal(10.0, 40.0, now=0.0) is None
    # ... a 20-s one does not: (20 + 20 + 20) / 1 = 60 s > 32 s; it fits once a and b have been
    # served 20 s each (40 s of sharing): then (20 + 20 + 20) / 1 = 60 s still > 32 s, and once
    # they are done (80 s): 20 s <= 32 s. Retry-After: 80 s, but never more than the request's
    # budget (40 s): a prediction that far ahead is checked again when the client comes back.
    assert adm2.refusal(20.0, 40.0, now=0.0) == pytest.approx(40.0)


def test_no_request_is_predicted_faster_than_one_request_goes():
    # Measured while 8 requests shared each step: the engine decodes 8 s of audio per s, but
    # one request only 1 s per s. A 10-s request beside a 1-s one: sharing alone would say
    # (1 + 10) / 8 = 1.4 s; it takes at least 10 / 1 = 10 s. Budget 10 s (target 8 s): refused;
    # budget 20 s (target 16 s): admitted.
    adm = Admission(_rate(8.0, speed=1.0))
    adm.admit("a", 1.0, None, now=0.0)
    assert adm.refusal(10.0, 10.0, now=0.0) is not None
    assert adm.refusal(10.0, 20.0, now=0.0) is None
    # Served at the lower of 8 / 1 and 1 s per s: after 0.5 s, a has 0.5 s left (not 0).
    assert adm.refusal(14.5, 20.0, now=0.5) is None  # (0.5 + 14.5) / 8 and 14.5 / 1 <= 16
    assert adm.refusal(16.5, 20.0, now=0.5) is not None  # 16.5 / 1 > 16


def test_while_one_request_is_measured_retry_after_is_at_most_its_time():
    # Start-up decoded 1 s of silence in 4 s: the only measurement (0.25 s of audio per s; for
    # Retry-After, 8 x 0.25 = 2 s/s in a full batch). With three 10-s requests in the engine, a
    # fourth (budget 90 s: predicted (3 x 10 + 10) / 0.25 = 160 s > 72 s) would fit once they
    # are done, 3 x 10 / 2 = 15 s from now on that rate; it is told 4 s (come back when a real
    # request has been measured).
    rate = DecodeRate(batch=8)
    rate.finished(1.0, busy_s=4.0, share_s=4.0, life_s=4.0, clock=4.0)
    adm = Admission(rate)
    for i in range(3):
        adm.admit(f"r{i}", 10.0, 1000.0, now=0.0)
    assert adm.refusal(10.0, 90.0, now=0.0) == pytest.approx(4.0)
    # A second measurement at the same rate: the three are done 3 x 10 / 0.25 = 120 s from now;
    # no cap but the budget's (90 s).
    rate.finished(2.0, busy_s=8.0, share_s=8.0, life_s=8.0, clock=12.0)
    assert adm.refusal(10.0, 90.0, now=0.0) == pytest.approx(90.0)


def test_predictions_are_corrected_by_how_late_requests_finished():
    # A 10-s request alone at 1 s/s is predicted at 10 s; it finishes at 20 s: the model was
    # 2x optimistic, so every prediction is doubled from then on. A burst of 10-s requests with
    # a 100-s budget (80 s target) then fits 4 (2 x 10 k <= 80), not 8.
    adm = Admission(_rate(1.0))
    adm.admit("slow", 10.0, 100.0, now=0.0)
    adm.release("slow", now=20.0, finished=True)
    assert adm.correction == pytest.approx(2.0)
    admitted = 0
    while adm.refusal(10.0, 100.0, now=20.0) is None:
        adm.admit(f"r{admitted}", 10.0, 100.0, now=20.0)
        admitted += 1
    assert admitted == 4
    # A request whose client went away says nothing about the model.
    adm.release("r0", now=21.0)
    assert adm.correction == pytest.approx(2.0)


def test_released_requests_leave_the_model():
    adm = Admission(_rate(1.0))
    for i in range(8):
        adm.admit(f"r{i}", 10.0, 100.0, now=0.0)
    assert adm.refusal(10.0, 100.0, now=0.0) is not None
    adm.release("r0", now=0.0)
    assert adm.refusal(10.0, 100.0, now=0.0) is None


def test_nothing_measured_admits_on_the_queue_bound_alone():
    adm = Admission(DecodeRate(8))
    for i in range(100):
        assert adm.refusal(10.0, 1.0, now=0.0) is None
        adm.admit(f"r{i}", 10.0, 1.0, now=0.0)


def test_the_two_rates():
    # Two requests of 10 s decoded one after the other (FIFO) in 5 s each: the first finishes
    # after 5 s of busy time, the second 5 s later. Each was in the engine the whole first
    # 5 s (split: 2.5 s each) and the second alone for the next 5 s.
    rate = DecodeRate(batch=4)
    rate.finished(10.0, busy_s=5.0, share_s=2.5, life_s=5.0, clock=5.0)
    # One measurement only: admission takes it as it is (2 s/s); Retry-After assumes a full
    # batch of 4 would go as fast per request (8 s/s in all).
    assert rate.admit == pytest.approx(2.0)
    assert rate.speed == pytest.approx(2.0)
    assert rate.retry == pytest.approx(4 * 10.0 / 2.5)
    rate.finished(10.0, busy_s=5.0, share_s=7.5, life_s=10.0, clock=10.0)
    keep = math.exp(-5.0 / 60.0)  # the first measurement has faded by 5 s of busy time
    assert rate.admit == pytest.approx((10 * keep + 10) / (5 * keep + 5))
    assert rate.speed == pytest.approx((10 * keep + 10) / (5 * keep + 10))
    assert rate.retry == pytest.approx(max(rate.admit, (10 * keep + 10) / (2.5 * keep + 7.5)))


def test_a_refused_client_keeps_its_place_against_newer_ones():
    # 8 admitted fill the budget (see above). "old" is refused first, "new" after it; when room
    # for one request opens, the one that came first gets it, whichever comes back first.
    adm = Admission(_rate(1.0))
    for i in range(8):
        adm.admit(f"r{i}", 10.0, 100.0, now=0.0)
    old = adm.refusal(10.0, 100.0, now=0.0, key="old")
    adm.promise(10.0, old, now=0.0, key="old")
    new = adm.refusal(10.0, 100.0, now=1.0, key="new")
    adm.promise(10.0, new, now=1.0, key="new")
    assert new > old
    adm.release("r0", now=20.0)  # room for one
    # "new" comes back early: "old" is counted ahead of it, so it is refused ...
    assert adm.refusal(10.0, 100.0, now=20.0, key="new") is not None
    # ... while a never-refused newcomer has both ahead of it ...
    assert adm.refusal(10.0, 100.0, now=20.0, key="other") is not None
    # ... and "old", back at its time, is judged on the admitted requests alone.
    assert adm.refusal(10.0, 100.0, now=max(old, 20.0), key="old") is None
    adm.admit("old", 10.0, 100.0, now=max(old, 20.0), key="old")
    assert "old" not in adm.waiting and "new" in adm.waiting


def test_two_clients_with_the_same_audio_keep_two_places():
    adm = Admission(_rate(1.0))
    for i in range(8):
        adm.admit(f"r{i}", 10.0, 100.0, now=0.0)
    for now in (0.0, 1.0):  # the second is refused before the first is due back: a new place
        adm.promise(10.0, adm.refusal(10.0, 100.0, now=now, key="same"), now=now, key="same")
    assert len(adm.waiting["same"]) == 2
    first_due = adm.waiting["same"][0].due
    adm.promise(10.0, 5.0, now=first_due, key="same")  # the first back, refused again: same place
    assert len(adm.waiting["same"]) == 2 and adm.waiting["same"][0].first == 0.0


def test_a_refused_client_that_never_comes_back_is_forgotten():
    from oasr.engine.admission import GRACE_S

    adm = Admission(_rate(1.0))
    for i in range(8):
        adm.admit(f"r{i}", 10.0, 100.0, now=0.0)
    retry = adm.refusal(10.0, 100.0, now=0.0, key="gone")
    adm.promise(10.0, retry, now=0.0, key="gone")
    for i in range(8):
        adm.release(f"r{i}", now=retry)
    # Past its due time and the grace, it no longer holds a place: the engine is free.
    assert adm.refusal(10.0, 100.0, now=retry + GRACE_S + 1.0, key="newcomer") is None
    assert not adm.waiting


def test_fingerprint_identifies_the_content(tmp_path):
    import io

    import numpy as np

    from oasr.audio.io import fingerprint

    data = np.random.default_rng(0).bytes(3 << 20)  # past the head and tail a fingerprint reads
    other = data[:-1] + bytes([data[-1] ^ 1])  # one bit at the end
    path = tmp_path / "a.wav"
    path.write_bytes(data)
    f = io.BytesIO(data)
    f.seek(123)
    assert fingerprint(data) == fingerprint(str(path)) == fingerprint(f) == fingerprint(bytearray(data))
    assert f.tell() == 123
    assert fingerprint(other) != fingerprint(data)
    assert fingerprint(data[:-1]) != fingerprint(data)
    wave = np.zeros(16000, np.float32)
    assert fingerprint(wave) == fingerprint(wave.copy()) != fingerprint(np.zeros(16001, np.float32))
    assert fingerprint(str(tmp_path / "missing.wav")) is None
