"""The indexing thread gives way to the process's turns (S16-G-1): the pure rules and the gate.

The rules (how many texts a piece embeds, how long the thread waits for the turns on their
way before a step, whether it waits at all) are pure functions, checked by properties. The
gate (:class:`~pipecat_summarizer._recall.turn_gate.TurnGate`) is checked with a real
indexing thread (``embed_pieces`` in a thread of its own) and embedders that record what they
embedded: counted, never timed (the thread's progress is waited for by its counters).
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipecat_summarizer._recall import turn_gate, vector_cache
from pipecat_summarizer._recall.embedding import embedder_for, load_semantic_model
from pipecat_summarizer._recall.semantic_rows import Stale, embed_into, embed_pieces
from pipecat_summarizer._recall.turn_gate import (
    BUSY_SHARE,
    HOLD_FLOOR_S,
    HOLD_MOST_S,
    PIECE_FIRST,
    PIECE_MOST,
    PIECE_S,
    TurnGate,
    hold_cap,
    holds,
    piece_texts,
)
from pipecat_summarizer.params import SemanticRecallParams

costs = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)


@given(costs)
def test_a_piece_is_one_text_at_least_and_a_chunk_at_most(per_text_s):
    assert 1 <= piece_texts(per_text_s) <= PIECE_MOST
    assert piece_texts(None) == PIECE_FIRST


@given(costs, costs)
def test_a_dearer_text_never_makes_a_piece_longer(a, b):
    cheap, dear = sorted((a, b))
    assert piece_texts(dear) <= piece_texts(cheap)


@given(st.floats(min_value=1e-6, max_value=10.0, allow_nan=False))
def test_a_piece_of_several_texts_keeps_to_its_time(per_text_s):
    n = piece_texts(per_text_s)
    # a text dearer than the piece's time makes a piece of its own, else they fit together
    assert n == 1 or n * per_text_s <= PIECE_S * (1 + 1e-9)


@given(costs)
def test_the_cap_is_between_its_floor_and_its_ceiling(step_s):
    assert HOLD_FLOOR_S <= hold_cap(step_s) <= HOLD_MOST_S
    assert HOLD_FLOOR_S <= hold_cap(None) <= HOLD_MOST_S


@given(costs, costs)
def test_a_dearer_step_never_waits_less(a, b):
    cheap, dear = sorted((a, b))
    assert hold_cap(cheap) <= hold_cap(dear)


@given(st.floats(min_value=0.0, max_value=HOLD_MOST_S * BUSY_SHARE / (1 - BUSY_SHARE)))
def test_turns_that_never_pause_leave_the_index_its_share_only(step_s):
    # each step waits its cap first: the steps' share of the time, turns always on their way
    share = step_s / (hold_cap(step_s) + step_s) if step_s else 0.0
    assert share <= BUSY_SHARE + 1e-9


@given(st.integers(0, 50), st.integers(0, 50))
def test_the_thread_waits_for_turns_only_while_none_waits_for_an_index(on_way, waiting):
    assert holds(on_way, waiting) == (on_way > 0 and waiting == 0)


class _Recording:
    """Vectors of the texts' lengths; each call recorded with whether a turn was on its way
    (``gate.busy``) when it started; ``pausable``: it calls ``between`` ``layers`` times,
    the first time after ``first_layer`` is set, and waits for ``go`` then."""

    def __init__(self, gate: TurnGate, pausable: bool = False, layers: int = 3):
        self.gate = gate
        self.calls: list[tuple[list[str], bool]] = []
        self.layers_done = 0
        self.first_layer = threading.Event()
        self.go = threading.Event()
        self.go.set()
        if pausable:
            self.pausable = True
        self._layers = layers

    def embed(self, texts, between=None):
        self.calls.append((list(texts), self.gate.busy))
        for layer in range(self._layers if between is not None else 0):
            if layer == 0:
                self.first_layer.set()
                self.go.wait()
            between()
            self.layers_done += 1
        return np.array([[len(t), 1.0] for t in texts], np.float32)


def _until(done) -> None:
    # the thread's progress, read by its counters (a loop, not a timed assertion)
    while not done():
        time.sleep(0.001)


def _run(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


TEXTS = ["a much longer text than the others", "bb", "c", "dddd", "eeeeeeee"]


def test_the_vectors_come_back_in_the_texts_order_whatever_the_pieces():
    gate = TurnGate()
    model = _Recording(gate)
    vectors = embed_pieces(model, TEXTS, gate=gate)
    assert vectors[:, 0].tolist() == [len(t) for t in TEXTS]
    # shortest first, PIECE_FIRST texts then pieces sized by the measured cost
    assert [len(t) for t in model.calls[0][0]] == sorted(len(t) for t in TEXTS)[:PIECE_FIRST]
    assert sum(len(c[0]) for c in model.calls) == len(TEXTS)


def test_no_piece_starts_while_a_turn_is_on_its_way(monkeypatch):
    monkeypatch.setattr(turn_gate, "HOLD_FLOOR_S", 60.0)  # no cap within the test
    monkeypatch.setattr(turn_gate, "PIECE_MOST", 1)
    gate = TurnGate()
    model = _Recording(gate)
    with gate.turn():
        thread = _run(lambda: embed_pieces(model, TEXTS, gate=gate))
        _until(lambda: gate.waited == 1)
        assert model.calls == []  # the first piece waits for the turn
    thread.join()
    assert len(model.calls) == len(TEXTS)
    assert not any(busy for _, busy in model.calls)


def test_a_turn_that_starts_during_a_piece_holds_its_next_layer(monkeypatch):
    monkeypatch.setattr(turn_gate, "HOLD_FLOOR_S", 60.0)
    gate = TurnGate()
    model = _Recording(gate, pausable=True)
    model.go.clear()
    thread = _run(lambda: embed_pieces(model, ["one text"], gate=gate))
    model.first_layer.wait()
    with gate.turn():
        model.go.set()  # the piece goes on into its first layer, a turn now on its way
        _until(lambda: gate.waited == 1)
        assert model.layers_done == 0
    thread.join()
    assert model.layers_done == 3


def test_a_turn_always_on_its_way_never_starves_the_index(monkeypatch):
    monkeypatch.setattr(turn_gate, "HOLD_FLOOR_S", 0.001)  # the cap, quickly
    monkeypatch.setattr(turn_gate, "HOLD_MOST_S", 0.001)
    monkeypatch.setattr(turn_gate, "PIECE_MOST", 1)
    gate = TurnGate()
    model = _Recording(gate)
    with gate.turn():
        vectors = embed_pieces(model, TEXTS, gate=gate)
    assert len(vectors) == len(TEXTS)
    # each piece waited its cap before it ran
    assert gate.steps == gate.waited == gate.capped == len(TEXTS)


def test_a_turn_waiting_for_an_index_does_not_hold_it(monkeypatch):
    monkeypatch.setattr(turn_gate, "HOLD_FLOOR_S", 60.0)
    gate = TurnGate()
    model = _Recording(gate)
    with gate.turn(), gate.waiting_for_index():
        embed_pieces(model, TEXTS, gate=gate)
    assert gate.waited == 0
    assert len(model.calls) >= 1


def test_a_chunk_whose_index_went_stops_between_pieces():
    gate = TurnGate()
    model = _Recording(gate)
    seen = []

    def live() -> bool:
        seen.append(1)
        return len(seen) == 1  # the index is dropped after the first piece

    with pytest.raises(Stale):
        embed_pieces(model, TEXTS, live, gate=gate)
    assert len(model.calls) == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_has_no_turn_of_its_parent_on_its_way():
    with turn_gate.TURNS.turn():
        pid = os.fork()
        if pid == 0:  # the child: its parent's turn is not its own
            os._exit(0 if not turn_gate.TURNS.busy else 1)
        assert turn_gate.TURNS.busy
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_minilm_pauses_at_each_half_layer_and_embeds_the_same():
    options = SemanticRecallParams(model="minilm")
    load_semantic_model(options)
    model = embedder_for(options)
    pauses: list[int] = []
    texts = ["My sister called about Lisbon.", "The dog chewed the sofa on Friday."]
    paused = model.embed(texts, between=lambda: pauses.append(1))  # type: ignore[call-arg]
    # one batch, six layers, two halves each: a pause every few milliseconds of CPU
    assert len(pauses) == 12
    assert np.array_equal(paused, model.embed(texts))


def test_attack_a_forget_during_a_pieces_paused_layer_caches_nothing_of_the_caller():
    # S18: the caller is forgotten (the index goes stale) while a pausable piece waits at a
    # layer for a turn; the piece then ran to its end and its vectors went into the
    # process's vector cache under the forgotten caller, after the forget had emptied it
    # (until the index, back on its loop, dropped them again)
    gate = TurnGate()
    model = _Recording(gate, pausable=True)
    alive = {"on": True}
    model.go.clear()
    texts = ["my daughter Ines starts at Colegio Rosal"]
    thread_error: list[BaseException] = []

    def index() -> None:
        try:
            embed_into(model, texts, None, 0, owner="forgotten-caller", live=lambda: alive["on"])
        except BaseException as e:  # noqa: BLE001 (the thread's outcome, read below)
            thread_error.append(e)

    thread = _run(index)
    model.first_layer.wait()
    alive["on"] = False  # forgotten while the piece is under way
    model.go.set()
    thread.join()
    assert len(thread_error) == 1 and isinstance(thread_error[0], Stale)
    assert "forgotten-caller" not in vector_cache._cached_callers()
